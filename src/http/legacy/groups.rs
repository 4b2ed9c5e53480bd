//! Legacy contact groups: `GET/POST /api/groups`, `GET/PUT/DELETE /api/groups/{id}`,
//! `GET/POST/DELETE /api/groups/{id}/contacts` (`groups:read` / `groups:write`). A group is
//! addressed by its UUID. Membership changes are `group.updated` events.

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ops::groups;
use crate::views::groups::GroupOut;
use crate::views::messages::ContactOut;
use switchboard_domain::scope::Scope;
use switchboard_domain::{FieldError, ValidationErrors};
use switchboard_store::StoreError;
use switchboard_store::legacy::{GroupRecord, MembershipOutcome, PageQuery};

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::json::LenientJsonBody;
use super::super::pagination::Page;
use super::super::query::StrictQuery;
use super::super::state::AppState;
use super::{cursor, page_query, path_uuid};

/// The most members `GET /api/groups/{id}` shows (newest membership first); page through the
/// rest with `GET /api/groups/{id}/contacts`.
pub const MEMBER_PREVIEW: i64 = 100;
/// The most contacts one membership change names.
pub const MAX_CONTACTS_PER_CHANGE: usize = 1000;

/// A group with its first members.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupDetailOut {
    #[serde(flatten)]
    pub group: GroupOut,
    /// Up to 100 members, newest membership first.
    pub members: Vec<ContactOut>,
    /// `true` when the group has more members than `members` shows (page through them with
    /// `GET /api/groups/{id}/contacts`).
    pub members_has_more: bool,
}

/// Create or rename a group.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct GroupRequest {
    /// 1 to 200 characters.
    pub name: Option<String>,
}

/// Add or remove members.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MembersRequest {
    /// 1 to 1000 contact UUIDs of this organization.
    pub contact_uuids: Option<Vec<String>>,
}

fn group_name(name: Option<&str>) -> ApiResult<String> {
    let Some(n) = name else {
        return Err(ApiError::validation_field("name", "is required"));
    };
    let t = n.trim();
    if t.is_empty() || t.chars().count() > 200 || t.chars().any(char::is_control) {
        return Err(ApiError::validation_field(
            "name",
            "must be 1 to 200 characters without control characters",
        ));
    }
    Ok(t.to_owned())
}

fn group_not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found("The group"),
        other => other.into(),
    }
}

pub use crate::http::pagination::PageParams;

/// List groups, newest first.
#[utoipa::path(
    get,
    path = "/api/groups",
    tag = "legacy",
    params(PageParams),
    security(("bearer" = ["groups:read"])),
    responses(
        (status = 200, description = "A page of groups, newest first.", body = Page<GroupOut>),
        (status = 400, description = "invalid_request.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_groups(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<GroupOut>>> {
    principal.require(Scope::GroupsRead)?;
    let page = q?.0.page()?;
    let rows = state
        .store
        .list_groups(principal.org_id, page_query(&page))
        .await?;
    let page = Page::from_rows(rows, &page, |g| cursor(g.created_at, g.id));
    Ok(Json(page.map(|g| GroupOut::from(&g))))
}

/// Create a group (emits `group.created`).
#[utoipa::path(
    post,
    path = "/api/groups",
    tag = "legacy",
    request_body = GroupRequest,
    security(("bearer" = ["groups:write"])),
    responses(
        (status = 201, description = "Created.", body = GroupOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 422, description = "validation_failed (name).", body = ErrorBody),
    )
)]
pub async fn create_group(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<LenientJsonBody<GroupRequest>, ApiError>,
) -> ApiResult<(StatusCode, Json<GroupOut>)> {
    principal.require(Scope::GroupsWrite)?;
    let LenientJsonBody(body) = body?;
    let name = group_name(body.name.as_deref())?;
    let g = groups::create_group(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        &name,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(GroupOut::from(&g))))
}

async fn find(state: &AppState, principal: &Principal, raw: &str) -> ApiResult<GroupRecord> {
    let uuid = path_uuid(raw, "The group")?;
    state
        .store
        .find_group(principal.org_id, uuid)
        .await?
        .ok_or_else(|| ApiError::not_found("The group"))
}

/// One group with up to 100 members (newest membership first).
#[utoipa::path(
    get,
    path = "/api/groups/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID.")),
    security(("bearer" = ["groups:read"])),
    responses(
        (status = 200, description = "The group and its first members.", body = GroupDetailOut),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn get_group(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<GroupDetailOut>> {
    principal.require(Scope::GroupsRead)?;
    let g = find(&state, &principal, &id).await?;
    let mut members = state
        .store
        .list_group_members(
            g.id,
            PageQuery {
                after: None,
                limit: MEMBER_PREVIEW + 1,
            },
        )
        .await?;
    let members_has_more = members.len() as i64 > MEMBER_PREVIEW;
    members.truncate(MEMBER_PREVIEW as usize);
    Ok(Json(GroupDetailOut {
        group: GroupOut::from(&g),
        members: members
            .iter()
            .map(|m| ContactOut::from(&m.contact))
            .collect(),
        members_has_more,
    }))
}

/// A page of a group's members, newest membership first.
#[utoipa::path(
    get,
    path = "/api/groups/{id}/contacts",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID."), PageParams),
    security(("bearer" = ["groups:read"])),
    responses(
        (status = 200, description = "A page of members.", body = Page<ContactOut>),
        (status = 400, description = "invalid_request.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn list_members(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    q: Result<StrictQuery<PageParams>, ApiError>,
) -> ApiResult<Json<Page<ContactOut>>> {
    principal.require(Scope::GroupsRead)?;
    let page = q?.0.page()?;
    let g = find(&state, &principal, &id).await?;
    let rows = state
        .store
        .list_group_members(g.id, page_query(&page))
        .await?;
    let page = Page::from_rows(rows, &page, |m| cursor(m.added_at, m.contact.id));
    Ok(Json(page.map(|m| ContactOut::from(&m.contact))))
}

/// Rename a group (emits `group.updated`).
#[utoipa::path(
    put,
    path = "/api/groups/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID.")),
    request_body = GroupRequest,
    security(("bearer" = ["groups:write"])),
    responses(
        (status = 200, description = "The group after the change.", body = GroupOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
        (status = 422, description = "validation_failed (name).", body = ErrorBody),
    )
)]
pub async fn update_group(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<LenientJsonBody<GroupRequest>, ApiError>,
) -> ApiResult<Json<GroupOut>> {
    principal.require(Scope::GroupsWrite)?;
    let LenientJsonBody(body) = body?;
    let uuid = path_uuid(&id, "The group")?;
    let name = group_name(body.name.as_deref())?;
    let g = groups::rename_group(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        uuid,
        &name,
    )
    .await
    .map_err(group_not_found)?;
    Ok(Json(GroupOut::from(&g)))
}

/// Delete a group (its contacts stay; emits `group.deleted`).
#[utoipa::path(
    delete,
    path = "/api/groups/{id}",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID.")),
    security(("bearer" = ["groups:write"])),
    responses(
        (status = 204, description = "Deleted."),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn delete_group(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::GroupsWrite)?;
    let uuid = path_uuid(&id, "The group")?;
    groups::delete_group(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        uuid,
    )
    .await
    .map_err(group_not_found)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Checks a membership change's body: 1 to 1000 UUIDs (duplicates are ignored).
pub fn contact_uuids(list: Option<&[String]>, field: &str) -> ApiResult<Vec<Uuid>> {
    let Some(list) = list else {
        return Err(ApiError::validation_field(field, "is required"));
    };
    if list.is_empty() || list.len() > MAX_CONTACTS_PER_CHANGE {
        return Err(ApiError::validation_field(
            field,
            format!("must list 1 to {MAX_CONTACTS_PER_CHANGE} contact UUIDs"),
        ));
    }
    let mut errors = ValidationErrors::new();
    let mut out: Vec<Uuid> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        match Uuid::parse_str(raw.trim()) {
            Ok(u) if raw.len() <= 64 => {
                if !out.contains(&u) {
                    out.push(u);
                }
            }
            _ => errors.add(format!("{field}[{i}]"), "must be a UUID"),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    Ok(out)
}

/// The 422 of contacts that are not contacts of the organization.
pub fn unknown_contacts(field: &str, unknown: &[Uuid]) -> ApiError {
    ApiError::validation(ValidationErrors(
        unknown
            .iter()
            .map(|u| FieldError::new(field, format!("{u} names no contact of this organization")))
            .collect(),
    ))
}

async fn change_members(
    state: AppState,
    principal: Principal,
    id: String,
    body: MembersRequest,
    add: bool,
) -> ApiResult<Json<GroupOut>> {
    let uuid = path_uuid(&id, "The group")?;
    let contacts = contact_uuids(body.contact_uuids.as_deref(), "contact_uuids")?;
    let outcome = groups::change_members(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        uuid,
        &contacts,
        add,
    )
    .await
    .map_err(group_not_found)?;
    match outcome {
        MembershipOutcome::Changed { group, .. } => Ok(Json(GroupOut::from(&group))),
        MembershipOutcome::UnknownContacts(unknown) => {
            Err(unknown_contacts("contact_uuids", &unknown))
        }
    }
}

/// Add contacts to a group (emits `group.updated` when something changed).
#[utoipa::path(
    post,
    path = "/api/groups/{id}/contacts",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID.")),
    request_body = MembersRequest,
    security(("bearer" = ["groups:write"])),
    responses(
        (status = 200, description = "The group after the change (contacts already members are skipped).", body = GroupOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
        (status = 422, description = "validation_failed: contact_uuids missing, empty, not UUIDs, or naming contacts that are not (live) contacts of this organization; nothing changed.", body = ErrorBody),
    )
)]
pub async fn add_members(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<LenientJsonBody<MembersRequest>, ApiError>,
) -> ApiResult<Json<GroupOut>> {
    principal.require(Scope::GroupsWrite)?;
    let LenientJsonBody(body) = body?;
    change_members(state, principal, id, body, true).await
}

/// Remove contacts from a group (emits `group.updated` when something changed).
#[utoipa::path(
    delete,
    path = "/api/groups/{id}/contacts",
    tag = "legacy",
    params(("id" = String, Path, description = "The group's UUID.")),
    request_body = MembersRequest,
    security(("bearer" = ["groups:write"])),
    responses(
        (status = 200, description = "The group after the change (contacts that are not members are skipped).", body = GroupOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
        (status = 422, description = "validation_failed, as for adding.", body = ErrorBody),
    )
)]
pub async fn remove_members(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<LenientJsonBody<MembersRequest>, ApiError>,
) -> ApiResult<Json<GroupOut>> {
    principal.require(Scope::GroupsWrite)?;
    let LenientJsonBody(body) = body?;
    change_members(state, principal, id, body, false).await
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/groups", get(list_groups).post(create_group))
        .route(
            "/api/groups/{id}",
            get(get_group).put(update_group).delete(delete_group),
        )
        .route(
            "/api/groups/{id}/contacts",
            get(list_members).post(add_members).delete(remove_members),
        )
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        list_groups,
        create_group,
        get_group,
        list_members,
        update_group,
        delete_group,
        add_members,
        remove_members
    ),
    components(schemas(GroupOut, GroupDetailOut, GroupRequest, MembersRequest))
)]
pub struct GroupsApi;
