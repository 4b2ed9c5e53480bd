//! `POST /webhook-endpoints/{uuid}/rotate-secret`: a new signing secret, shown once.

use axum::Json;
use axum::extract::State;

use crate::http::path::Path;
use crate::ops::webhooks as ops;
use switchboard_domain::scope::Scope;

use super::endpoints::EndpointOut;
use super::{deps, path_uuid};
use crate::http::auth::Principal;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::state::AppState;

/// Replace the signing secret. The new secret is in the answer, shown only now; every attempt
/// from now on (retries included) is signed with it.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/rotate-secret",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    responses(
        (status = 200, description = "The endpoint with its new signing secret.", body = EndpointOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
    )
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<EndpointOut>> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let (record, secret) =
        ops::rotate_secret(&deps(&state), principal.org_id, uuid, principal.actor()).await?;
    let mut out = EndpointOut::from(&record);
    out.signing_secret = Some(secret);
    Ok(Json(out))
}
