//! Query strings, with malformed values reported as 400 `invalid_request`; on lists, strictly:
//! an unknown parameter is a 400 too ([`StrictQuery`], and `list_query::ListQuery`).

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

/// The query parameters a list accepts (its [`StrictQuery`] refuses any other).
pub trait AcceptedParams {
    const ACCEPTED: &'static [&'static str];
}

/// A list without query parameters (the channels: one page of them all).
#[derive(Debug, Default, serde::Deserialize)]
pub struct NoParams {}

impl AcceptedParams for NoParams {
    const ACCEPTED: &'static [&'static str] = &[];
}

/// A list's query string: every parameter one of `T::ACCEPTED` (else 400 `invalid_request`
/// naming it and listing the accepted ones: [`refuse_unknown`]), then read as
/// [`QueryParams<T>`].
pub struct StrictQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + AcceptedParams> FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let QueryParams(pairs) =
            QueryParams::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        refuse_unknown(pairs.iter().map(|(name, _)| name.as_str()), T::ACCEPTED)?;
        let QueryParams(v) = QueryParams::<T>::from_request_parts(parts, state).await?;
        Ok(StrictQuery(v))
    }
}

/// 400 `invalid_request` for the first name that is not `allowed` (`details.param` names it;
/// the message lists what the endpoint accepts), as Stripe answers unknown parameters.
pub fn refuse_unknown<'a>(
    names: impl IntoIterator<Item = &'a str>,
    allowed: &[&str],
) -> Result<(), ApiError> {
    for name in names {
        if allowed.contains(&name) {
            continue;
        }
        let shown: String = name.chars().take(64).collect();
        let accepts = match allowed {
            [] => "no query parameters".to_owned(),
            _ => allowed.join(", "),
        };
        return Err(ApiError::invalid_request(
            &shown,
            format!("Unknown query parameter `{shown}`; this endpoint accepts {accepts}."),
        ));
    }
    Ok(())
}
