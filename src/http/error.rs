//! The one error type of the HTTP API and its body (CONVENTIONS.md "Errors"):
//!
//! ```json
//! {"error": {"code": "insufficient_scope", "message": "...", "request_id": "...",
//!            "details": {"required_scope": "messages:write"}}}
//! ```
//!
//! `code` is stable; `message` is for people. 5xx details are logged, never sent.

use axum::http::StatusCode;
use axum::http::header::{HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use switchboard_domain::ValidationErrors;
use switchboard_domain::scope::Scope;
use switchboard_store::StoreError;

use super::request_id;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The cause of a 5xx, logged and never sent.
    pub internal: Option<Box<str>>,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The error body, for the OpenAPI document.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorObject {
    /// Stable, documented error code.
    #[schema(example = "insufficient_scope")]
    pub code: String,
    /// Explanation for people; may change.
    pub message: String,
    /// The request's `X-Request-Id`.
    pub request_id: Option<String>,
    /// Code-specific details (`required_scope`, `fields`, ...); `{}` when there are none.
    #[schema(value_type = Object)]
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
            headers: Vec::new(),
            internal: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_header(mut self, name: HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.retain(|(n, _)| *n != name);
            self.headers.push((name, v));
        }
        self
    }

    // ---- 400
    pub fn malformed_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_json", message)
    }

    /// A malformed query parameter or header; `param` names it.
    pub fn invalid_request(param: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
            .with_details(json!({ "param": param }))
    }

    /// A cursor that was altered, or issued by another list or with other filters.
    pub fn invalid_cursor(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_cursor", message)
            .with_details(json!({ "param": "cursor" }))
    }

    pub fn idempotency_key_missing() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_missing",
            "The Idempotency-Key header is required on this endpoint.",
        )
    }

    pub fn idempotency_key_invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", message)
    }

    // ---- 401
    fn unauthorized(code: &'static str, message: &str, token_presented: bool) -> Self {
        let challenge = if token_presented {
            format!(
                "Bearer realm=\"switchboard\", error=\"invalid_token\", error_description=\"{message}\""
            )
        } else {
            "Bearer realm=\"switchboard\"".to_owned()
        };
        Self::new(StatusCode::UNAUTHORIZED, code, message).with_header(WWW_AUTHENTICATE, &challenge)
    }

    pub fn missing_api_key() -> Self {
        Self::unauthorized(
            "missing_api_key",
            "Send an API key in the Authorization header: Authorization: Bearer <API_KEY>.",
            false,
        )
    }

    pub fn invalid_api_key() -> Self {
        Self::unauthorized("invalid_api_key", "The API key is not valid.", true)
    }

    /// Two or more `Authorization` headers: which one counts would be a guess.
    pub fn ambiguous_api_key() -> Self {
        Self::unauthorized(
            "invalid_api_key",
            "Send exactly one Authorization header.",
            true,
        )
    }

    pub fn expired_api_key() -> Self {
        Self::unauthorized("expired_api_key", "The API key has expired.", true)
    }

    pub fn revoked_api_key() -> Self {
        Self::unauthorized("revoked_api_key", "The API key has been revoked.", true)
    }

    // ---- 403
    pub fn insufficient_scope(scope: Scope) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!("This key lacks the scope {scope}."),
        )
        .with_details(json!({ "required_scope": scope.as_str() }))
        .with_header(
            WWW_AUTHENTICATE,
            &format!(
                "Bearer realm=\"switchboard\", error=\"insufficient_scope\", scope=\"{scope}\""
            ),
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    // ---- 404, 405, 409, 413, 415
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} was not found."),
        )
    }

    pub fn route_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "No such route. See /api/v1/integrations/openapi.json.",
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "This route does not accept this method.",
        )
    }

    pub fn idempotency_conflict() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "idempotency_conflict",
            "This Idempotency-Key was already used with a different method, path or body.",
        )
    }

    pub fn idempotency_in_progress() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "idempotency_in_progress",
            "A request with this Idempotency-Key is still being processed; retry shortly.",
        )
        .with_header(RETRY_AFTER, "1")
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("The request body is larger than {limit} bytes."),
        )
        .with_details(json!({ "limit_bytes": limit }))
    }

    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "The request body was not received in time.",
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "Send the body as JSON with Content-Type: application/json.",
        )
    }

    // ---- 422
    pub fn validation(errors: ValidationErrors) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            errors.summary(),
        )
        .with_details(json!({ "fields": errors.0 }))
    }

    /// This error with more field problems of the same request (the body's own, such as
    /// unknown fields) named in it: a `validation_failed` gets them added to `details.fields`;
    /// any other error gives way to a `validation_failed` of the body's problems, which come
    /// first (a client fixes the shape of its request before its meaning).
    pub fn with_fields(self, more: ValidationErrors) -> Self {
        if more.is_empty() {
            return self;
        }
        if self.code != "validation_failed" {
            return Self::validation(more);
        }
        let mut details = self.details.unwrap_or_else(|| json!({}));
        let mut all = ValidationErrors::new();
        for f in details
            .get("fields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default();
            all.add(text("field"), text("issue"));
        }
        all.0.extend(more.0);
        details["fields"] = json!(all.0);
        ApiError {
            message: all.summary(),
            details: Some(details),
            ..self
        }
    }

    pub fn validation_field(field: &str, issue: impl Into<String>) -> Self {
        let mut e = ValidationErrors::new();
        e.add(field, issue);
        Self::validation(e)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    // ---- 429
    pub fn rate_limited(policy: &str, retry_after_secs: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "Rate limit exceeded for {policy}; retry after {retry_after_secs} second{}.",
                if retry_after_secs == 1 { "" } else { "s" }
            ),
        )
        .with_details(json!({ "policy": policy, "retry_after": retry_after_secs }))
        .with_header(RETRY_AFTER, &retry_after_secs.to_string())
    }

    // ---- 5xx
    pub fn internal(cause: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "An internal error occurred.",
        );
        e.internal = Some(cause.into().into_boxed_str());
        e
    }

    /// 507 `storage_full`: the database's storage is full; nothing was written. Writes resume
    /// by themselves once space is freed: retry later with the same `Idempotency-Key`.
    pub fn storage_full(cause: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "storage_full",
            "The service's storage is full; nothing was written. Retry later with the same Idempotency-Key.",
        )
        .with_header(RETRY_AFTER, "5");
        e.internal = Some(cause.into().into_boxed_str());
        e
    }

    pub fn service_unavailable(cause: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "The service is temporarily unavailable; retry with backoff.",
        )
        .with_header(RETRY_AFTER, "1");
        e.internal = Some(cause.into().into_boxed_str());
        e
    }

    pub fn provider_unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            message,
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::not_found("The resource"),
            StoreError::Unavailable(m) => ApiError::service_unavailable(m),
            StoreError::StorageFull(m) => ApiError::storage_full(m),
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            match &self.internal {
                Some(cause) => tracing::error!(code = self.code, cause = %cause, "request failed"),
                None => tracing::warn!(code = self.code, message = %self.message, "request failed"),
            }
        }
        let body = ErrorBody {
            error: ErrorObject {
                code: self.code.to_owned(),
                message: self.message,
                request_id: request_id::current(),
                // Always an object (empty when the code has nothing to add), so clients can
                // read `error.details` without checking for its presence.
                details: Some(self.details.unwrap_or_else(|| json!({}))),
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}
