//! Query strings, with malformed values reported as 400 `invalid_request`; on lists, strictly:
//! an unknown or repeated parameter is a 400 too ([`StrictQuery`]).

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;
use utoipa::openapi::path::ParameterIn;

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

/// A list without query parameters (the channels: one page of them all).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NoParams {}

/// A list's query string read into `T`, the one type of the list's parameters: it derives the
/// OpenAPI document's parameters (`utoipa::IntoParams`) and is what the handler reads, so the
/// two cannot drift. Every name must be one `T` declares (else 400 `invalid_request` naming it
/// and listing the accepted ones: [`refuse_unknown`]), given at most once; the values are
/// `T`'s fields, checked by the handler with `super::list_query`'s readers.
pub struct StrictQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + IntoParams> FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let QueryParams(pairs) =
            QueryParams::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        let accepted = accepted::<T>();
        let accepted: Vec<&str> = accepted.iter().map(String::as_str).collect();
        refuse_unknown(pairs.iter().map(|(name, _)| name.as_str()), &accepted)?;
        refuse_repeated(&pairs)?;
        let QueryParams(v) = QueryParams::<T>::from_request_parts(parts, state).await?;
        Ok(StrictQuery(v))
    }
}

/// The query parameters `T` declares, in its order.
pub fn accepted<T: IntoParams>() -> Vec<String> {
    T::into_params(|| Some(ParameterIn::Query))
        .into_iter()
        .map(|p| p.name)
        .collect()
}

/// 400 `invalid_request` naming a parameter given more than once.
fn refuse_repeated(pairs: &[(String, String)]) -> Result<(), ApiError> {
    for (i, (name, _)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(n, _)| n == name) {
            return Err(ApiError::invalid_request(
                name,
                format!("The query parameter `{name}` is given more than once."),
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::pagination::PageParams;

    async fn read<T: DeserializeOwned + IntoParams>(query: &str) -> Result<T, ApiError> {
        let (mut parts, ()) = axum::http::Request::builder()
            .uri(format!("/list?{query}"))
            .body(())
            .unwrap()
            .into_parts();
        StrictQuery::<T>::from_request_parts(&mut parts, &())
            .await
            .map(|StrictQuery(v)| v)
    }

    #[test]
    fn the_parameters_type_names_what_a_list_accepts() {
        assert_eq!(accepted::<PageParams>(), ["limit", "cursor"]);
        assert!(accepted::<NoParams>().is_empty());
    }

    #[tokio::test]
    async fn unknown_and_repeated_parameters_are_400_naming_the_parameter() {
        let e = read::<PageParams>("limit=5&colour=red")
            .await
            .err()
            .unwrap();
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"));
        assert_eq!(e.details.unwrap()["param"], "colour");
        assert!(e.message.contains("accepts limit, cursor"), "{}", e.message);
        let e = read::<PageParams>("limit=5&limit=6").await.err().unwrap();
        assert_eq!(e.details.unwrap()["param"], "limit");
        let e = read::<NoParams>("limit=5").await.err().unwrap();
        assert!(e.message.contains("no query parameters"), "{}", e.message);
        let p = read::<PageParams>("limit=5").await.unwrap();
        assert_eq!((p.limit.as_deref(), p.cursor), (Some("5"), None));
    }
}
