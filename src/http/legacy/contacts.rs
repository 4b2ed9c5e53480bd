//! Legacy contacts: `GET/POST /api/contacts`, `GET/PUT/DELETE /api/contacts/{uuid}`
//! (`contacts:read` / `contacts:write`).
//!
//! Phones are normalized to E.164 (`domain::phone`) on write and before matching. A phone
//! another live contact of the organization has is a 422 `validation_failed` on `phone`.
//! Deletion is soft: the contact row stays (messages keep their `contact_uuid`) without its
//! phone, name and Telegram chat; it leaves its groups, lookups no longer find it, sends to its
//! UUID are refused, and a new contact (or a send by phone) can take the phone again.

use crate::http::path::Path;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::Deserialize;
use serde_json::Value;

use crate::ops::contacts;
use crate::views::messages::ContactOut;
use switchboard_domain::ValidationErrors;
use switchboard_domain::contact::validate_contact_name;
use switchboard_domain::phone::Phone;
use switchboard_domain::scope::Scope;
use switchboard_store::StoreError;
use switchboard_store::legacy::{ContactPatch, ContactQuery};

use super::super::auth::Principal;
use super::super::error::{ApiError, ApiResult, ErrorBody};
use super::super::json::LenientJsonBody;
use super::super::list_query::parsed;
use super::super::pagination::{Page, PageRequest};
use super::super::query::StrictQuery;
use super::super::state::AppState;
use super::{cursor, page_query, path_uuid};

pub const DUPLICATE_PHONE: &str = "already used by another contact";

/// Create a contact.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateContactRequest {
    /// The phone: E.164 or an international form (`00...`, spaces, dashes); stored as E.164.
    #[schema(example = "+4915123456789")]
    pub phone: Option<String>,
    /// 1 to 200 characters.
    pub name: Option<String>,
}

/// Change a contact: any subset of `phone` and `name` (`name: null` clears it).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UpdateContactRequest {
    pub phone: Option<String>,
    #[schema(value_type = Option<String>)]
    #[serde(default, deserialize_with = "present")]
    pub name: Option<Value>,
}

/// Distinguishes `"name": null` (present, `Some(Null)`) from an absent field (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn parse_phone(errors: &mut ValidationErrors, raw: &str) -> Option<Phone> {
    Phone::parse(raw)
        .map_err(|e| errors.add("phone", e.to_string()))
        .ok()
}

fn duplicate_phone() -> ApiError {
    ApiError::validation_field("phone", DUPLICATE_PHONE)
}

/// Query parameters of the contact list.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ContactsParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>)]
    limit: Option<String>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only the contact with this phone (normalized to E.164 before matching).
    phone: Option<String>,
    /// Only contacts whose name contains this text (case-insensitive).
    name: Option<String>,
}

/// List contacts, newest first; search by phone or name.
#[utoipa::path(
    get,
    path = "/api/contacts",
    tag = "legacy",
    params(ContactsParams),
    security(("bearer" = ["contacts:read"])),
    responses(
        (status = 200, description = "A page of contacts, newest first.", body = Page<ContactOut>),
        (status = 400, description = "invalid_request: an unknown parameter, a bad limit, cursor or phone.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
    )
)]
pub async fn list_contacts(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<ContactsParams>, ApiError>,
) -> ApiResult<Json<Page<ContactOut>>> {
    principal.require(Scope::ContactsRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let phone = parsed("phone", q.phone.as_deref(), |p| {
        Phone::parse(p).map_err(|e| e.to_string())
    })?;
    let name = match q.name.as_deref() {
        Some(n) if n.trim().is_empty() || n.chars().count() > 200 || n.contains('\0') => {
            return Err(ApiError::invalid_request(
                "name",
                "name must be 1 to 200 characters.",
            ));
        }
        Some(n) => Some(n.trim().to_lowercase()),
        None => None,
    };
    let rows = state
        .store
        .list_contacts(
            principal.org_id,
            &ContactQuery {
                phone,
                name_contains: name,
                ..Default::default()
            },
            page_query(&page),
        )
        .await?;
    let page = Page::from_rows(rows, &page, |c| cursor(c.created_at, c.id));
    Ok(Json(page.map(|c| ContactOut::from(&c))))
}

/// Create a contact (emits `contact.created`).
#[utoipa::path(
    post,
    path = "/api/contacts",
    tag = "legacy",
    request_body = CreateContactRequest,
    security(("bearer" = ["contacts:write"])),
    responses(
        (status = 201, description = "Created.", body = ContactOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 422, description = "validation_failed: phone missing or invalid, or already used by another contact (`already used by another contact`); name invalid.", body = ErrorBody),
    )
)]
pub async fn create_contact(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<LenientJsonBody<CreateContactRequest>, ApiError>,
) -> ApiResult<(StatusCode, Json<ContactOut>)> {
    principal.require(Scope::ContactsWrite)?;
    let LenientJsonBody(body) = body?;
    let mut errors = ValidationErrors::new();
    let phone = match body.phone.as_deref() {
        Some(p) => parse_phone(&mut errors, p),
        None => {
            errors.add("phone", "is required, e.g. +4915123456789");
            None
        }
    };
    let name = body.name.as_deref().and_then(|n| {
        validate_contact_name(n)
            .map_err(|e| errors.add("name", e))
            .ok()
    });
    // A missing or invalid phone was reported above.
    let (Some(phone), true) = (phone, errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    let contact = contacts::add_contact(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        phone,
        name,
    )
    .await
    .map_err(|e| match e {
        StoreError::UniqueViolation(_) => duplicate_phone(),
        other => other.into(),
    })?;
    Ok((StatusCode::CREATED, Json(ContactOut::from(&contact))))
}

/// One contact.
#[utoipa::path(
    get,
    path = "/api/contacts/{uuid}",
    tag = "legacy",
    params(("uuid" = String, Path, description = "The contact's UUID.")),
    security(("bearer" = ["contacts:read"])),
    responses(
        (status = 200, description = "The contact.", body = ContactOut),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
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

/// Change a contact's phone or name (emits `contact.updated`).
#[utoipa::path(
    put,
    path = "/api/contacts/{uuid}",
    tag = "legacy",
    params(("uuid" = String, Path, description = "The contact's UUID.")),
    request_body = UpdateContactRequest,
    security(("bearer" = ["contacts:write"])),
    responses(
        (status = 200, description = "The contact after the change.", body = ContactOut),
        (status = 400, description = "malformed_json.", body = ErrorBody),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
        (status = 422, description = "validation_failed: phone invalid or already used by another contact; name invalid.", body = ErrorBody),
    )
)]
pub async fn update_contact(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    body: Result<LenientJsonBody<UpdateContactRequest>, ApiError>,
) -> ApiResult<Json<ContactOut>> {
    principal.require(Scope::ContactsWrite)?;
    let LenientJsonBody(body) = body?;
    let uuid = path_uuid(&uuid, "The contact")?;
    let mut errors = ValidationErrors::new();
    let phone = body
        .phone
        .as_deref()
        .and_then(|p| parse_phone(&mut errors, p));
    let name = match &body.name {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(n)) => validate_contact_name(n)
            .map_err(|e| errors.add("name", e))
            .ok()
            .map(Some),
        Some(_) => {
            errors.add("name", "must be a string or null");
            None
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let contact = contacts::update_contact(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        uuid,
        ContactPatch { phone, name },
    )
    .await
    .map_err(|e| match e {
        StoreError::UniqueViolation(_) => duplicate_phone(),
        StoreError::NotFound => ApiError::not_found("The contact"),
        other => other.into(),
    })?;
    Ok(Json(ContactOut::from(&contact)))
}

/// Delete a contact (soft; emits `contact.deleted`).
#[utoipa::path(
    delete,
    path = "/api/contacts/{uuid}",
    tag = "legacy",
    params(("uuid" = String, Path, description = "The contact's UUID.")),
    security(("bearer" = ["contacts:write"])),
    responses(
        (status = 204, description = "Deleted: its messages keep their contact_uuid; the phone is free again."),
        (status = 403, description = "insufficient_scope.", body = ErrorBody),
        (status = 404, description = "not_found.", body = ErrorBody),
    )
)]
pub async fn delete_contact(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(Scope::ContactsWrite)?;
    let uuid = path_uuid(&uuid, "The contact")?;
    contacts::delete_contact(
        state.store.as_ref(),
        state.clock.as_ref(),
        principal.org_id,
        uuid,
    )
    .await
    .map_err(|e| match e {
        StoreError::NotFound => ApiError::not_found("The contact"),
        other => other.into(),
    })?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/contacts", get(list_contacts).post(create_contact))
        .route(
            "/api/contacts/{uuid}",
            get(get_contact).put(update_contact).delete(delete_contact),
        )
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        list_contacts,
        create_contact,
        get_contact,
        update_contact,
        delete_contact
    ),
    components(schemas(CreateContactRequest, UpdateContactRequest, ContactOut))
)]
pub struct ContactsApi;
