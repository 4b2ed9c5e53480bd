//! Query strings, with malformed values reported as 400 `invalid_request`.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| QueryParams(v))
            .map_err(|e| {
                let text = e.body_text();
                let reason = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                ApiError::invalid_request(
                    "query",
                    format!("The query string is not valid: {reason}."),
                )
            })
    }
}
