//! `GET /api/v1/integrations/users`: the organization's members with their role and effective
//! permissions.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::permission::{OverrideEffect, Permission, Role};
use switchboard_domain::scope::Scope;
use switchboard_domain::user::MembershipStatus;
use switchboard_store::{Member, MemberQuery};

use super::auth::Principal;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::list_query::parsed;
use super::pagination::{Cursor, Page, PageRequest};
use super::query::StrictQuery;
use super::state::AppState;

/// A member of the organization: the person, the membership, the role and the effective
/// permissions. No password, hash or other credential exists to be shown.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct UserOut {
    pub uuid: Uuid,
    /// E-mail address, unique without regard to case.
    #[schema(example = "alice@example.com")]
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// The member's role in this organization (the same as `membership.role`).
    pub role: Role,
    /// Every role the member holds in this organization (one today).
    pub roles: Vec<Role>,
    pub membership: MembershipOut,
    /// Effective permissions, sorted: the role's, plus grants, minus revocations.
    #[schema(value_type = Vec<String>, example = json!(["contacts.read", "messages.read"]))]
    pub permissions: Vec<Permission>,
    /// This member's own overrides of the role's permissions.
    pub permission_overrides: OverridesOut,
    /// When the user was first added to any organization.
    pub created_at: Timestamp,
}

/// The membership of the user in this organization.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct MembershipOut {
    pub role: Role,
    /// `active`.
    #[schema(value_type = String, example = "active")]
    pub status: MembershipStatus,
    /// When the user joined this organization.
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Per-membership overrides, each sorted.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct OverridesOut {
    /// Permissions granted beyond the role.
    #[schema(value_type = Vec<String>)]
    pub granted: Vec<Permission>,
    /// Permissions withheld although the role has them (or kept away after a role change).
    #[schema(value_type = Vec<String>)]
    pub revoked: Vec<Permission>,
}

impl From<&Member> for UserOut {
    fn from(m: &Member) -> Self {
        let of = |effect: OverrideEffect| {
            m.overrides
                .iter()
                .filter(|(_, e)| *e == effect)
                .map(|(p, _)| *p)
                .collect()
        };
        UserOut {
            uuid: m.user.uuid,
            email: m.user.email.clone(),
            name: m.user.name.clone(),
            role: m.role,
            roles: vec![m.role],
            membership: MembershipOut {
                role: m.role,
                status: m.status,
                created_at: m.created_at,
                updated_at: m.updated_at,
            },
            permissions: m.effective_permissions().into_iter().collect(),
            permission_overrides: OverridesOut {
                granted: of(OverrideEffect::Grant),
                revoked: of(OverrideEffect::Revoke),
            },
            created_at: m.user.created_at,
        }
    }
}

/// Query parameters of the users list.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsersParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 200)]
    limit: Option<String>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Only members with this role.
    #[param(value_type = Option<Role>)]
    role: Option<String>,
}

/// List the organization's members, oldest membership first.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/users",
    tag = "organization",
    params(UsersParams),
    security(("bearer" = ["users:read"])),
    responses(
        (status = 200, description = "A page of members, oldest membership first.", body = Page<UserOut>),
        (status = 400, description = "An unknown parameter, role, limit or cursor (`invalid_request`, `details.param`).", body = ErrorBody),
        (status = 401, description = "Missing, invalid, expired or revoked key.", body = ErrorBody),
        (status = 403, description = "The key lacks users:read.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn list_users(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<StrictQuery<UsersParams>, ApiError>,
) -> ApiResult<Json<Page<UserOut>>> {
    principal.require(Scope::UsersRead)?;
    let StrictQuery(q) = q?;
    let page = PageRequest::parse(q.limit.as_deref(), q.cursor.as_deref())?;
    let role = parsed("role", q.role.as_deref(), |r| r.parse::<Role>())?;
    let members = state
        .store
        .list_members(
            principal.org_id,
            &MemberQuery {
                role,
                after: page
                    .cursor
                    .map(|c| (Timestamp::from_millis(c.time_ms), c.id)),
                limit: page.fetch_limit(),
            },
        )
        .await?;
    let page = Page::from_rows(members, &page, |m| Cursor {
        time_ms: m.created_at.millis(),
        id: m.membership_id,
    });
    Ok(Json(page.map(|m| UserOut::from(&m))))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/integrations/users", get(list_users))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(list_users),
    components(schemas(UserOut, MembershipOut, OverridesOut, Role))
)]
pub struct UsersApi;
