//! The checks of an endpoint's input (URL and its safety, headers, events, filter, broker
//! target, authentication, per-endpoint limits), each problem named by its field, all at once.

use super::*;
use std::collections::BTreeMap;

use serde_json::json;

use crate::url_safety::{self, UrlError};
use crate::webhooks::mtls;
use switchboard_domain::ValidationErrors;
use switchboard_domain::sealed::{AAD_AUTH_SECRET, AAD_TARGET_URL};
use switchboard_domain::webhooks::destination::{self, DestinationType};
use switchboard_domain::webhooks::endpoint::{self};
use switchboard_domain::webhooks::filter::Filter;

/// Collects field problems and URL safety into one result.
pub(super) struct Checker {
    pub(super) errors: ValidationErrors,
    pub(super) unsafe_url: Option<String>,
}

impl Checker {
    pub(super) fn new() -> Self {
        Checker {
            errors: ValidationErrors::new(),
            unsafe_url: None,
        }
    }

    pub(super) fn name(&mut self, name: &str) {
        if let Err(issue) = endpoint::check_name(name) {
            self.errors.add("name", issue);
        }
    }

    pub(super) fn events(&mut self, events: &[String]) -> Vec<String> {
        match endpoint::check_events(events) {
            Ok(v) => v,
            Err(problems) => {
                for (i, issue) in problems {
                    let field = match i {
                        Some(i) => format!("events[{i}]"),
                        None => "events".to_owned(),
                    };
                    self.errors.add(field, issue);
                }
                Vec::new()
            }
        }
    }

    pub(super) fn headers(&mut self, headers: &BTreeMap<String, String>) {
        if let Err(problems) = endpoint::check_headers(headers) {
            for (name, issue) in problems {
                let field = if name.is_empty() {
                    "headers".to_owned()
                } else {
                    format!("headers.{name}")
                };
                self.errors.add(field, issue);
            }
        }
    }

    /// Checks a filter; returns it as the JSON text to store.
    pub(super) fn filter(&mut self, filter: &serde_json::Value) -> Option<String> {
        match Filter::parse(filter) {
            Ok(_) => Some(filter.to_string()),
            Err(issue) => {
                self.errors.add("filter", issue);
                None
            }
        }
    }

    /// Checks a broker target of `destination` (`redis_stream`, `nats_jetstream`, `rabbitmq`).
    /// Returns the URL as answered (masked), the target as answered (JSON text) and the full
    /// URL sealed when it holds credentials.
    pub(super) async fn target(
        &mut self,
        destination: DestinationType,
        target: &serde_json::Value,
        deps: &Deps<'_>,
    ) -> Option<(String, String, Option<Vec<u8>>)> {
        let serde_json::Value::Object(map) = target else {
            self.errors.add(
                "target",
                "must be an object such as {\"url\": \"redis://...\", \"stream\", \"max_len\"} or {\"url\": \"nats://...\", \"subject\"} or {\"url\": \"amqp://...\", \"exchange\", \"routing_key\"}",
            );
            return None;
        };
        let (scheme, port, key_field) = destination.broker()?;
        let redis = destination == DestinationType::RedisStream;
        let fields: &[&str] = match destination {
            DestinationType::RedisStream => &["url", "stream", "max_len"],
            DestinationType::Rabbitmq => &["url", "exchange", "routing_key"],
            _ => &["url", key_field],
        };
        let exchange = match (destination, map.get("exchange")) {
            (DestinationType::Rabbitmq, Some(serde_json::Value::String(x))) => {
                match destination::check_exchange(x) {
                    Ok(()) => Some(x.clone()),
                    Err(issue) => {
                        self.errors.add("target.exchange", issue);
                        None
                    }
                }
            }
            (DestinationType::Rabbitmq, _) => {
                self.errors.add(
                    "target.exchange",
                    "is required: the exchange name (\"\" for the default exchange)",
                );
                None
            }
            _ => None,
        };
        let before = self.errors.0.len();
        for key in map.keys() {
            if !fields.contains(&key.as_str()) {
                self.errors.add(
                    format!("target.{key}"),
                    format!(
                        "unknown_field: a {} target has {}",
                        destination.as_str(),
                        fields.join(", ")
                    ),
                );
            }
        }
        let url = self.broker_url(map.get("url"), scheme, port, deps).await;
        let key_path = format!("target.{key_field}");
        let stream = match map.get(key_field).and_then(serde_json::Value::as_str) {
            None => {
                self.errors.add(
                    key_path,
                    "is required (it may use {event}, {namespace}, {contact_uuid}, {channel_slug})",
                );
                None
            }
            Some(t) => match destination::check_template(t) {
                Ok(()) => Some(t.to_owned()),
                Err(issue) => {
                    self.errors.add(key_path, issue);
                    None
                }
            },
        };
        let max_len = match map.get("max_len") {
            _ if !redis => Some(0),
            None | Some(serde_json::Value::Null) => Some(destination::DEFAULT_MAX_LEN),
            Some(v) => match v.as_i64().map(destination::check_max_len) {
                Some(Ok(n)) => Some(n),
                Some(Err(issue)) => {
                    self.errors.add("target.max_len", issue);
                    None
                }
                None => {
                    self.errors.add("target.max_len", "must be an integer");
                    None
                }
            },
        };
        if self.errors.0.len() > before {
            return None;
        }
        let (url, stream, max_len) = (url?, stream?, max_len?);
        let masked = destination::mask_url(&url);
        let answered = match destination {
            DestinationType::RedisStream => {
                json!({"url": masked, "stream": stream, "max_len": max_len})
            }
            DestinationType::Rabbitmq => {
                json!({"url": masked, "exchange": exchange?, "routing_key": stream})
            }
            _ => json!({"url": masked, key_field: stream}),
        }
        .to_string();
        let sealed = (!url.username().is_empty() || url.password().is_some())
            .then(|| deps.secrets.seal(url.as_str().as_bytes(), AAD_TARGET_URL));
        Some((masked, answered, sealed))
    }

    /// A broker target's `url`: its scheme and port the broker's own, its host under the URL
    /// rules (`target.url` named when it is malformed, `unsafe_url` when its address is not
    /// allowed).
    async fn broker_url(
        &mut self,
        raw: Option<&serde_json::Value>,
        scheme: &str,
        port: u16,
        deps: &Deps<'_>,
    ) -> Option<url::Url> {
        match raw.and_then(serde_json::Value::as_str) {
            None => {
                self.errors
                    .add("target.url", format!("is required: a {scheme}:// URL"));
                None
            }
            Some(raw) => match url_safety::check_broker_url(raw, scheme, port, deps.policy) {
                Ok(u) => {
                    match url_safety::check_resolution(
                        &u,
                        deps.policy,
                        deps.lookup,
                        RESOLVE_TIMEOUT,
                    )
                    .await
                    {
                        Ok(()) => Some(u),
                        Err(UrlError::Unsafe(m) | UrlError::Invalid(m)) => {
                            self.unsafe_url = Some(m);
                            None
                        }
                    }
                }
                Err(UrlError::Invalid(issue)) => {
                    self.errors.add("target.url", issue);
                    None
                }
                Err(UrlError::Unsafe(m)) => {
                    self.unsafe_url = Some(m);
                    None
                }
            },
        }
    }

    /// Checks `auth` (an https endpoint's): returns it as answered (JSON text, no secret) and
    /// its secret sealed.
    pub(super) async fn auth(
        &mut self,
        auth: &serde_json::Value,
        destination: DestinationType,
        deps: &Deps<'_>,
    ) -> Option<(String, Vec<u8>)> {
        if destination != DestinationType::Https {
            self.errors
                .add("auth", "only an https endpoint authenticates (type https)");
            return None;
        }
        let serde_json::Value::Object(map) = auth else {
            self.errors.add(
                "auth",
                "must be an object: {\"type\": \"oauth2_client_credentials\", \"token_url\", \"client_id\", \"client_secret\", \"scope\"} or {\"type\": \"mtls\", \"certificate\", \"private_key\"}",
            );
            return None;
        };
        match map.get("type").and_then(serde_json::Value::as_str) {
            Some("oauth2_client_credentials") => self.oauth2(map, deps).await,
            Some("mtls") => self.mtls(map, deps),
            _ => {
                self.errors
                    .add("auth.type", "must be oauth2_client_credentials or mtls");
                None
            }
        }
    }

    /// Checks `auth` of type `mtls`: a client certificate (chain) and its private key, in
    /// PEM. Answered: the type and the leaf certificate's SHA-256; both are sealed together.
    fn mtls(
        &mut self,
        map: &serde_json::Map<String, serde_json::Value>,
        deps: &Deps<'_>,
    ) -> Option<(String, Vec<u8>)> {
        let before = self.errors.0.len();
        for key in map.keys() {
            if !["type", "certificate", "private_key"].contains(&key.as_str()) {
                self.errors.add(
                    format!("auth.{key}"),
                    "unknown_field: mtls has certificate and private_key",
                );
            }
        }
        let mut pem = |name: &str| match map.get(name) {
            Some(serde_json::Value::String(v)) => Some(v.clone()),
            _ => {
                self.errors
                    .add(format!("auth.{name}"), "is required (PEM text)");
                None
            }
        };
        let (certificate, private_key) = (pem("certificate"), pem("private_key"));
        if self.errors.0.len() > before {
            return None;
        }
        match mtls::check_client_certificate(&certificate?, &private_key?) {
            Ok(checked) => {
                let answered = json!({"type": "mtls", "certificate_sha256": checked.fingerprint});
                let sealed = deps.secrets.seal(checked.pem.as_bytes(), AAD_AUTH_SECRET);
                Some((answered.to_string(), sealed))
            }
            Err(problems) => {
                for (field, issue) in problems {
                    self.errors.add(format!("auth.{field}"), issue);
                }
                None
            }
        }
    }

    /// Checks `auth` of type `oauth2_client_credentials`.
    async fn oauth2(
        &mut self,
        map: &serde_json::Map<String, serde_json::Value>,
        deps: &Deps<'_>,
    ) -> Option<(String, Vec<u8>)> {
        let before = self.errors.0.len();
        for key in map.keys() {
            if !["type", "token_url", "client_id", "client_secret", "scope"].contains(&key.as_str())
            {
                self.errors.add(
                    format!("auth.{key}"),
                    "unknown_field: oauth2_client_credentials has token_url, client_id, client_secret and scope",
                );
            }
        }
        let mut field = |name: &str, max: usize, spaces: bool, required: bool| match map.get(name) {
            None | Some(serde_json::Value::Null) if !required => None,
            Some(serde_json::Value::String(v)) => {
                match endpoint::check_credential(v, max, spaces) {
                    Ok(()) => Some(v.clone()),
                    Err(issue) => {
                        self.errors.add(format!("auth.{name}"), issue);
                        None
                    }
                }
            }
            _ => {
                self.errors
                    .add(format!("auth.{name}"), "is required (a string)");
                None
            }
        };
        let client_id = field("client_id", endpoint::MAX_CLIENT_ID_LEN, false, true);
        let client_secret = field(
            "client_secret",
            endpoint::MAX_CLIENT_SECRET_LEN,
            false,
            true,
        );
        let scope = field("scope", endpoint::MAX_SCOPE_LEN, true, false);
        let token_url = match map.get("token_url").and_then(serde_json::Value::as_str) {
            None => {
                self.errors
                    .add("auth.token_url", "is required: the token endpoint's URL");
                None
            }
            Some(raw) => match url_safety::check_url(raw, deps.policy) {
                Ok(u) => {
                    match url_safety::check_resolution(
                        &u,
                        deps.policy,
                        deps.lookup,
                        RESOLVE_TIMEOUT,
                    )
                    .await
                    {
                        Ok(()) => Some(u),
                        Err(UrlError::Unsafe(m) | UrlError::Invalid(m)) => {
                            self.unsafe_url = Some(m);
                            None
                        }
                    }
                }
                Err(UrlError::Invalid(issue)) => {
                    self.errors.add("auth.token_url", issue);
                    None
                }
                Err(UrlError::Unsafe(m)) => {
                    self.unsafe_url = Some(m);
                    None
                }
            },
        };
        if self.errors.0.len() > before {
            return None;
        }
        let answered = json!({
            "type": "oauth2_client_credentials",
            "token_url": token_url?.as_str(),
            "client_id": client_id?,
            "scope": scope,
        });
        let sealed = deps
            .secrets
            .seal(client_secret?.as_bytes(), AAD_AUTH_SECRET);
        Some((answered.to_string(), sealed))
    }

    /// Checks an attempt time limit; returns it in milliseconds.
    pub(super) fn timeout(&mut self, t: &str) -> Option<i64> {
        match endpoint::check_timeout(t) {
            Ok(d) => i64::try_from(d.as_millis()).ok(),
            Err(issue) => {
                self.errors.add("timeout", issue);
                None
            }
        }
    }

    /// Checks retry delays; returns them in milliseconds.
    pub(super) fn retry_delays(&mut self, delays: &[String]) -> Option<Vec<i64>> {
        match endpoint::check_retry_delays(delays) {
            Ok(ds) => Some(
                ds.iter()
                    .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .collect(),
            ),
            Err(problems) => {
                for (i, issue) in problems {
                    let field = match i {
                        Some(i) => format!("retry_delays[{i}]"),
                        None => "retry_delays".to_owned(),
                    };
                    self.errors.add(field, issue);
                }
                None
            }
        }
    }

    pub(super) fn max_per_second(&mut self, n: i64) -> Option<i64> {
        match endpoint::check_max_per_second(n) {
            Ok(n) => Some(i64::from(n)),
            Err(issue) => {
                self.errors.add("max_per_second", issue);
                None
            }
        }
    }

    pub(super) async fn url(&mut self, raw: &str, deps: &Deps<'_>) -> Option<url::Url> {
        match url_safety::check_url(raw, deps.policy) {
            Ok(u) => {
                match url_safety::check_resolution(&u, deps.policy, deps.lookup, RESOLVE_TIMEOUT)
                    .await
                {
                    Ok(()) => Some(u),
                    Err(UrlError::Unsafe(m) | UrlError::Invalid(m)) => {
                        self.unsafe_url = Some(m);
                        None
                    }
                }
            }
            Err(UrlError::Invalid(issue)) => {
                self.errors.add("url", issue);
                None
            }
            Err(UrlError::Unsafe(m)) => {
                self.unsafe_url = Some(m);
                None
            }
        }
    }

    pub(super) fn finish(self) -> WebhookResult<()> {
        if !self.errors.is_empty() {
            return Err(WebhookError::Validation(self.errors));
        }
        if let Some(m) = self.unsafe_url {
            return Err(WebhookError::UnsafeUrl(m));
        }
        Ok(())
    }
}
