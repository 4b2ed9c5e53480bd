//! OAuth2 client credentials for https endpoints with `auth` (CONVENTIONS "Destinations,
//! filters, throttles, endpoint authentication"): a token fetched from the endpoint's token URL
//! (RFC 6749 4.4, the client authenticated with HTTP Basic), through the same safe client as
//! deliveries, cached until its `expires_in` (less a margin), sent as `Authorization: Bearer`.
//! Tokens are never logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Dispatcher;
use super::attempt::{AttemptResult, read_capped};
use crate::url_safety;
use switchboard_domain::sealed::AAD_AUTH_SECRET;
use switchboard_store::webhooks::ClaimedEndpoint;

/// A token is used until this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long a token without `expires_in` is used.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// Cached tokens by endpoint and authentication (a changed `auth` gets a new token).
#[derive(Default)]
pub(super) struct Tokens {
    cached: Mutex<HashMap<(i64, String), (String, Instant)>>,
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

fn auth_failed(message: String) -> AttemptResult {
    AttemptResult::error("auth_failed", message)
}

impl Dispatcher {
    /// The bearer token for an attempt to `endpoint`: `None` without `auth`; a cached one
    /// unless `fresh`; otherwise one fetched now, by `deadline`.
    pub(super) async fn oauth_token(
        &self,
        endpoint: &ClaimedEndpoint,
        fresh: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Option<String>, AttemptResult> {
        let Some(auth_text) = endpoint
            .controls
            .auth
            .as_ref()
            .filter(|a| !super::client_cert::is_mtls(a))
        else {
            return Ok(None);
        };
        let key = (endpoint.id, auth_text.clone());
        if !fresh {
            if let Some((token, until)) = self.tokens.cached.lock().unwrap().get(&key) {
                if Instant::now() < *until {
                    return Ok(Some(token.clone()));
                }
            }
        }
        let auth: serde_json::Value = serde_json::from_str(auth_text)
            .map_err(|_| auth_failed("The endpoint's authentication is unreadable.".into()))?;
        let secret = endpoint
            .controls
            .sealed_auth_secret
            .as_deref()
            .ok_or_else(|| auth_failed("The endpoint's client secret is missing.".into()))
            .and_then(|sealed| {
                self.secrets.open(sealed, AAD_AUTH_SECRET).map_err(|e| {
                    tracing::error!(endpoint_uuid = %endpoint.uuid, error = %e, "cannot open a client secret");
                    AttemptResult::error(
                        "secret_unavailable",
                        "The endpoint's client secret could not be read; the attempt was not made."
                            .into(),
                    )
                })
            })?;
        let secret = String::from_utf8_lossy(&secret).into_owned();
        let token_url =
            url_safety::check_url(auth["token_url"].as_str().unwrap_or_default(), self.policy)
                .map_err(|e| {
                    AttemptResult::error(
                        "unsafe_target",
                        format!("The token URL is not allowed: {e}."),
                    )
                })?;
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = auth["scope"].as_str() {
            form.push(("scope", scope));
        }
        let request = self
            .client
            .post(token_url)
            .basic_auth(
                auth["client_id"].as_str().unwrap_or_default(),
                Some(&secret),
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .send();
        let mut resp = match tokio::time::timeout_at(deadline, request).await {
            Err(_) => {
                return Err(auth_failed(
                    "The token endpoint did not answer in time.".into(),
                ));
            }
            Ok(Err(e)) => {
                return Err(auth_failed(format!(
                    "The token endpoint could not be reached: {}.",
                    AttemptResult::from_transport(&e, Duration::ZERO)
                        .error_message
                        .unwrap_or_default()
                )));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let mut buf = Vec::new();
        if tokio::time::timeout_at(deadline, read_capped(&mut resp, &mut buf))
            .await
            .map_or(true, |r| r.is_err())
        {
            return Err(auth_failed(
                "The token endpoint's answer was incomplete.".into(),
            ));
        }
        if !status.is_success() {
            return Err(auth_failed(format!(
                "The token endpoint answered {}.",
                status.as_u16()
            )));
        }
        let answer: TokenAnswer = serde_json::from_slice(&buf)
            .map_err(|_| auth_failed("The token endpoint's answer has no access_token.".into()))?;
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs)
            .saturating_sub(EXPIRY_MARGIN);
        self.tokens.cached.lock().unwrap().insert(
            key,
            (answer.access_token.clone(), Instant::now() + lifetime),
        );
        Ok(Some(answer.access_token))
    }
}
