//! Legacy canned replies: `GET/POST /api/canned-replies`, `PUT/DELETE /api/canned-replies/{id}`
//! (`canned_replies:read` / `canned_replies:write`). A canned reply is addressed by its UUID;
//! its `shortcut` is unique in the organization (a taken one is a 422 `validation_failed` on
//! `shortcut`, like a taken contact phone). The event catalogue has no canned-reply events.

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use switchboard_domain::scope::Scope;
use switchboard_domain::{Timestamp, ValidationErrors};
use switchboard_store::StoreError;
use switchboard_store::legacy::CannedReplyRecord;

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::json::LenientJsonBody;
use super::super::pagination::Page;
use super::super::query::StrictQuery;
use super::super::state::AppState;
use super::groups::PageParams;
use super::{cursor, page_query, path_uuid};

pub const MAX_SHORTCUT_CHARS: usize = 64;
pub const MAX_TEXT_CHARS: usize = 4096;
pub const TAKEN_SHORTCUT: &str = "already used by another canned reply";

/// A canned reply.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct CannedReplyOut {
    pub uuid: Uuid,
    /// Unique in the organization, e.g. `/thanks`.
    pub shortcut: String,
    pub text: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&CannedReplyRecord> for CannedReplyOut {
    fn from(r: &CannedReplyRecord) -> Self {
        CannedReplyOut {
            uuid: r.uuid,
            shortcut: r.shortcut.clone(),
            text: r.text.clone(),
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// Create (both fields required) or change (any subset) a canned reply.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CannedReplyRequest {
    /// 1 to 64 characters, no spaces or control characters.
    pub shortcut: Option<String>,
    /// 1 to 4096 characters (not blank, no NUL).
    pub text: Option<String>,
}

fn check_shortcut(errors: &mut ValidationErrors, s: &str) -> Option<String> {
    let n = s.chars().count();
    if n == 0 || n > MAX_SHORTCUT_CHARS {
        errors.add(
            "shortcut",
            format!("must be 1 to {MAX_SHORTCUT_CHARS} characters"),
        );
        return None;
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        errors.add("shortcut", "must not contain spaces or control characters");
        return None;
    }
    Some(s.to_owned())
}

fn check_text(errors: &mut ValidationErrors, t: &str) -> Option<String> {
    let n = t.chars().count();
    if t.trim().is_empty() || n > MAX_TEXT_CHARS {
        errors.add(
            "text",
            format!("must be 1 to {MAX_TEXT_CHARS} characters and not blank"),
        );
        return None;
    }
    if t.contains('\0') {
        errors.add("text", "must not contain NUL characters");
        return None;
    }
    Some(t.to_owned())
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::UniqueViolation(_) => ApiError::validation_field("shortcut", TAKEN_SHORTCUT),
        StoreError::NotFound => ApiError::not_found("The canned reply"),
        other => other.into(),
    }
}

/// List canned replies, newest first.
#[utoipa::path(
    get,
    path = "/api/canned-replies",
    tag = "legacy",
    params(PageParams),
    security(("bearer" = ["canned_replies:read"])),
    responses(
        (status = 200, description = "A page of canned replies, newest first.", body = Page<CannedReplyOut>),
        (status = 400, description = "invalid_request.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_canned_replies(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<CannedReplyOut>>> {
    principal.require(Scope::CannedRepliesRead)?;
    let page = q?.0.page()?;
    let rows = state
        .store
        .list_canned_replies(principal.org_id, page_query(&page))
        .await?;
    let page = Page::from_rows(rows, &page, |r| cursor(r.created_at, r.id));
    Ok(Json(page.map(|r| CannedReplyOut::from(&r))))
}

/// Create a canned reply.
#[utoipa::path(
    post,
    path = "/api/canned-replies",
    tag = "legacy",
    request_body = CannedReplyRequest,
    security(("bearer" = ["canned_replies:write"])),
    responses(
        (status = 201, description = "Created.", body = CannedReplyOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 422, description = "validation_failed: shortcut or text missing or invalid, or the shortcut is taken (`already used by another canned reply`).", body = ErrorBody),
    )
)]
pub async fn create_canned_reply(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<LenientJsonBody<CannedReplyRequest>, ApiError>,
) -> ApiResult<(StatusCode, Json<CannedReplyOut>)> {
    principal.require(Scope::CannedRepliesWrite)?;
    let LenientJsonBody(body) = body?;
    let mut errors = ValidationErrors::new();
    let shortcut = match body.shortcut.as_deref() {
        Some(s) => check_shortcut(&mut errors, s),
        None => {
            errors.add("shortcut", "is required");
            None
        }
    };
    let text = match body.text.as_deref() {
        Some(t) => check_text(&mut errors, t),
        None => {
            errors.add("text", "is required");
            None
        }
    };
    let (Some(shortcut), Some(text)) = (shortcut, text) else {
        return Err(ApiError::validation(errors));
    };
    let r = state
        .store
        .create_canned_reply(
            principal.org_id,
            Uuid::now_v7(),
            &shortcut,
            &text,
            state.clock.now(),
        )
        .await
        .map_err(store_error)?;
    Ok((StatusCode::CREATED, Json(CannedReplyOut::from(&r))))
}

/// Change a canned reply's shortcut or text.
#[utoipa::path(
    put,
    path = "/api/canned-replies/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The canned reply's UUID.")),
    request_body = CannedReplyRequest,
    security(("bearer" = ["canned_replies:write"])),
    responses(
        (status = 200, description = "The canned reply after the change.", body = CannedReplyOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
        (status = 422, description = "validation_failed: nothing to change, invalid fields, or a taken shortcut.", body = ErrorBody),
    )
)]
pub async fn update_canned_reply(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<LenientJsonBody<CannedReplyRequest>, ApiError>,
) -> ApiResult<Json<CannedReplyOut>> {
    principal.require(Scope::CannedRepliesWrite)?;
    let LenientJsonBody(body) = body?;
    let uuid = path_uuid(&id, "The canned reply")?;
    let mut errors = ValidationErrors::new();
    if body.shortcut.is_none() && body.text.is_none() {
        errors.add("shortcut", "give shortcut, text or both");
    }
    let shortcut = body
        .shortcut
        .as_deref()
        .and_then(|s| check_shortcut(&mut errors, s));
    let text = body
        .text
        .as_deref()
        .and_then(|t| check_text(&mut errors, t));
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let r = state
        .store
        .update_canned_reply(
            principal.org_id,
            uuid,
            shortcut.as_deref(),
            text.as_deref(),
            state.clock.now(),
        )
        .await
        .map_err(store_error)?;
    Ok(Json(CannedReplyOut::from(&r)))
}

/// Delete a canned reply.
#[utoipa::path(
    delete,
    path = "/api/canned-replies/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The canned reply's UUID.")),
    security(("bearer" = ["canned_replies:write"])),
    responses(
        (status = 204, description = "Deleted."),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn delete_canned_reply(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::CannedRepliesWrite)?;
    let uuid = path_uuid(&id, "The canned reply")?;
    state
        .store
        .delete_canned_reply(principal.org_id, uuid)
        .await
        .map_err(store_error)?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/canned-replies",
            get(list_canned_replies).post(create_canned_reply),
        )
        .route(
            "/api/canned-replies/{id}",
            put(update_canned_reply).delete(delete_canned_reply),
        )
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        list_canned_replies,
        create_canned_reply,
        update_canned_reply,
        delete_canned_reply
    ),
    components(schemas(CannedReplyOut, CannedReplyRequest))
)]
pub struct CannedRepliesApi;
