//! The legacy surface under `/api` (specification 1.4, 5.5, 6.2 and 9.5): the routes an
//! integrator of the older API keeps using. Scoped keys need the matching scope on every
//! route; keys from before scopes (imported legacy keys, keys without a scope list) are
//! wildcard keys. Each route shares its rules and its code with the v1 route that replaces
//! it; `docs/legacy.md` is the migration guide, route by route.

pub mod campaigns;
pub mod canned_replies;
pub mod contacts;
pub mod flows;
pub mod groups;
pub mod sends;
pub mod templates;
pub mod webhooks;

use axum::Router;
use utoipa::OpenApi;
use uuid::Uuid;

use super::error::{ApiError, ApiResult};
use super::state::AppState;

/// Every legacy route (authenticated like the v1 routes).
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(sends::router())
        .merge(webhooks::router())
        .merge(contacts::router())
        .merge(groups::router())
        .merge(canned_replies::router())
        .merge(templates::router())
        .merge(campaigns::router())
        .merge(flows::router())
}

/// The legacy routes' part of the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        sends::send,
        sends::send_media,
        sends::send_template,
        sends::list_messages,
        sends::list_channels,
        webhooks::list_records,
        webhooks::create_record,
        webhooks::delete_record,
    ),
    components(schemas(webhooks::LegacyWebhookRequest, webhooks::LegacyWebhookOut)),
    tags((name = "legacy", description = "Older routes under /api, kept for existing integrations; see docs/legacy.md for the v1 route that replaces each.")),
    modifiers(&LegacyParts)
)]
pub struct LegacyApi;

/// Merges each legacy resource's paths and schemas into the legacy part of the document.
struct LegacyParts;

impl utoipa::Modify for LegacyParts {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.merge(contacts::ContactsApi::openapi());
        doc.merge(groups::GroupsApi::openapi());
        doc.merge(canned_replies::CannedRepliesApi::openapi());
        doc.merge(templates::TemplatesApi::openapi());
        doc.merge(campaigns::CampaignsApi::openapi());
        doc.merge(flows::FlowsApi::openapi());
    }
}

/// A resource UUID from the path: a malformed one names no resource (404).
pub(crate) fn path_uuid(raw: &str, what: &str) -> ApiResult<Uuid> {
    match Uuid::parse_str(raw) {
        Ok(u) if raw.len() <= 64 => Ok(u),
        _ => Err(ApiError::not_found(what)),
    }
}

pub(crate) use super::pagination::{cursor, page_query};
