//! What each API scope allows: the endpoints (method and path) it opens, on the v1 surface
//! (specification section 4, CONVENTIONS.md) and on the legacy `/api/*` routes.
//!
//! This is the one place that says which scope an endpoint needs; it is served by
//! `GET /api/v1/integrations/permissions`, and a test checks it against the OpenAPI document.
//! When you add an endpoint, add it here under the scope its handler requires.

use super::scope::Scope;

/// One endpoint a scope allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointRef {
    /// HTTP method: `GET`, `POST`, `PUT` or `DELETE`.
    pub method: &'static str,
    /// Path template, with `{placeholders}`.
    pub path: &'static str,
}

const V1: &str = "/api/v1/integrations";

/// A legacy or other full path.
macro_rules! e {
    ($method:literal, $path:literal) => {
        EndpointRef {
            method: $method,
            path: $path,
        }
    };
}

/// A path under `/api/v1/integrations`.
macro_rules! v1 {
    ($method:literal, $rest:literal) => {
        EndpointRef {
            method: $method,
            path: concat!("/api/v1/integrations", $rest),
        }
    };
}

/// The endpoints `scope` allows.
pub fn endpoints(scope: Scope) -> &'static [EndpointRef] {
    match scope {
        Scope::ChannelsRead => &[v1!("GET", "/channels"), e!("GET", "/api/channels")],
        Scope::ContactsRead => &[
            v1!("GET", "/contacts"),
            v1!("GET", "/contacts/{uuid}"),
            v1!("GET", "/contacts/{uuid}/reachability"),
            e!("GET", "/api/contacts"),
            e!("GET", "/api/contacts/{uuid}"),
        ],
        Scope::ContactsWrite => &[
            e!("POST", "/api/contacts"),
            e!("PUT", "/api/contacts/{uuid}"),
            e!("DELETE", "/api/contacts/{uuid}"),
        ],
        Scope::GroupsRead => &[
            e!("GET", "/api/groups"),
            e!("GET", "/api/groups/{id}"),
            e!("GET", "/api/groups/{id}/contacts"),
        ],
        Scope::GroupsWrite => &[
            e!("POST", "/api/groups"),
            e!("PUT", "/api/groups/{id}"),
            e!("DELETE", "/api/groups/{id}"),
            e!("POST", "/api/groups/{id}/contacts"),
            e!("DELETE", "/api/groups/{id}/contacts"),
        ],
        Scope::MessagesRead => &[
            v1!("GET", "/messages"),
            v1!("GET", "/messages/{uuid}"),
            v1!("GET", "/messages/batches/{batch_id}"),
            e!("GET", "/api/messages"),
        ],
        Scope::MessagesWrite => &[
            v1!("POST", "/messages"),
            v1!("POST", "/messages/media"),
            v1!("POST", "/messages/template"),
            v1!("POST", "/messages/batch"),
            v1!("POST", "/messages/{uuid}/read"),
            e!("POST", "/api/send"),
            e!("POST", "/api/send/media"),
            e!("POST", "/api/send/template"),
        ],
        Scope::CampaignsWrite => &[
            e!("POST", "/api/campaigns"),
            e!("GET", "/api/campaigns/{id}"),
        ],
        Scope::TemplatesRead => &[v1!("GET", "/templates"), e!("GET", "/api/templates")],
        Scope::CannedRepliesRead => &[e!("GET", "/api/canned-replies")],
        Scope::CannedRepliesWrite => &[
            e!("POST", "/api/canned-replies"),
            e!("PUT", "/api/canned-replies/{id}"),
            e!("DELETE", "/api/canned-replies/{id}"),
        ],
        Scope::UsersRead => &[v1!("GET", "/users")],
        Scope::PermissionsRead => &[v1!("GET", "/permissions")],
        Scope::EventsRead => &[v1!("GET", "/events"), v1!("GET", "/events/{uuid}")],
        Scope::WebhooksRead => &[
            v1!("GET", "/webhook-events"),
            v1!("GET", "/webhook-endpoints"),
            v1!("GET", "/webhook-endpoints/{uuid}"),
            v1!("GET", "/webhook-deliveries"),
            v1!("GET", "/webhook-deliveries/{delivery_id}"),
            v1!("GET", "/webhook-endpoints/{uuid}/recoveries/{recovery_id}"),
            v1!("GET", "/event-feed"),
            v1!("GET", "/event-stream"),
            e!("GET", "/api/webhooks"),
        ],
        Scope::WebhooksWrite => &[
            v1!("POST", "/webhook-endpoints"),
            v1!("PUT", "/webhook-endpoints/{uuid}"),
            v1!("DELETE", "/webhook-endpoints/{uuid}"),
            v1!("POST", "/webhook-endpoints/{uuid}/rotate-secret"),
            v1!("POST", "/webhook-endpoints/{uuid}/test"),
            v1!("POST", "/webhook-events/{name}/trigger"),
            v1!("POST", "/webhook-deliveries/{delivery_id}/retry"),
            v1!("POST", "/webhook-endpoints/{uuid}/recover"),
            v1!("POST", "/webhook-deliveries/retry"),
            e!("POST", "/api/webhooks"),
            e!("DELETE", "/api/webhooks/{id}"),
        ],
        Scope::FlowRead => &[e!("GET", "/api/flows")],
        Scope::FlowWrite => &[e!("POST", "/api/flows/{id}/trigger")],
    }
}

/// The scope an endpoint needs, if the catalogue lists it.
pub fn scope_for(method: &str, path: &str) -> Option<Scope> {
    Scope::ALL.iter().copied().find(|s| {
        endpoints(*s)
            .iter()
            .any(|ep| ep.method.eq_ignore_ascii_case(method) && ep.path == path)
    })
}

/// Whether a path belongs to the v1 surface.
pub fn is_v1(path: &str) -> bool {
    path.starts_with(V1)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_scope_allows_at_least_one_endpoint() {
        for s in Scope::ALL {
            assert!(!endpoints(*s).is_empty(), "{s} lists no endpoint");
        }
    }

    #[test]
    fn every_endpoint_is_listed_once_and_well_formed() {
        let mut seen = HashSet::new();
        for s in Scope::ALL {
            for ep in endpoints(*s) {
                assert!(
                    ["GET", "POST", "PUT", "DELETE"].contains(&ep.method),
                    "{ep:?}"
                );
                assert!(ep.path.starts_with("/api/"), "{ep:?}");
                assert!(!ep.path.ends_with('/'), "{ep:?}");
                assert!(seen.insert((ep.method, ep.path)), "{ep:?} is listed twice");
                assert_eq!(scope_for(ep.method, ep.path), Some(*s));
            }
        }
    }

    #[test]
    fn the_v1_endpoints_of_the_specification_are_listed_with_their_scope() {
        // Specification section 4, row by row.
        let spec = [
            ("GET", "/channels", "channels:read"),
            ("GET", "/messages", "messages:read"),
            ("POST", "/messages", "messages:write"),
            ("POST", "/messages/media", "messages:write"),
            ("POST", "/messages/template", "messages:write"),
            ("GET", "/users", "users:read"),
            ("GET", "/permissions", "permissions:read"),
            ("GET", "/events", "events:read"),
            ("GET", "/webhook-events", "webhooks:read"),
            ("GET", "/webhook-endpoints", "webhooks:read"),
            ("POST", "/webhook-endpoints", "webhooks:write"),
            ("GET", "/webhook-endpoints/{uuid}", "webhooks:read"),
            ("PUT", "/webhook-endpoints/{uuid}", "webhooks:write"),
            ("DELETE", "/webhook-endpoints/{uuid}", "webhooks:write"),
            (
                "POST",
                "/webhook-endpoints/{uuid}/rotate-secret",
                "webhooks:write",
            ),
            ("POST", "/webhook-endpoints/{uuid}/test", "webhooks:write"),
            ("GET", "/webhook-deliveries", "webhooks:read"),
        ];
        for (method, rest, scope) in spec {
            let path = format!("{V1}{rest}");
            assert_eq!(
                scope_for(method, &path).map(|s| s.as_str()),
                Some(scope),
                "{method} {path}"
            );
            assert!(is_v1(&path));
        }
        assert!(!is_v1("/api/send"));
    }
}
