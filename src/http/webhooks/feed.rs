//! The event feed for consumers that cannot expose an endpoint: `GET /event-feed` (pages, oldest
//! first) and `GET /event-stream` (Server-Sent Events). Both serve each event's envelope as the
//! exact bytes a webhook delivery of it carries, and both resume from a cursor that never skips
//! or repeats an event (see `RecoveryStore::read_feed` for why that holds across instances).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;

use crate::http::auth::Principal;
use crate::http::cursor;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::list_query::parsed;
use crate::http::query::StrictQuery;
use crate::http::state::AppState;
use switchboard_domain::scope::Scope;
use switchboard_domain::webhooks::catalogue::Pattern;
use switchboard_store::recovery::FeedPosition;
use switchboard_store::webhooks::EventFilter;

/// The list name cursors of the feed (and ids of the stream) are bound to.
const FEED: &str = "event-feed";
pub const DEFAULT_FEED_LIMIT: i64 = 100;
pub const MAX_FEED_LIMIT: i64 = 1000;
/// How often a stream looks for events when nothing woke it (events written by other
/// instances without deliveries, other processes on SQLite).
const STREAM_POLL: Duration = Duration::from_secs(1);
/// Events a stream reads per query.
const STREAM_BATCH: i64 = 100;

/// The `events` filter: a comma-separated list of names, `*` or `ns.*` (`*` and absent: all).
/// Returns the filters and their canonical text (what cursors are bound to).
fn parse_events(raw: Option<&str>) -> Result<(Vec<EventFilter>, String), ApiError> {
    let Some(raw) = raw else {
        return Ok((Vec::new(), "*".into()));
    };
    let mut filters = Vec::new();
    let mut canonical: Vec<String> = Vec::new();
    for part in raw.split(',').map(str::trim) {
        match Pattern::parse(part) {
            Ok(Pattern::All) => return Ok((Vec::new(), "*".into())),
            Ok(Pattern::Exact(name)) => {
                canonical.push(name.clone());
                filters.push(EventFilter::Exact(name));
            }
            Ok(Pattern::Namespace(ns)) => {
                canonical.push(format!("{ns}.*"));
                filters.push(EventFilter::Namespace(ns));
            }
            Err(e) => {
                return Err(ApiError::invalid_request(
                    "events",
                    format!(
                        "events must be a comma-separated list of event names, `*` or `namespace.*`: {e}"
                    ),
                ));
            }
        }
    }
    canonical.sort();
    canonical.dedup();
    Ok((filters, canonical.join(",")))
}

fn encode(state: &AppState, filters: &str, p: FeedPosition) -> String {
    cursor::sign(
        state.secrets.cursor_key(),
        FEED,
        filters,
        &format!("{}.{}", p.txid, p.id),
    )
}

fn decode(state: &AppState, filters: &str, raw: &str) -> Result<FeedPosition, ApiError> {
    let payload = cursor::verify(state.secrets.cursor_key(), FEED, filters, raw)?;
    let bad = || ApiError::invalid_cursor("The cursor is not valid.");
    let (txid, id) = payload.split_once('.').ok_or_else(bad)?;
    Ok(FeedPosition {
        txid: txid.parse().map_err(|_| bad())?,
        id: id.parse().map_err(|_| bad())?,
    })
}

/// Query parameters of the feed.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FeedParams {
    /// `next_cursor` of an earlier page; absent: from the oldest kept event.
    pub after: Option<String>,
    /// 1 to 1000 (default 100).
    pub limit: Option<String>,
    /// Comma-separated event names, `*` or `namespace.*` (default all).
    pub events: Option<String>,
}

/// The organization's events, oldest first, for consumers that poll instead of receiving
/// webhooks. Each item of `data` is the envelope exactly as a webhook delivery of the event
/// carries it. `next_cursor` is present on every page, the last one included: keep it and
/// ask again later; no event is ever skipped or repeated.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/event-feed",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(FeedParams),
    responses(
        (status = 200, description = "A page of envelopes.", body = crate::http::pagination::Page<serde_json::Value>),
        (status = 400, description = "A bad limit, events filter or cursor (`invalid_cursor`).", body = ErrorBody),
    )
)]
pub async fn event_feed(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<FeedParams>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(q) = q?;
    let limit = parsed("limit", q.limit.as_deref(), |raw| {
        match raw.trim().parse::<i64>() {
            Ok(n) if (1..=MAX_FEED_LIMIT).contains(&n) => Ok(n),
            _ => Err(format!(
                "limit must be a whole number from 1 to {MAX_FEED_LIMIT}."
            )),
        }
    })?
    .unwrap_or(DEFAULT_FEED_LIMIT);
    let (events, filters) = parse_events(q.events.as_deref())?;
    let after = match q.after.as_deref() {
        Some(raw) => decode(&state, &filters, raw)?,
        None => FeedPosition::default(),
    };
    let mut items = crate::ops::recovery::read_feed(
        &super::deps(&state),
        principal.org_id,
        after,
        &events,
        limit + 1,
    )
    .await?;
    let has_more = items.len() as i64 > limit;
    items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let last = items.last().map(|i| i.position).unwrap_or(after);
    let next = encode(&state, &filters, last);
    // The envelopes are written as stored, byte for byte.
    let mut body =
        String::with_capacity(items.iter().map(|i| i.envelope.len() + 1).sum::<usize>() + 128);
    body.push_str("{\"data\":[");
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            body.push(',');
        }
        body.push_str(&item.envelope);
    }
    body.push_str("],\"has_more\":");
    body.push_str(if has_more { "true" } else { "false" });
    body.push_str(",\"next_cursor\":");
    body.push_str(&serde_json::Value::String(next).to_string());
    body.push('}');
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Query parameters of the stream.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Comma-separated event names, `*` or `namespace.*` (default all).
    pub events: Option<String>,
    /// A feed cursor to start after (a `Last-Event-ID` header takes precedence); absent: new
    /// events only.
    pub after: Option<String>,
}

/// The organization's events as Server-Sent Events, as they are written: one event per
/// webhook event, `data:` the envelope, `id:` a feed cursor. Reconnect with `Last-Event-ID`
/// (browsers and SSE clients do it themselves) to resume without loss. A comment line keeps
/// the connection alive every 15 s.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/event-stream",
    tag = "webhooks",
    security(("bearer" = ["webhooks:read"])),
    params(StreamParams, ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received.")),
    responses(
        (status = 200, description = "A text/event-stream of envelopes.", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad events filter or cursor.", body = ErrorBody),
    )
)]
pub async fn event_stream(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    q: Result<StrictQuery<StreamParams>, ApiError>,
) -> ApiResult<Response> {
    principal.require(Scope::WebhooksRead)?;
    let StrictQuery(q) = q?;
    let (events, filters) = parse_events(q.events.as_deref())?;
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .or(q.after);
    let start = match resume {
        Some(raw) => decode(&state, &filters, &raw)?,
        // New events only: from the end of the feed as it is now.
        None => end_of_feed(&state, principal.org_id, &events).await?,
    };
    let stream = feed_stream(state, principal.org_id, events, filters, start);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// The position after the last event now in the feed.
async fn end_of_feed(
    state: &AppState,
    org_id: i64,
    events: &[EventFilter],
) -> Result<FeedPosition, ApiError> {
    let mut at = FeedPosition::default();
    loop {
        let items = state
            .store
            .read_feed(org_id, at, events, MAX_FEED_LIMIT)
            .await?;
        match items.last() {
            Some(last) => at = last.position,
            None => return Ok(at),
        }
        if (items.len() as i64) < MAX_FEED_LIMIT {
            return Ok(at);
        }
    }
}

fn feed_stream(
    state: AppState,
    org_id: i64,
    events: Vec<EventFilter>,
    filters: String,
    start: FeedPosition,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let signal = state.store.event_signal();
    let queue: std::collections::VecDeque<Event> = Default::default();
    futures::stream::unfold(
        (state, signal, start, queue),
        move |(state, mut signal, mut at, mut queue)| {
            let events = events.clone();
            let filters = filters.clone();
            async move {
                loop {
                    if state.shutdown.is_cancelled() {
                        return None;
                    }
                    if let Some(e) = queue.pop_front() {
                        return Some((Ok(e), (state, signal, at, queue)));
                    }
                    signal.borrow_and_update();
                    match state
                        .store
                        .read_feed(org_id, at, &events, STREAM_BATCH)
                        .await
                    {
                        Ok(items) if !items.is_empty() => {
                            for item in items {
                                at = item.position;
                                queue.push_back(
                                    Event::default()
                                        .id(encode(&state, &filters, at))
                                        .data(item.envelope),
                                );
                            }
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "event stream: cannot read the feed; retrying");
                        }
                    }
                    tokio::select! {
                        changed = signal.changed() => {
                            if changed.is_err() {
                                return None;
                            }
                        }
                        _ = tokio::time::sleep(STREAM_POLL) => {}
                        // Shutting down: end the stream now, the client resumes elsewhere
                        // from its last id.
                        _ = state.shutdown.cancelled() => return None,
                    }
                }
            }
        },
    )
}
