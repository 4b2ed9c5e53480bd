//! The outermost middleware: request id, tracing span, access log and Prometheus metrics.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::request_id;
use crate::trace;
use switchboard_domain::trace::TraceContext;

/// Hex of an id, formatted straight into the log line (no allocation).
struct HexId<'a>(&'a [u8]);

impl std::fmt::Display for HexId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 64];
        let n = self.0.len().min(32);
        for (i, b) in self.0[..n].iter().enumerate() {
            buf[2 * i] = DIGITS[usize::from(b >> 4)];
            buf[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        f.write_str(std::str::from_utf8(&buf[..2 * n]).map_err(|_| std::fmt::Error)?)
    }
}

/// The route template that served a request, copied into the response by [`mark_route`] so
/// that the outer middleware can label metrics with it.
#[derive(Clone)]
struct RouteTemplate(String);

/// Inner layer (a `route_layer`): remembers the matched route template.
pub async fn mark_route(req: Request, next: Next) -> Response {
    let template = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let mut response = next.run(req).await;
    if let Some(t) = template {
        response.extensions_mut().insert(RouteTemplate(t));
    }
    response
}

/// The 405 answer of a known route: labelled with the route's template, not `unmatched`
/// (the method-not-allowed fallback is not wrapped by route layers).
pub async fn method_not_allowed(path: Option<MatchedPath>) -> Response {
    let mut response =
        axum::response::IntoResponse::into_response(super::error::ApiError::method_not_allowed());
    if let Some(p) = path {
        response
            .extensions_mut()
            .insert(RouteTemplate(p.as_str().to_owned()));
    }
    response
}

/// Outer layer: every request gets an id, a span, a log line and metrics.
pub async fn observe(req: Request, next: Next) -> Response {
    let id = request_id::from_headers(req.headers()).unwrap_or_else(request_id::generate);
    let method = req.method().clone();
    // The caller's trace, or a new one (an absent or invalid `traceparent`).
    let parent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::parse);
    let mut trace_span = trace::Span::start("http.request", trace::Kind::Server, parent);
    let trace_ctx = trace_span.context();
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        trace_id = %HexId(&trace_ctx.trace_id),
        method = %method,
        path = %req.uri().path(),
        api_key_id = tracing::field::Empty
    );
    let started = Instant::now();
    let mut response = request_id::scope(
        id.clone(),
        trace::scope(trace_ctx, next.run(req).instrument(span.clone())),
    )
    .await;
    let elapsed = started.elapsed();
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(request_id::HEADER, v);
    }
    let route = response
        .extensions()
        .get::<RouteTemplate>()
        .map(|r| r.0.clone())
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = response.status().as_u16();
    if trace_span.is_recording() {
        trace_span.rename(format!("{method} {route}"));
        trace_span.attr("http.request.method", method.to_string());
        trace_span.attr("http.route", route.clone());
        trace_span.attr("http.response.status_code", i64::from(status));
        trace_span.attr("switchboard.request_id", id.clone());
        if status >= 500 {
            trace_span.fail(format!("HTTP {status}"));
        }
    }
    drop(trace_span);
    metrics::counter!("switchboard_http_requests_total", "method" => method.to_string(), "route" => route.clone(), "status" => status.to_string())
        .increment(1);
    metrics::histogram!("switchboard_http_request_duration_seconds", "method" => method.to_string(), "route" => route.clone())
        .record(elapsed.as_secs_f64());
    span.in_scope(|| {
        tracing::info!(
            status,
            route = %route,
            // Milliseconds to the microsecond (no float noise such as 2.2863610000000003).
            latency_ms = (elapsed.as_micros() as f64).round() / 1000.0,
            "request finished"
        )
    });
    response
}
