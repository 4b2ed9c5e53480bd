//! Path parameters, with every rejection in the API's error format.
//!
//! axum's own `Path` answers a parameter that is not valid UTF-8 once percent-decoded (say
//! `/webhook-endpoints/%ff`) with a plain-text 400. No identifier of the API can be such a
//! string, so here it is the API's JSON 404 `not_found`, like any other unknown identifier.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A path parameter (or tuple of them), deserialized into `T`.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(rejection) => {
                tracing::debug!(%rejection, "path parameter rejected");
                Err(ApiError::not_found("The resource"))
            }
        }
    }
}
