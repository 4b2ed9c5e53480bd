//! Operations endpoints: `/healthz` (the process is up), `/readyz` (the database answers and
//! takes writes),
//! `/metrics` (Prometheus text format). None needs a key.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::error::ApiError;
use super::state::AppState;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up.")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: the database answers within two seconds, and takes writes (while writes fail
/// for lack of space or with I/O errors, each check tries a small write: ready again once one
/// commits).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready to serve."),
        (status = 503, description = "The database is unreachable, or its storage refuses writes (full, or I/O errors).", body = super::error::ErrorBody),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if let Some(fault) = switchboard_store::health::write_fault() {
        let probe = state.store.probe_write(state.clock.now());
        match tokio::time::timeout(Duration::from_secs(2), probe).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return ApiError::service_unavailable(format!(
                    "readiness check: writes fail ({}): {e}",
                    fault.as_str()
                ))
                .into_response();
            }
            Err(_) => {
                return ApiError::service_unavailable(
                    "readiness check: a write did not complete in 2s",
                )
                .into_response();
            }
        }
    }
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => Json(json!({ "status": "ready", "database": "ok" })).into_response(),
        Ok(Err(e)) => {
            ApiError::service_unavailable(format!("readiness check: {e}")).into_response()
        }
        Err(_) => {
            ApiError::service_unavailable("readiness check: the database did not answer in 2s")
                .into_response()
        }
    }
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text exposition format.", content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let body = state
        .metrics
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default();
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(healthz, readyz, metrics))]
pub struct HealthApi;
