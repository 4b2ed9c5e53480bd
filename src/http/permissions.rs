//! `GET /api/v1/integrations/permissions`: the member permission catalogue, the roles with
//! their permissions, and the API scope catalogue with the endpoints each scope allows.

use axum::Json;
use axum::Router;
use axum::routing::get;
use serde::Serialize;

use switchboard_domain::permission::{Permission, Role};
use switchboard_domain::scope::Scope;
use switchboard_domain::scope_catalogue::{self, EndpointRef};

use super::auth::Principal;
use super::error::{ApiResult, ErrorBody};

/// The catalogues of this deployment.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Catalogue {
    /// Member permissions, sorted by name.
    pub permissions: Vec<PermissionOut>,
    /// Member roles, from the most to the least privileged.
    pub roles: Vec<RoleOut>,
    /// API key scopes (specification section 5), each with the endpoints it allows; the last
    /// is `*`, which holds every scope (as does a key from before scopes existed).
    pub scopes: Vec<ScopeOut>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct PermissionOut {
    #[schema(example = "messages.send")]
    pub name: &'static str,
    pub description: &'static str,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct RoleOut {
    #[schema(example = "agent")]
    pub name: &'static str,
    pub description: &'static str,
    /// The permissions the role grants, sorted.
    pub permissions: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ScopeOut {
    #[schema(example = "channels:read")]
    pub name: &'static str,
    pub description: &'static str,
    /// The endpoints a key with this scope may call (v1 and legacy `/api/*`).
    pub endpoints: Vec<EndpointRef>,
}

/// The whole catalogue (the same for every organization).
pub fn catalogue() -> Catalogue {
    Catalogue {
        permissions: Permission::ALL
            .iter()
            .map(|p| PermissionOut {
                name: p.as_str(),
                description: p.description(),
            })
            .collect(),
        roles: Role::ALL
            .iter()
            .map(|r| RoleOut {
                name: r.as_str(),
                description: r.description(),
                permissions: r.permissions().iter().map(|p| p.as_str()).collect(),
            })
            .collect(),
        scopes: Scope::ALL
            .iter()
            .map(|s| ScopeOut {
                name: s.as_str(),
                description: s.description(),
                endpoints: scope_catalogue::endpoints(*s).to_vec(),
            })
            .chain(std::iter::once(ScopeOut {
                name: "*",
                description: "Unrestricted: every scope above, and every scope added later. Keys from before scopes existed act as such keys.",
                endpoints: Scope::ALL
                    .iter()
                    .flat_map(|s| scope_catalogue::endpoints(*s).iter().cloned())
                    .collect(),
            }))
            .collect(),
    }
}

/// The permission, role and scope catalogues.
#[utoipa::path(
    get,
    path = "/api/v1/integrations/permissions",
    tag = "organization",
    security(("bearer" = ["permissions:read"])),
    responses(
        (status = 200, description = "The permission, role and scope catalogues.", body = Catalogue),
        (status = 401, description = "Missing, invalid, expired or revoked key.", body = ErrorBody),
        (status = 403, description = "The key lacks permissions:read.", body = ErrorBody),
        (status = 429, description = "Rate limited.", body = ErrorBody),
    )
)]
pub async fn get_permissions(principal: Principal) -> ApiResult<Json<Catalogue>> {
    principal.require(Scope::PermissionsRead)?;
    Ok(Json(catalogue()))
}

pub fn router() -> Router<super::state::AppState> {
    Router::new().route("/api/v1/integrations/permissions", get(get_permissions))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(get_permissions),
    components(schemas(Catalogue, PermissionOut, RoleOut, ScopeOut, EndpointRef))
)]
pub struct PermissionsApi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_covers_every_permission_role_and_scope() {
        let c = catalogue();
        assert_eq!(c.permissions.len(), Permission::ALL.len());
        assert_eq!(c.roles.len(), 5);
        assert_eq!(c.scopes.len(), Scope::ALL.len() + 1);
        let wildcard = c.scopes.last().unwrap();
        assert_eq!(wildcard.name, "*");
        let every: usize = Scope::ALL
            .iter()
            .map(|s| scope_catalogue::endpoints(*s).len())
            .sum();
        assert_eq!(wildcard.endpoints.len(), every);
        assert!(c.scopes.iter().all(|s| !s.endpoints.is_empty()));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["roles"][0]["name"], "owner");
        assert_eq!(
            json["scopes"][0]["endpoints"][0],
            serde_json::json!({"method": "GET", "path": "/api/v1/integrations/channels"})
        );
    }

    /// Every authenticated operation of the OpenAPI document is in the scope catalogue under
    /// the scope its annotation names: the catalogue cannot drift from the routes.
    #[test]
    fn the_scope_catalogue_agrees_with_the_openapi_document() {
        let doc = serde_json::to_value(super::super::openapi::document()).unwrap();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let Some(security) = op["security"].as_array() else {
                    continue;
                };
                for requirement in security {
                    let Some(scopes) = requirement["bearer"].as_array() else {
                        continue;
                    };
                    for scope in scopes {
                        let listed = scope_catalogue::scope_for(method, path);
                        assert_eq!(
                            listed.map(|s| s.as_str()),
                            scope.as_str(),
                            "{} {path} is documented with scope {scope} but the scope catalogue (src/domain/scope_catalogue.rs) says {listed:?}",
                            method.to_uppercase()
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 4, "checked {checked} operations");
    }
}
