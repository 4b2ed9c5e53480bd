//! Webhooks: the event catalogue ([`events`]), endpoints ([`endpoints`], [`secrets`]), and the
//! delivery ledger ([`deliveries`]). The rules are `ops::webhooks`'s.
//!
//! * `GET /webhook-events` (webhooks:read): the 146 events of the catalogue.
//! * `GET|POST /webhook-endpoints`, `GET|PUT|DELETE /webhook-endpoints/{uuid}`,
//!   `POST /webhook-endpoints/{uuid}/rotate-secret`, `POST /webhook-endpoints/{uuid}/test`.
//! * `GET /webhook-deliveries`, `GET /webhook-deliveries/{delivery_id}`,
//!   `POST /webhook-deliveries/{delivery_id}/retry`.

pub mod deliveries;
pub mod endpoints;
pub mod events;
pub mod feed;
pub mod recovery;
pub mod secrets;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use uuid::Uuid;

use crate::ops::webhooks::{Deps, WebhookError};
use crate::url_safety::Policy;
use switchboard_domain::webhooks::endpoint::EndpointStatus;
use switchboard_store::webhooks::DeliveryStatus;

use deliveries::{
    AttemptOut, DeliveryDetailOut, DeliveryOut, get_delivery, list_deliveries, retry_delivery,
};
use endpoints::{
    CreateEndpointBody, EndpointOut, TestOut, UpdateEndpointBody, create_endpoint, delete_endpoint,
    get_endpoint, list_endpoints, test_endpoint, update_endpoint,
};
use events::list_events;
use secrets::rotate_secret;

use super::error::{ApiError, ApiResult};
use super::state::AppState;

const BASE: &str = "/api/v1/integrations";

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Validation(errors) => ApiError::validation(errors),
            WebhookError::UnsafeUrl(m) => {
                // Everything but credentials is lifted by the development setting: say so.
                let hint = (!m.contains("credentials")).then_some(
                    "For local development, run `switchboard serve --demo` or set SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS=true (never in production).",
                );
                let message = match hint {
                    Some(h) => format!("The endpoint URL is not allowed: {m}. {h}"),
                    None => format!("The endpoint URL is not allowed: {m}."),
                };
                // One details shape for every error that points at fields (CONVENTIONS).
                let fields = serde_json::json!([{ "field": "url", "issue": m }]);
                ApiError::unprocessable("unsafe_url", message).with_details(match hint {
                    Some(h) => serde_json::json!({ "fields": fields, "hint": h }),
                    None => serde_json::json!({ "fields": fields }),
                })
            }
            WebhookError::NotFound(what) => ApiError::not_found(what),
            WebhookError::EndpointDeleted => ApiError::new(
                StatusCode::CONFLICT,
                "endpoint_deleted",
                "The endpoint of this delivery has been deleted; it cannot be redelivered.",
            ),
            WebhookError::EndpointDisabled => ApiError::unprocessable(
                "endpoint_disabled",
                "The endpoint is disabled; re-enable it (PUT with \"status\": \"active\") and recover again.",
            ),
            WebhookError::Store(e) => e.into(),
        }
    }
}

/// The body of an operation on one endpoint, once it is known to be one of this organization's:
/// an unknown endpoint (or another organization's) is a 404 whatever its body, as on the
/// operations without one. A good body costs nothing more.
pub(crate) async fn body_for_endpoint<T>(
    state: &AppState,
    org_id: i64,
    uuid: Uuid,
    body: Result<T, ApiError>,
) -> ApiResult<T> {
    match body {
        Ok(b) => Ok(b),
        Err(e) => {
            crate::ops::webhooks::get_endpoint(
                &deps(state),
                org_id,
                uuid,
                crate::ops::webhooks::Kind::Endpoint,
            )
            .await?;
            Err(e)
        }
    }
}

pub(crate) fn deps(state: &AppState) -> Deps<'_> {
    Deps {
        store: state.store.as_ref(),
        secrets: &state.secrets,
        clock: state.clock.as_ref(),
        policy: Policy {
            allow_private: state.config.webhook_allow_private_targets,
        },
        lookup: &state.webhook_lookup,
    }
}

/// A UUID from the path; anything else cannot name a resource of the organization (404).
pub(crate) fn path_uuid(raw: &str, what: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(what))
}

pub use crate::http::pagination::PageParams;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(&format!("{BASE}/webhook-events"), get(list_events))
        .route(
            &format!("{BASE}/webhook-events/{{name}}/trigger"),
            post(events::trigger_event),
        )
        .route(
            &format!("{BASE}/webhook-endpoints"),
            get(list_endpoints).post(create_endpoint),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}"),
            get(get_endpoint)
                .put(update_endpoint)
                .delete(delete_endpoint),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}/rotate-secret"),
            post(rotate_secret),
        )
        // The rate limiter classifies this route template as `tests`.
        .route(
            "/api/v1/integrations/webhook-endpoints/{uuid}/test",
            post(test_endpoint),
        )
        .route(&format!("{BASE}/webhook-deliveries"), get(list_deliveries))
        .route(
            &format!("{BASE}/webhook-deliveries/{{delivery_id}}"),
            get(get_delivery),
        )
        .route(
            &format!("{BASE}/webhook-deliveries/{{delivery_id}}/retry"),
            post(retry_delivery),
        )
        .route(
            &format!("{BASE}/webhook-deliveries/retry"),
            post(recovery::retry_deliveries),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}/recover"),
            post(recovery::recover),
        )
        .route(
            &format!("{BASE}/webhook-endpoints/{{uuid}}/recoveries/{{recovery_id}}"),
            get(recovery::get_recovery),
        )
        .route(&format!("{BASE}/event-feed"), get(feed::event_feed))
        .route(&format!("{BASE}/event-stream"), get(feed::event_stream))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        events::list_events,
        events::trigger_event,
        endpoints::list_endpoints,
        endpoints::create_endpoint,
        endpoints::get_endpoint,
        endpoints::update_endpoint,
        endpoints::delete_endpoint,
        secrets::rotate_secret,
        endpoints::test_endpoint,
        deliveries::list_deliveries,
        deliveries::get_delivery,
        deliveries::retry_delivery,
        recovery::recover,
        recovery::get_recovery,
        recovery::retry_deliveries,
        feed::event_feed,
        feed::event_stream
    ),
    components(schemas(
        events::EventTypeOut,
        events::TriggerOut,
        EndpointOut,
        EndpointStatus,
        switchboard_domain::webhooks::endpoint::EndpointOrdering,
        endpoints::EndpointWarning,
        endpoints::TestBody,
        recovery::RecoverBody,
        recovery::RecoveryOut,
        recovery::BulkRetryBody,
        recovery::BulkRetryOut,
        CreateEndpointBody,
        secrets::RotateSecretBody,
        UpdateEndpointBody,
        TestOut,
        DeliveryOut,
        DeliveryStatus,
        AttemptOut,
        DeliveryDetailOut
    ))
)]
pub struct WebhooksApi;
