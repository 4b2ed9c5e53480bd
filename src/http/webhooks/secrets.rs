//! `POST /webhook-endpoints/{uuid}/rotate-secret`: a new signing secret, shown once.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use crate::http::json::OptionalJsonBody;
use crate::http::path::Path;
use crate::ops::webhooks as ops;
use switchboard_domain::scope::Scope;

use super::endpoints::EndpointOut;
use super::{deps, path_uuid};
use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::state::AppState;

/// Body of `POST .../rotate-secret` (optional: no body means the default grace period).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct RotateSecretBody {
    /// How long the old secret keeps signing deliveries beside the new one: a duration such as
    /// `24h`, `90m` or `7d` (at most `7d`; `0s` drops the old secret at once). Default `24h`.
    #[schema(example = "24h")]
    pub grace_period: Option<String>,
}

/// Replace the signing secret. The new secret is in the answer, shown only now. During the
/// grace period (default 24 h) every delivery is signed with the new and the old secret (one
/// `v1=` value each in `X-Switchboard-Signature`, one `v1,` value each in `webhook-signature`);
/// after it, with the new one only.
#[utoipa::path(
    post,
    path = "/api/v1/integrations/webhook-endpoints/{uuid}/rotate-secret",
    tag = "webhooks",
    security(("bearer" = ["webhooks:write"])),
    params(("uuid" = String, Path, description = "The endpoint's UUID.")),
    request_body(content = Option<RotateSecretBody>, description = "Optional: the grace period."),
    responses(
        (status = 200, description = "The endpoint with its new signing secret.", body = EndpointOut),
        (status = 404, description = "No such endpoint in this organization.", body = ErrorBody),
        (status = 422, description = "The grace period is not a duration of at most 7 days.", body = ErrorBody),
    )
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: Result<OptionalJsonBody<RotateSecretBody>, ApiError>,
) -> ApiResult<Json<EndpointOut>> {
    principal.require(Scope::WebhooksWrite)?;
    let uuid = path_uuid(&uuid, "The webhook endpoint")?;
    let OptionalJsonBody(body) =
        super::body_for_endpoint(&state, principal.org_id, uuid, body).await?;
    let grace = match body.grace_period.as_deref() {
        None => ops::DEFAULT_ROTATION_GRACE,
        Some(text) => match switchboard_domain::time::parse_duration(text) {
            Ok(d) if d <= ops::MAX_ROTATION_GRACE => d,
            Ok(_) => {
                return Err(ApiError::validation_field(
                    "grace_period",
                    "must be at most 7d",
                ));
            }
            Err(e) => return Err(ApiError::validation_field("grace_period", e)),
        },
    };
    let (record, secret) = ops::rotate_secret(
        &deps(&state),
        principal.org_id,
        uuid,
        grace,
        principal.actor(),
    )
    .await?;
    let mut out = EndpointOut::from(&record);
    out.signing_secret = Some(secret);
    Ok(Json(out))
}
