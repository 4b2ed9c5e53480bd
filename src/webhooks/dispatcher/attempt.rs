//! One attempt: the signed HTTP request through the safe client, and what its result means.

use std::time::Duration;

use super::*;
use crate::trace;
use crate::url_safety::{self, DnsFailure, Policy, SafeResolver, UnsafeTarget};
use switchboard_domain::trace::TraceContext;
use switchboard_domain::webhooks::destination::DestinationType;

/// The delivery HTTP client: safe resolver, no redirects, no proxy, HTTP/1.1.
///
/// Idle connections are kept per host up to [`IDLE_PER_HOST`]: many endpoints often share
/// one host (an integration platform, a company's gateway), and a smaller pool than the
/// attempts in flight to it would close and reopen connections under load.
pub fn http_client(
    policy: Policy,
    timeout: Duration,
    roots: &[reqwest::Certificate],
) -> reqwest::Client {
    client_builder(policy, timeout, roots)
        .build()
        .expect("the webhook HTTP client builds")
}

/// The builder of [`http_client`] (an mTLS endpoint's client adds its identity), trusting
/// `roots` besides the built-in ones.
pub(super) fn client_builder(
    policy: Policy,
    timeout: Duration,
    roots: &[reqwest::Certificate],
) -> reqwest::ClientBuilder {
    let builder = roots.iter().fold(reqwest::Client::builder(), |b, root| {
        b.add_root_certificate(root.clone())
    });
    builder
        .dns_resolver(Arc::new(SafeResolver::new(policy)))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .tcp_nodelay(true)
        .user_agent(USER_AGENT)
}

impl Dispatcher {
    /// Makes one attempt, as a span of the trace of the event's cause (kept with the event, so
    /// that it holds on any instance, after any restart): the request's `traceparent` names it.
    pub(super) async fn attempt(&self, d: &ClaimedDelivery) -> AttemptResult {
        let parent = d.event.trace.as_deref().and_then(TraceContext::parse);
        let mut span = trace::Span::start("webhook.attempt", trace::Kind::Client, parent);
        if span.is_recording() {
            span.attr("switchboard.delivery_id", d.uuid.to_string());
            span.attr("switchboard.event", d.event.name.clone());
            span.attr("switchboard.event_id", d.event.uuid.to_string());
            span.attr("switchboard.attempt", d.attempt);
            if let Some(e) = &d.endpoint {
                span.attr("switchboard.endpoint_uuid", e.uuid.to_string());
            }
        }
        let result = self.attempt_traced(d, &span.context()).await;
        if span.is_recording() {
            if let Some(status) = result.status {
                span.attr("http.response.status_code", i64::from(status));
            }
            if let Some(code) = result.error_code {
                span.fail(code.to_owned());
            }
        }
        result
    }

    /// Makes the HTTP request of one attempt.
    async fn attempt_traced(&self, d: &ClaimedDelivery, trace: &TraceContext) -> AttemptResult {
        let Some(endpoint) = d.endpoint.as_ref().filter(|e| !e.deleted) else {
            return AttemptResult::error(
                delivery::ENDPOINT_DELETED,
                delivery::ENDPOINT_DELETED_MESSAGE.into(),
            );
        };
        // A legacy webhook record has no secret: its deliveries are unsigned (specification
        // 6.3.3; see docs/legacy.md). Otherwise: the current secret, then the retired ones still
        // in their grace period.
        let secrets = match endpoint.legacy {
            true => Vec::new(),
            false => {
                let mut secrets = Vec::with_capacity(1 + endpoint.retired_secrets.len());
                for sealed in
                    std::iter::once(&endpoint.sealed_secret).chain(endpoint.retired_secrets.iter())
                {
                    match self.secrets.open(sealed, AAD_SIGNING_SECRET) {
                        Ok(s) => secrets.push(String::from_utf8_lossy(&s).into_owned()),
                        Err(e) => {
                            tracing::error!(endpoint_uuid = %endpoint.uuid, error = %e, "cannot open a signing secret");
                            return AttemptResult::error(
                                "secret_unavailable",
                                "The endpoint's signing secret could not be read; the attempt was not made."
                                    .into(),
                            );
                        }
                    }
                }
                secrets
            }
        };
        // The exact envelope bytes written with the event (the feed serves the same bytes).
        let body = d.envelope.clone().into_bytes();
        let timestamp = self.clock.now().unix_seconds();
        // The headers of the delivery, in order: the endpoint's own, then Switchboard's (a
        // broker message carries the same ones).
        let mut headers: Vec<(String, String)> = endpoint
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let mut add = |name: &str, value: String| headers.push((name.to_owned(), value));
        add("Content-Type", "application/json".into());
        add("X-Switchboard-Event", d.event.name.clone());
        add("X-Switchboard-Delivery", d.uuid.to_string());
        add("X-Switchboard-Attempt", d.attempt.to_string());
        add("traceparent", trace.to_string());
        if let Some(sequence) = d.sequence {
            add("X-Switchboard-Sequence", sequence.to_string());
        }
        let mut signed_with = None;
        if !secrets.is_empty() {
            let id = d.uuid.to_string();
            let signatures = signing::sign_all(&secrets, &id, timestamp, &body);
            let timestamp = timestamp.to_string();
            add("X-Switchboard-Timestamp", timestamp.clone());
            add("X-Switchboard-Signature", signatures.switchboard);
            add("webhook-id", id);
            add("webhook-timestamp", timestamp);
            add("webhook-signature", signatures.standard);
            signed_with = Some(signatures.secret_ids);
        }
        // The endpoint's own time limit, or the deployment's (the client's own limit is the
        // deployment's: the request's replaces it).
        let timeout = self.timeout_of(d);
        match endpoint.controls.destination {
            DestinationType::RedisStream => {
                return self
                    .publish_redis(d, endpoint, &headers, body, timeout)
                    .await
                    .signed(signed_with);
            }
            DestinationType::NatsJetstream => {
                return self
                    .publish_nats(d, endpoint, &headers, body, timeout)
                    .await
                    .signed(signed_with);
            }
            DestinationType::Rabbitmq => {
                return self
                    .publish_amqp(d, endpoint, &headers, body, timeout)
                    .await
                    .signed(signed_with);
            }
            DestinationType::Https => {}
        }
        self.send_https(endpoint, &headers, body, timeout)
            .await
            .signed(signed_with)
    }

    /// The signed request of an attempt to an `https` endpoint (with its authentication).
    async fn send_https(
        &self,
        endpoint: &switchboard_store::webhooks::ClaimedEndpoint,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> AttemptResult {
        let url = match url_safety::check_url(&endpoint.url, self.policy) {
            Ok(u) => u,
            Err(e) => {
                return AttemptResult::error(
                    "unsafe_target",
                    format!("The endpoint URL is not allowed: {e}."),
                );
            }
        };
        // An mTLS endpoint's client presents its certificate.
        let client = match self.client_for(endpoint) {
            Ok(c) => c,
            Err(failed) => return failed,
        };
        let build = |token: Option<&str>| {
            let mut req = client.post(url.clone());
            for (name, value) in headers {
                req = req.header(name.as_str(), value.as_str());
            }
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            req.body(body.clone()).timeout(timeout)
        };

        let deadline = tokio::time::Instant::now() + timeout;
        // OAuth2 client credentials: a cached token, or a new one within the time limit.
        let token = match self.oauth_token(endpoint, false, deadline).await {
            Ok(t) => t,
            Err(failed) => return failed,
        };
        let mut resp = match tokio::time::timeout_at(deadline, build(token.as_deref()).send()).await
        {
            Err(_) => return AttemptResult::timeout(timeout),
            Ok(Err(e)) => return AttemptResult::from_transport(&e, timeout),
            Ok(Ok(r)) => r,
        };
        // A 401 with a token: a new token once, and the request again at once with it; a
        // second 401 is the attempt's outcome.
        if token.is_some() && resp.status() == reqwest::StatusCode::UNAUTHORIZED {
            drop(resp);
            let fresh = match self.oauth_token(endpoint, true, deadline).await {
                Ok(t) => t,
                Err(failed) => return failed,
            };
            resp = match tokio::time::timeout_at(deadline, build(fresh.as_deref()).send()).await {
                Err(_) => return AttemptResult::timeout(timeout),
                Ok(Err(e)) => return AttemptResult::from_transport(&e, timeout),
                Ok(Ok(r)) => r,
            };
        }
        let status = resp.status();
        let retry_after = if retry::honours_retry_after(status.as_u16()) {
            resp.headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::parse_retry_after(v, self.clock.now()))
        } else {
            None
        };
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(url_safety::redacted);
        // The answer counts only once it is whole (to its end, or to the cap: what is beyond
        // the cap is not needed); a body that stalls past the time limit or stops short is no
        // answer, and the attempt is retried.
        let mut buf = Vec::new();
        let read = tokio::time::timeout_at(deadline, read_capped(&mut resp, &mut buf)).await;
        drop(resp);
        let incomplete = match read {
            Ok(Ok(())) => None,
            Err(_) => Some(AttemptResult::timeout(timeout)),
            Ok(Err(e)) => Some(AttemptResult::from_transport(&e, timeout)),
        };
        if let Some(mut failed) = incomplete {
            failed.excerpt = excerpt(&buf);
            return failed;
        }
        let excerpt = excerpt(&buf);
        let reason = status.canonical_reason().unwrap_or("");
        let (code, message) = match retry::classify_status(status.as_u16()) {
            StatusClass::Success => (None, None),
            _ if status.is_redirection() => (
                Some("redirect_not_followed"),
                Some(format!(
                    "The endpoint answered {} {reason}{}; redirects are not followed. Point the endpoint at the final URL.",
                    status.as_u16(),
                    location.map(|l| format!(" (to {l})")).unwrap_or_default()
                )),
            ),
            _ => (
                Some("http_error"),
                Some(format!(
                    "The endpoint answered {} {reason}.",
                    status.as_u16()
                )),
            ),
        };
        AttemptResult {
            acked: false,
            status: Some(status.as_u16()),
            error_code: code,
            error_message: message,
            excerpt,
            retry_after,
            signed_with: None,
        }
    }
}

/// Reads a body into `buf` to its end or to [`READ_LIMIT`] bytes, whichever comes first; an
/// error when the body stops short (the connection closed, or the client's time limit).
pub(super) async fn read_capped(
    resp: &mut reqwest::Response,
    buf: &mut Vec<u8>,
) -> reqwest::Result<()> {
    while buf.len() < READ_LIMIT {
        match resp.chunk().await? {
            Some(chunk) => {
                let room = READ_LIMIT - buf.len();
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            None => break,
        }
    }
    Ok(())
}

/// The first KiB of a body as text (cut at a character boundary).
pub fn excerpt(body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_LIMIT + 4)]);
    let mut end = text.len().min(EXCERPT_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

/// What one attempt produced.
#[derive(Debug)]
pub(super) struct AttemptResult {
    /// A broker confirmed the message (a broker attempt has no HTTP status).
    pub(super) acked: bool,
    pub(super) status: Option<u16>,
    pub(super) error_code: Option<&'static str>,
    pub(super) error_message: Option<String>,
    pub(super) excerpt: Option<String>,
    pub(super) retry_after: Option<Duration>,
    /// The secret ids that signed the request (`None`: not signed, or not sent).
    pub(super) signed_with: Option<Vec<String>>,
}

impl AttemptResult {
    /// A broker's confirmation, `what` it answered (an `XADD` id) as the excerpt.
    pub(super) fn acked(what: String) -> Self {
        AttemptResult {
            acked: true,
            status: None,
            error_code: None,
            error_message: None,
            excerpt: Some(what),
            retry_after: None,
            signed_with: None,
        }
    }

    pub(super) fn error(code: &'static str, message: String) -> Self {
        AttemptResult {
            acked: false,
            status: None,
            error_code: Some(code),
            error_message: Some(message),
            excerpt: None,
            retry_after: None,
            signed_with: None,
        }
    }

    pub(super) fn signed(mut self, signed_with: Option<Vec<String>>) -> Self {
        self.signed_with = signed_with;
        self
    }

    pub(super) fn timeout(limit: Duration) -> Self {
        Self::error(
            "timeout",
            format!(
                "No complete answer within {}.",
                switchboard_domain::time::format_duration(limit)
            ),
        )
    }

    pub(super) fn from_transport(e: &reqwest::Error, limit: Duration) -> Self {
        let (code, message) = classify_transport(e);
        if code == "timeout" {
            return Self::timeout(limit);
        }
        Self::error(code, message)
    }
}

/// Classifies a failure to get an answer: `dns_failed`, `unsafe_target`, `timeout`,
/// `connection_closed` or `connection_failed`.
fn classify_transport(e: &reqwest::Error) -> (&'static str, String) {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(u) = s.downcast_ref::<UnsafeTarget>() {
            return (
                "unsafe_target",
                format!("{u}; webhooks are only sent to public internet addresses."),
            );
        }
        if let Some(d) = s.downcast_ref::<DnsFailure>() {
            return ("dns_failed", format!("The host name did not resolve: {d}."));
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                TimedOut => return ("timeout", String::new()),
                ConnectionRefused => {
                    return ("connection_failed", "The connection was refused.".into());
                }
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    return (
                        "connection_closed",
                        "The connection was closed before a complete answer.".into(),
                    );
                }
                _ => {}
            }
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return (
                "connection_closed",
                "The connection was closed before a complete answer.".into(),
            );
        }
        source = s.source();
    }
    if e.is_timeout() {
        return ("timeout", String::new());
    }
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    // reqwest's messages name the URL, which may carry a token in its query: drop it.
    let detail = detail
        .split(" for url (")
        .next()
        .unwrap_or_default()
        .chars()
        .take(400)
        .collect::<String>();
    (
        "connection_failed",
        format!("Could not get an answer: {detail}."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_at_most_one_kib_and_valid_text() {
        assert_eq!(excerpt(b""), None);
        assert_eq!(excerpt(b"ok").as_deref(), Some("ok"));
        let long = "é".repeat(2000);
        let e = excerpt(long.as_bytes()).unwrap();
        assert!(e.len() <= EXCERPT_LIMIT && e.len() >= EXCERPT_LIMIT - 1);
        assert!(e.chars().all(|c| c == 'é'));
        let binary = vec![0xffu8; 5000];
        assert!(excerpt(&binary).unwrap().len() <= EXCERPT_LIMIT);
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_private_addresses() {
        // `localhost` resolves to a loopback address: the strict resolver drops it, so the
        // connection is never made and the error says why.
        let client = http_client(Policy::default(), Duration::from_secs(5), &[]);
        let e = client
            .post("http://localhost:9/hook")
            .send()
            .await
            .unwrap_err();
        let (code, message) = classify_transport(&e);
        assert_eq!(code, "unsafe_target", "{message}");

        let client = http_client(Policy::default(), Duration::from_secs(5), &[]);
        let e = client
            .post("http://does-not-exist.invalid/hook")
            .send()
            .await
            .unwrap_err();
        assert_eq!(classify_transport(&e).0, "dns_failed");
    }

    #[tokio::test]
    async fn connection_failures_are_classified() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = http_client(
            Policy {
                allow_private: true,
            },
            Duration::from_secs(5),
            &[],
        );
        let e = client
            .post(format!("http://127.0.0.1:{port}/hook?token=secret"))
            .send()
            .await
            .unwrap_err();
        let (code, message) = classify_transport(&e);
        assert_eq!(code, "connection_failed", "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
}
