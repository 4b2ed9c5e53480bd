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
use crate::http::query::{AcceptedParams, StrictQuery};
use crate::http::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub struct HistoryQuery {
    limit: Option<String>,
    cursor: Option<String>,
    channel_id: Option<String>,
    channel_slug: Option<String>,
    contact_uuid: Option<String>,
    conversation_uuid: Option<String>,
    direction: Option<String>,
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

impl AcceptedParams for HistoryQuery {
    const ACCEPTED: &'static [&'static str] = &[
        "limit",
        "cursor",
        "channel_id",
        "channel_slug",
        "contact_uuid",
        "conversation_uuid",
        "direction",
        "status",
        "since",
        "until",
    ];
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
    params(
        ("limit" = Option<i64>, Query, description = "1 to 200, default 50."),
        ("cursor" = Option<String>, Query, description = "The next_cursor of the previous page."),
        ("channel_id" = Option<i64>, Query, description = "Only this channel."),
        ("channel_slug" = Option<String>, Query, description = "Only this channel (slug, UUID, provider identifier or name)."),
        ("contact_uuid" = Option<String>, Query, description = "Only this contact."),
        ("conversation_uuid" = Option<String>, Query, description = "Only this conversation."),
        ("direction" = Option<String>, Query, description = "outbound or inbound."),
        ("status" = Option<String>, Query, description = "queued, sent, delivered, read, failed or received."),
        ("since" = Option<String>, Query, description = "Created at or after (RFC 3339)."),
        ("until" = Option<String>, Query, description = "Created before (RFC 3339)."),
    ),
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
