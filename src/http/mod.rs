//! The HTTP layer: router, middleware, extractors and one module per resource.
//!
//! Handlers stay thin: they check the scope, parse the request into domain types, call the
//! store or an operation, and shape the response. Rules live in `domain`, SQL in `store`.

pub mod auth;
pub mod channels;
pub mod console;
pub mod contacts;
pub mod cursor;
pub mod deadline;
pub mod error;
pub mod events;
pub mod health;
pub mod idempotency;
pub mod inbound;
pub mod json;
pub mod legacy;
pub mod list_query;
pub mod messages;
pub mod observe;
pub mod openapi;
mod openapi_kinds;
mod openapi_webhooks;
pub mod pagination;
pub mod path;
pub mod permissions;
pub mod query;
pub mod rate_limit;
pub mod recorded;
pub mod request_id;
pub mod server;
pub mod state;
pub mod templates;
pub mod users;
pub mod webhooks;

use std::any::Any;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;

pub use error::{ApiError, ApiResult};
pub use state::{AppInner, AppState};

/// The routes that need an API key (the whole `/api` surface).
fn authenticated_routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .merge(channels::router())
        .merge(contacts::router())
        .merge(users::router())
        .merge(permissions::router())
        .merge(events::router())
        .merge(messages::router())
        .merge(templates::router())
        .merge(webhooks::router())
        .merge(legacy::router())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            pagination::bind_lists,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            idempotency::honour,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
}

/// The whole application.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .merge(authenticated_routes(&state))
        .merge(health::router())
        .merge(console::router())
        .merge(inbound::router())
        .merge(openapi::router());
    let body_deadline = state.config.http_body_timeout;
    with_common_layers(routes, body_deadline).with_state(state)
}

/// What every route gets: JSON 404 and 405, the body size and time limits, panic recovery,
/// request ids, logs and metrics.
fn with_common_layers<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    body_deadline: std::time::Duration,
) -> Router<S> {
    routes
        .route_layer(middleware::from_fn(observe::mark_route))
        .fallback(|| async { ApiError::route_not_found() })
        .method_not_allowed_fallback(observe::method_not_allowed)
        .layer(DefaultBodyLimit::max(json::BODY_LIMIT))
        .layer(middleware::from_fn(move |req, next| {
            deadline::limit_body_time(body_deadline, req, next)
        }))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn(observe::observe))
}

/// A panic in a handler becomes a 500 `internal_error`; the detail is logged, never sent.
fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    ApiError::internal(format!("handler panicked: {detail}")).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::{get, post};
    use futures::StreamExt;
    use tower::ServiceExt;

    use super::*;

    async fn call(
        router: Router,
        req: Request<Body>,
    ) -> (u16, axum::http::HeaderMap, serde_json::Value) {
        let resp = router.oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            headers,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    fn app() -> Router {
        async fn echo(
            json::JsonBody(v): json::JsonBody<serde_json::Value>,
        ) -> axum::Json<serde_json::Value> {
            axum::Json(v)
        }
        async fn boom() -> &'static str {
            panic!("secret detail")
        }
        with_common_layers(
            Router::new()
                .route("/boom", get(boom))
                .route("/echo", post(echo)),
            std::time::Duration::from_millis(300),
        )
    }

    #[tokio::test]
    async fn a_panic_is_a_500_internal_error_without_the_detail() {
        let (status, headers, body) =
            call(app(), Request::get("/boom").body(Body::empty()).unwrap()).await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["code"], "internal_error");
        assert!(!body.to_string().contains("secret detail"));
        assert_eq!(
            body["error"]["request_id"].as_str(),
            headers["x-request-id"].to_str().ok()
        );
    }

    #[tokio::test]
    async fn a_body_that_never_completes_is_a_408() {
        let stream = futures::stream::once(async {
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"a\":"))
        })
        .chain(futures::stream::pending());
        let req = Request::post("/echo")
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap();
        let (status, _, body) = call(app(), req).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (408, Some("request_timeout"))
        );
    }

    #[tokio::test]
    async fn bodies_are_limited_typed_and_parsed() {
        let big = format!("{{\"x\": \"{}\"}}", "a".repeat(json::BODY_LIMIT + 10));
        let (status, _, body) = call(
            app(),
            Request::post("/echo")
                .header("content-type", "application/json")
                .body(Body::from(big))
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (413, Some("payload_too_large"))
        );

        let (status, _, body) = call(
            app(),
            Request::post("/echo")
                .header("content-type", "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (415, Some("unsupported_media_type"))
        );

        let (status, _, body) = call(
            app(),
            Request::post("/echo")
                .header("content-type", "application/json")
                .body(Body::from("{oops"))
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("malformed_json"))
        );

        let (status, _, body) = call(
            app(),
            Request::post("/echo")
                .header("content-type", "application/json; charset=utf-8")
                .body(Body::from("{\"a\":1}"))
                .unwrap(),
        )
        .await;
        assert_eq!((status, body["a"].as_i64()), (200, Some(1)));
    }
}
