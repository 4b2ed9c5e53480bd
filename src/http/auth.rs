//! Authentication (`Authorization: Bearer <API_KEY>`), rate limiting and scopes.
//!
//! [`authenticate`] runs on every route under `/api`: it finds the key with one indexed
//! lookup of its SHA-256, refuses missing, malformed, unknown, revoked and expired keys with
//! 401, counts the request against the key's rate limit, and hands the handler a
//! [`Principal`]. A request that fails authentication spends no key's budget. Handlers call
//! [`Principal::require`] for their scope (403 `insufficient_scope`).

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use switchboard_domain::api_key;
use switchboard_domain::event::Actor;
use switchboard_domain::scope::{Scope, ScopeSet};

use super::error::ApiError;
use super::rate_limit::LimitClass;
use super::state::AppState;

/// How often a key's `last_used_at` is written at most.
const TOUCH_INTERVAL_MS: i64 = 60_000;

/// The authenticated caller: one API key of one organization.
#[derive(Clone, Debug)]
pub struct Principal {
    pub key_id: i64,
    pub key_prefix: String,
    pub org_id: i64,
    pub scopes: ScopeSet,
    pub default_channel_id: Option<i64>,
    pub legacy: bool,
}

impl Principal {
    /// 403 `insufficient_scope` unless the key holds `scope` (or is a wildcard key).
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.allows(scope) {
            Ok(())
        } else {
            Err(ApiError::insufficient_scope(scope))
        }
    }

    /// The actor recorded in organization events.
    pub fn actor(&self) -> Actor {
        Actor::ApiKey {
            api_key_id: self.key_id,
            api_key_prefix: self.key_prefix.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::internal("route is missing the authentication layer"))
    }
}

/// Extracts the bearer token. `Ok(None)` when no credentials were sent.
fn bearer_token(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut all = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(ApiError::ambiguous_api_key());
    }
    let value = value
        .to_str()
        .map_err(|_| ApiError::invalid_api_key())?
        .trim();
    let Some((scheme, token)) = value.split_once(' ') else {
        return if value.eq_ignore_ascii_case("bearer") {
            Ok(None)
        } else {
            Err(ApiError::missing_api_key())
        };
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::missing_api_key());
    }
    let token = token.trim();
    Ok((!token.is_empty()).then(|| token.to_owned()))
}

/// The authentication and rate-limit middleware.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = match bearer_token(req.headers()) {
        Ok(Some(t)) => t,
        Ok(None) => return ApiError::missing_api_key().into_response(),
        Err(e) => return e.into_response(),
    };
    let principal = match identify(&state, &token).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };

    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let class = LimitClass::of(req.method(), &route);
    let limits = state.config.rate_limits_for(principal.org_id);
    let limit = match class {
        LimitClass::Reads => limits.reads,
        LimitClass::Sends => limits.sends,
        LimitClass::Tests => limits.tests,
        LimitClass::BatchItems => state.config.rate_limit_batch_items,
    };
    let decision = state.limiter.check(principal.key_id, class, limit).await;
    if !decision.allowed {
        metrics::counter!("switchboard_rate_limited_total", "policy" => class.policy())
            .increment(1);
        let mut response =
            ApiError::rate_limited(class.policy(), decision.retry_after_secs).into_response();
        decision.apply(response.headers_mut());
        return response;
    }

    touch(&state, principal.key_id);
    tracing::Span::current().record("api_key_id", principal.key_id);
    req.extensions_mut().insert(principal);
    let mut response = next.run(req).await;
    decision.apply(response.headers_mut());
    response
}

async fn identify(state: &AppState, token: &str) -> Result<Principal, ApiError> {
    let hash = api_key::check_presented(token).map_err(|_| ApiError::invalid_api_key())?;
    let key = state
        .config_cache
        .api_key(state.store.as_ref(), &hash)
        .await?
        .ok_or_else(ApiError::invalid_api_key)?;
    // The lookup was by hash; re-check in constant time so the comparison leaks nothing.
    if !key.key_hash.ct_eq(&hash) {
        return Err(ApiError::invalid_api_key());
    }
    if key.revoked_at.is_some() {
        return Err(ApiError::revoked_api_key());
    }
    if key.expires_at.is_some_and(|at| at <= state.clock.now()) {
        return Err(ApiError::expired_api_key());
    }
    Ok(Principal {
        key_id: key.id,
        key_prefix: key.prefix.clone(),
        org_id: key.org_id,
        scopes: key.effective_scopes(),
        default_channel_id: key.default_channel_id,
        legacy: key.legacy,
    })
}

/// Records the key's use, at most once a minute per key and process, off the request path.
fn touch(state: &AppState, key_id: i64) {
    let now = state.clock.now();
    let due = match state.key_touches.get(&key_id) {
        Some(last) => now.millis() - *last >= TOUCH_INTERVAL_MS,
        None => true,
    };
    if due {
        state.key_touches.insert(key_id, now.millis());
        let store = state.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.touch_api_key(key_id, now).await {
                tracing::debug!(error = %e, key_id, "could not record key use");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    use super::*;

    fn parse(value: &[u8]) -> Result<Option<String>, ApiError> {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(value) {
            h.insert(AUTHORIZATION, v);
        }
        bearer_token(&h)
    }

    #[test]
    fn bearer_tokens() {
        assert_eq!(parse(b"Bearer abc").unwrap().as_deref(), Some("abc"));
        assert_eq!(parse(b"bearer   abc  ").unwrap().as_deref(), Some("abc"));
        assert_eq!(parse(b"Bearer").unwrap(), None);
        assert_eq!(parse(b"Bearer ").unwrap(), None);
        assert_eq!(
            parse(b"Basic dXNlcjpwdw==").unwrap_err().code,
            "missing_api_key"
        );
        assert_eq!(
            parse(b"Bearer caf\xc3\xa9").unwrap_err().code,
            "invalid_api_key"
        );
        assert_eq!(bearer_token(&HeaderMap::new()).unwrap(), None);
        // Two Authorization headers: neither is chosen.
        let mut two = HeaderMap::new();
        two.append(AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        two.append(AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        let e = bearer_token(&two).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (401, "invalid_api_key"));
    }

    proptest! {
        #[test]
        fn the_authorization_header_parser_never_panics(value in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Err(e) = parse(&value) {
                prop_assert_eq!(e.status.as_u16(), 401);
            }
        }
    }
}
