//! `GET /api/v1/integrations/channels`.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use uuid::Uuid;

use switchboard_domain::channel::{Channel, ChannelStatus, ChannelType};
use switchboard_domain::scope::Scope;

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::pagination::Page;
use super::query::{NoParams, StrictQuery};
use super::state::AppState;

/// A channel as the API shows it. Never carries provider secrets.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ChannelOut {
    /// Numeric identifier, used as `channel_id`.
    pub id: i64,
    pub uuid: Uuid,
    /// Stable API-facing name, usable as `channel_slug`.
    pub slug: String,
    /// Channel service type.
    #[serde(rename = "type")]
    pub channel_type: ChannelType,
    /// Display name.
    pub name: String,
    /// Identifier assigned by the provider.
    pub identifier: String,
    /// `false` for the lead-ingestion type.
    pub can_send_messages: bool,
    pub status: ChannelStatus,
    pub supports_media: bool,
    /// Whether this is the organization's default channel.
    pub is_default: bool,
}

impl From<&Channel> for ChannelOut {
    fn from(c: &Channel) -> Self {
        ChannelOut {
            id: c.id,
            uuid: c.uuid,
            slug: c.slug.clone(),
            channel_type: c.channel_type,
            name: c.name.clone(),
            identifier: c.identifier.clone(),
            can_send_messages: c.channel_type.can_send_messages(),
            status: c.status,
            supports_media: c.channel_type.supports_media(),
            is_default: c.is_default,
        }
    }
}

/// List the organization's channels.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/channels",
    tag = "channels",
    security(("bearer" = ["channels:read"])),
    responses(
        (status = 200, description = "Every channel of the organization, in one page.", body = Page<ChannelOut>),
        (status = 400, description = "invalid_request: a query parameter (this list takes none).", body = ErrorBody),
        (status = 401, description = "Missing, invalid, expired or revoked key.", body = ErrorBody),
        (status = 403, description = "The key lacks channels:read.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn list_channels(
    State(state): State<AppState>,
    principal: Principal,
    query: Result<StrictQuery<NoParams>, ApiError>,
) -> ApiResult<Json<Page<ChannelOut>>> {
    principal.require(Scope::ChannelsRead)?;
    query?;
    let channels = state
        .config_cache
        .channels(state.store.as_ref(), principal.org_id)
        .await?;
    Ok(Json(Page::complete(
        channels.iter().map(ChannelOut::from).collect(),
    )))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/integrations/channels", get(list_channels))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(list_channels), components(schemas(ChannelOut)))]
pub struct ChannelsApi;
