//! `GET /api/v1/integrations/contacts` and `GET /api/v1/integrations/contacts/{uuid}`
//! (`contacts:read`): how an integrator finds the `contact_uuid` a send or a filter needs
//! (CONVENTIONS "Resources", Contact).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use switchboard_domain::phone::Phone;
use switchboard_domain::scope::Scope;
use switchboard_store::legacy::ContactQuery;

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::legacy::{cursor, page_query, path_uuid};
use super::list_query::{parsed, window};
use super::pagination::{Page, PageRequest};
use super::path::Path;
use super::query::StrictQuery;
use super::state::AppState;
use crate::views::messages::ContactOut;

/// Query parameters of the contact list.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ContactListParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>)]
    limit: Option<String>,
    /// `next_cursor` of the previous page (keep the same filters).
    cursor: Option<String>,
    /// Only the contact with this phone (any spelling; normalized to E.164 before matching;
    /// send `+` as `%2B`).
    phone: Option<String>,
    /// Contacts created at or after this RFC 3339 time.
    since: Option<String>,
    /// Contacts created before this RFC 3339 time.
    until: Option<String>,
}

/// Query parameters of the reachability answer.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReachabilityParams {
    /// The channel (default: the key's channel selection, as a send's).
    #[param(value_type = Option<i64>)]
    channel_id: Option<String>,
}

/// The organization's contacts, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/contacts",
    operation_id = "list_contacts_v1",
    tag = "contacts",
    params(ContactListParams),
    security(("bearer" = ["contacts:read"])),
    responses(
        (status = 200, description = "A page of contacts, newest first.", body = Page<ContactOut>),
        (status = 400, description = "invalid_request (an unknown parameter, a bad limit, phone or time) or invalid_cursor.", body = ErrorBody),
    )
)]
pub async fn list_contacts(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<ContactListParams>, ApiError>,
) -> ApiResult<Json<Page<ContactOut>>> {
    principal.require(Scope::ContactsRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let phone = parsed("phone", q.phone.as_deref(), |p| {
        Phone::parse(p).map_err(|e| format!("phone: {e} (send `+` as %2B)"))
    })?;
    let (since, until) = window(q.since.as_deref(), q.until.as_deref())?;
    let rows = state
        .store
        .list_contacts(
            principal.org_id,
            &ContactQuery {
                phone,
                since,
                until,
                ..Default::default()
            },
            page_query(&page),
        )
        .await?;
    let page = Page::from_rows(rows, &page, |c| cursor(c.created_at, c.id));
    Ok(Json(page.map(|c| ContactOut::from(&c))))
}

/// One contact of the organization.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/contacts/{uuid}",
    operation_id = "get_contact_v1",
    tag = "contacts",
    params(("uuid" = String, Path, description = "The contact's UUID.")),
    security(("bearer" = ["contacts:read"])),
    responses(
        (status = 200, description = "The contact.", body = ContactOut),
        (status = 404, description = "not_found (also a deleted contact or another organization's).", body = ErrorBody),
    )
)]
pub async fn get_contact(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<Json<ContactOut>> {
    principal.require(Scope::ContactsRead)?;
    let uuid = path_uuid(&uuid, "The contact")?;
    let contact = state
        .store
        .find_contact(principal.org_id, uuid)
        .await?
        .ok_or_else(|| ApiError::not_found("The contact"))?;
    Ok(Json(ContactOut::from(&contact)))
}

/// What a send to the contact would meet now, on one channel.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Reachability {
    pub channel: switchboard_domain::channel::ChannelIdentity,
    /// Whether free-form content (text, interactive, media, reaction, location, contacts) may
    /// go now.
    pub free_form: switchboard_domain::contact::FreeForm,
    pub templates: TemplateCount,
    /// When the channel's pace lets the contact's next message go (this instance's pace
    /// state; now when nothing waits).
    pub next_send_at: switchboard_domain::Timestamp,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct TemplateCount {
    /// The channel's approved and active templates (always allowed on WhatsApp).
    pub approved: usize,
}

/// Whether and how the contact can be reached now, before a send: free-form allowed (and until
/// when), approved templates, and when pacing lets the next message go.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/contacts/{uuid}/reachability",
    operation_id = "get_contact_reachability_v1",
    tag = "contacts",
    params(
        ("uuid" = String, Path, description = "The contact's UUID."),
        ReachabilityParams
    ),
    security(("bearer" = ["contacts:read"])),
    responses(
        (status = 200, description = "What a send would meet.", body = Reachability),
        (status = 400, description = "invalid_request: an unknown or malformed parameter.", body = ErrorBody),
        (status = 404, description = "not_found (also a deleted contact or another organization's).", body = ErrorBody),
        (status = 422, description = "channel_conflict, no_default_channel, invalid_channel: no channel to tell about.", body = ErrorBody),
    )
)]
pub async fn reachability(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    q: Result<StrictQuery<ReachabilityParams>, ApiError>,
) -> ApiResult<Json<Reachability>> {
    use switchboard_domain::channel::ChannelType;
    use switchboard_domain::channel_selection::{ChannelRequest, select_channel};
    use switchboard_domain::template::TemplateStatus;

    principal.require(Scope::ContactsRead)?;
    let StrictQuery(q) = q?;
    let channel_id = parsed("channel_id", q.channel_id.as_deref(), |raw| {
        raw.parse::<i64>()
            .map_err(|_| "channel_id must be an integer".to_owned())
    })?;
    let uuid = path_uuid(&uuid, "The contact")?;
    let contact = state
        .store
        .find_contact(principal.org_id, uuid)
        .await?
        .ok_or_else(|| ApiError::not_found("The contact"))?;
    let channels = state.store.list_channels(principal.org_id).await?;
    let channel = select_channel(
        &channels,
        &ChannelRequest {
            channel_id,
            channel_slug: None,
            key_default: principal.default_channel_id,
        },
    )
    .map_err(|e| {
        crate::http::messages::send::send_error(crate::ops::sending::SendError::Channel(e))
    })?;
    let now = state.clock.now();
    let windowed = channel.channel_type == ChannelType::WhatsappCloud;
    let conversation = if windowed {
        state
            .store
            .find_open_conversation(contact.id, channel.id)
            .await?
    } else {
        None
    };
    let approved = state
        .store
        .list_channel_templates(channel.id)
        .await?
        .iter()
        .filter(|t| t.active && t.status == TemplateStatus::Approved)
        .count();
    let wait = match (windowed, contact.phone.as_ref()) {
        (true, Some(phone)) => {
            state
                .providers
                .pacer()
                .wait_for(channel.id, phone.digits())
                .await
        }
        _ => std::time::Duration::ZERO,
    };
    Ok(Json(Reachability {
        channel: channel.identity(),
        free_form: switchboard_domain::contact::free_form(windowed, conversation.as_ref(), now),
        templates: TemplateCount { approved },
        next_send_at: now.saturating_add(wait),
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/integrations/contacts", get(list_contacts))
        .route("/api/v1/integrations/contacts/{uuid}", get(get_contact))
        .route(
            "/api/v1/integrations/contacts/{uuid}/reachability",
            get(reachability),
        )
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(list_contacts, get_contact, reachability),
    components(schemas(Reachability, TemplateCount, switchboard_domain::contact::FreeForm))
)]
pub struct ContactsApi;
