//! `GET /api/v1/integrations/messages` (and the legacy `GET /api/messages`): the message
//! history of the organization, newest first.

use axum::extract::State;
use serde::Deserialize;
use uuid::Uuid;

use crate::views::messages::MessageOut;
use switchboard_domain::Timestamp;
use switchboard_domain::channel_selection::match_slug;
use switchboard_domain::message::{Direction, MessageStatus};
use switchboard_domain::scope::Scope;
use switchboard_store::{HistoryCursor, MessageFilter};

use super::MAX_SLUG_INPUT;
use crate::http::auth::Principal;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::pagination::{Page, PageRequest};
use crate::http::query::StrictQuery;
use crate::http::state::AppState;

/// Query parameters of the message history.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// 1 to 200, default 50.
    #[param(value_type = Option<i64>)]
    limit: Option<String>,
    /// The next_cursor of the previous page.
    cursor: Option<String>,
    /// Only this channel.
    #[param(value_type = Option<i64>)]
    channel_id: Option<String>,
    /// Only this channel (slug, UUID, provider identifier or name).
    channel_slug: Option<String>,
    /// Only this contact.
    contact_uuid: Option<String>,
    /// Only this conversation.
    conversation_uuid: Option<String>,
    /// outbound or inbound.
    direction: Option<String>,
    /// queued, sent, delivered, read, failed or received.
    status: Option<String>,
    /// Created at or after (RFC 3339).
    since: Option<String>,
    /// Created before (RFC 3339).
    until: Option<String>,
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(param, message)
}

fn uuid_param(param: &str, v: Option<&str>) -> ApiResult<Option<Uuid>> {
    v.map(|s| Uuid::parse_str(s.trim()).map_err(|_| bad(param, format!("{param} must be a UUID."))))
        .transpose()
}

fn time_param(param: &str, v: Option<&str>) -> ApiResult<Option<Timestamp>> {
    v.map(|s| {
        Timestamp::parse_rfc3339(s).map_err(|_| {
            bad(
                param,
                format!("{param} must be an RFC 3339 time such as 2026-08-14T09:30:00Z (encode `+` as %2B)."),
            )
        })
    })
    .transpose()
}

/// The message history of the organization, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/messages",
    tag = "messages",
    security(("bearer" = ["messages:read"])),
    params(HistoryQuery),
    responses(
        (status = 200, description = "A page of messages, newest first.", body = Page<MessageOut>),
        (status = 400, description = "invalid_request: a bad limit, cursor or filter (details.param names it).", body = ErrorBody),
    )
)]
pub async fn list_messages(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<HistoryQuery>, ApiError>,
) -> ApiResult<axum::Json<Page<MessageOut>>> {
    principal.require(Scope::MessagesRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let mut filter = MessageFilter {
        direction: q
            .direction
            .as_deref()
            .map(|d| {
                d.parse::<Direction>()
                    .map_err(|_| bad("direction", "direction must be outbound or inbound."))
            })
            .transpose()?,
        status: q
            .status
            .as_deref()
            .map(|s| {
                s.parse::<MessageStatus>().map_err(|_| {
                    bad(
                        "status",
                        "status must be queued, sent, delivered, read, failed or received.",
                    )
                })
            })
            .transpose()?,
        since: time_param("since", q.since.as_deref())?,
        until: time_param("until", q.until.as_deref())?,
        ..Default::default()
    };
    let empty = || {
        Ok(axum::Json(Page {
            data: Vec::new(),
            has_more: false,
            next_cursor: None,
        }))
    };
    match (q.channel_id.as_deref(), q.channel_slug.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "channel_slug",
                "Give either channel_id or channel_slug, not both.",
            ));
        }
        (Some(id), None) => {
            filter.channel_id = Some(
                id.trim()
                    .parse::<i64>()
                    .map_err(|_| bad("channel_id", "channel_id must be an integer."))?,
            );
        }
        (None, Some(slug)) => {
            if slug.trim().is_empty() || slug.len() > MAX_SLUG_INPUT {
                return Err(bad(
                    "channel_slug",
                    "channel_slug must be 1 to 200 characters.",
                ));
            }
            let channels = state.store.list_channels(principal.org_id).await?;
            match match_slug(&channels, slug).as_slice() {
                [] => return empty(),
                [one] => filter.channel_id = Some(one.id),
                _ => {
                    return Err(bad(
                        "channel_slug",
                        "channel_slug matches several channels; use channel_id.",
                    ));
                }
            }
        }
        (None, None) => {}
    }
    if let Some(uuid) = uuid_param("contact_uuid", q.contact_uuid.as_deref())? {
        // Deleted contacts included: their messages stay in the history.
        match state
            .store
            .find_contact_with_deleted(principal.org_id, uuid)
            .await?
        {
            Some(c) => filter.contact_id = Some(c.id),
            None => return empty(),
        }
    }
    if let Some(uuid) = uuid_param("conversation_uuid", q.conversation_uuid.as_deref())? {
        match state
            .store
            .find_conversation(principal.org_id, uuid)
            .await?
        {
            Some(c) => filter.conversation_id = Some(c.id),
            None => return empty(),
        }
    }
    let after = page.cursor.map(|c| HistoryCursor {
        created_at: Timestamp::from_millis(c.time_ms),
        id: c.id,
    });
    let rows = state
        .store
        .list_messages(principal.org_id, &filter, after, page.fetch_limit())
        .await?;
    let page = Page::from_rows(rows, &page, |m| crate::http::pagination::Cursor {
        time_ms: m.created_at.millis(),
        id: m.id,
    });
    Ok(axum::Json(page.map(|m| MessageOut::from(&m))))
}
