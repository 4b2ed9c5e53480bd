//! Rules for the fields of a webhook endpoint: name, subscriptions and custom headers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::catalogue::Pattern;

/// The status of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStatus {
    /// Receives deliveries.
    Active,
    /// Receives nothing until re-enabled; its unfinished deliveries wait.
    Disabled,
}

impl EndpointStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            EndpointStatus::Active => "active",
            EndpointStatus::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(EndpointStatus::Active),
            "disabled" => Some(EndpointStatus::Disabled),
            _ => None,
        }
    }
}

/// Whether an endpoint's deliveries keep each contact's order (CONVENTIONS "Ordered delivery").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EndpointOrdering {
    /// Deliveries are attempted as they fall due, in parallel.
    #[default]
    None,
    /// A delivery of an event about a contact (`data.contact_uuid`) waits until the earlier
    /// deliveries of that contact to this endpoint have ended; each carries
    /// `X-Switchboard-Sequence`.
    PerContact,
}

impl EndpointOrdering {
    pub const fn as_str(self) -> &'static str {
        match self {
            EndpointOrdering::None => "none",
            EndpointOrdering::PerContact => "per_contact",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(EndpointOrdering::None),
            "per_contact" => Some(EndpointOrdering::PerContact),
            _ => None,
        }
    }

    /// The chain a delivery of an event with this `data` belongs to: the contact, on an
    /// ordered endpoint; `None` (unordered) otherwise.
    pub fn order_key(self, data: &serde_json::Value) -> Option<uuid::Uuid> {
        match self {
            EndpointOrdering::None => None,
            EndpointOrdering::PerContact => data
                .get("contact_uuid")
                .and_then(serde_json::Value::as_str)
                .and_then(|s| uuid::Uuid::parse_str(s).ok()),
        }
    }
}

pub const MAX_NAME_LEN: usize = 200;
pub const MAX_EVENTS: usize = 200;
pub const MAX_HEADERS: usize = 20;
pub const MAX_HEADER_NAME_LEN: usize = 100;
pub const MAX_HEADER_VALUE_LEN: usize = 1000;
pub const MAX_HEADERS_TOTAL: usize = 8 * 1024;

/// Checks an endpoint name: 1 to 200 characters, not blank, no control characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(format!("must be at most {MAX_NAME_LEN} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

/// Checks a subscription list. Returns the patterns in the given order without duplicates,
/// or every problem as `(index, issue)`.
pub fn check_events(events: &[String]) -> Result<Vec<String>, Vec<(Option<usize>, String)>> {
    let mut problems = Vec::new();
    if events.is_empty() {
        problems.push((
            None,
            "must list at least one event name, `*` or `namespace.*`".to_owned(),
        ));
    }
    if events.len() > MAX_EVENTS {
        problems.push((None, format!("must list at most {MAX_EVENTS} patterns")));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match Pattern::parse(e) {
            Ok(p) => {
                let p = p.to_string();
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            Err(issue) => problems.push((Some(i), issue)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The bounds of an endpoint's own attempt `timeout`.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// The bounds of an endpoint's own `retry_delays`: 1 to 10 delays, each 1 s to 72 h.
pub const MAX_RETRY_DELAYS: usize = 10;
pub const MIN_RETRY_DELAY: Duration = Duration::from_secs(1);
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(72 * 3600);
/// The bounds of an endpoint's `max_per_second`.
pub const MAX_PER_SECOND: u32 = 10_000;

/// Checks an endpoint's attempt `timeout` (`1s` to `30s`).
pub fn check_timeout(s: &str) -> Result<Duration, String> {
    let d = crate::time::parse_duration(s)?;
    if d < MIN_TIMEOUT || d > MAX_TIMEOUT {
        return Err(format!("`{s}` is not between 1s and 30s"));
    }
    Ok(d)
}

/// Checks an endpoint's `retry_delays`: 1 to 10 durations, each `1s` to `72h`. Returns every
/// problem as `(index, issue)` (`None`: the list itself).
pub fn check_retry_delays(
    delays: &[String],
) -> Result<Vec<Duration>, Vec<(Option<usize>, String)>> {
    let mut problems = Vec::new();
    if delays.is_empty() || delays.len() > MAX_RETRY_DELAYS {
        problems.push((None, format!("must list 1 to {MAX_RETRY_DELAYS} delays")));
    }
    let mut out = Vec::with_capacity(delays.len());
    for (i, s) in delays.iter().enumerate() {
        match crate::time::parse_duration(s) {
            Ok(d) if (MIN_RETRY_DELAY..=MAX_RETRY_DELAY).contains(&d) => out.push(d),
            Ok(_) => problems.push((Some(i), format!("`{s}` is not between 1s and 72h"))),
            Err(issue) => problems.push((Some(i), issue)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Checks an endpoint's `max_per_second` (1 to 10 000).
pub fn check_max_per_second(n: i64) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(n) if (1..=MAX_PER_SECOND).contains(&n) => Ok(n),
        _ => Err(format!("must be between 1 and {MAX_PER_SECOND}")),
    }
}

/// The spacing of an endpoint's deliveries at `max_per_second` (µs), 10 % wider than the exact
/// rate: the margin (100 ms over any `max_per_second` slots) absorbs the jitter between a
/// reserved slot and the request's arrival, so that no one-second window the receiver sees
/// holds more than the rate. (5 % was measured too little on a loaded 2-core machine: four
/// arrivals at 3/s within 999.7 ms.)
pub fn throttle_interval_us(max_per_second: u32) -> i64 {
    let rate = i64::from(max_per_second.clamp(1, MAX_PER_SECOND));
    1_000_000 * 110 / 100 / rate
}

/// The types of `auth` on an https endpoint.
pub const AUTH_TYPES: &[&str] = &["oauth2_client_credentials", "mtls"];
/// The longest OAuth2 client id, client secret and scope.
pub const MAX_CLIENT_ID_LEN: usize = 255;
pub const MAX_CLIENT_SECRET_LEN: usize = 1000;
pub const MAX_SCOPE_LEN: usize = 1000;

/// Checks an OAuth2 credential or scope: 1 to `max` visible ASCII characters (a scope may
/// hold inner spaces).
pub fn check_credential(value: &str, max: usize, spaces: bool) -> Result<(), String> {
    if value.is_empty() || value.len() > max {
        return Err(format!("must be 1 to {max} characters"));
    }
    let ok = value
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) || (spaces && b == b' '));
    if !ok || value.starts_with(' ') || value.ends_with(' ') {
        return Err("must be visible ASCII characters".into());
    }
    Ok(())
}

/// Header names an endpoint may not set (compared in lower case).
const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "proxy-authenticate",
    "www-authenticate",
    "cookie",
    "cookie2",
    "set-cookie",
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "accept-encoding",
    "http2-settings",
    "forwarded",
    "via",
    "max-forwards",
];

/// Header name prefixes an endpoint may not use.
const FORBIDDEN_PREFIXES: &[&str] = &[
    "content-",
    "proxy-",
    "x-switchboard-",
    "webhook-",
    "sec-",
    ":",
];

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks one custom header. Returns the issue for people.
pub fn check_header(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN || !name.bytes().all(is_tchar) {
        return Err(format!(
            "`{}` is not a valid header name (1 to {MAX_HEADER_NAME_LEN} characters of letters, digits and !#$%&'*+-.^_`|~)",
            name.chars().take(MAX_HEADER_NAME_LEN).collect::<String>()
        ));
    }
    let lower = name.to_ascii_lowercase();
    if FORBIDDEN_HEADERS.contains(&lower.as_str())
        || FORBIDDEN_PREFIXES.iter().any(|p| lower.starts_with(p))
    {
        return Err(format!(
            "`{name}` cannot be set: authorization, cookie, host, content, transport, X-Switchboard-* and webhook-* (Standard Webhooks) headers are reserved"
        ));
    }
    if value.len() > MAX_HEADER_VALUE_LEN {
        return Err(format!(
            "the value of `{name}` is longer than {MAX_HEADER_VALUE_LEN} characters"
        ));
    }
    // Visible ASCII and spaces, not starting or ending with whitespace (RFC 9110 field-value).
    let visible = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    if !visible || value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']) {
        return Err(format!(
            "the value of `{name}` must be visible ASCII characters and inner spaces"
        ));
    }
    Ok(())
}

/// Checks a set of custom headers: each one, their number, their total size and duplicate
/// names (header names are case-insensitive). Returns every problem as `(header name, issue)`.
pub fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), Vec<(String, String)>> {
    let mut problems = Vec::new();
    if headers.len() > MAX_HEADERS {
        problems.push((String::new(), format!("at most {MAX_HEADERS} headers")));
    }
    let total: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_HEADERS_TOTAL {
        problems.push((
            String::new(),
            format!("names and values together must be at most {MAX_HEADERS_TOTAL} bytes"),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (name, value) in headers {
        if let Err(issue) = check_header(name, value) {
            problems.push((name.clone(), issue));
        } else if !seen.insert(name.to_ascii_lowercase()) {
            problems.push((
                name.clone(),
                format!("`{name}` is given twice (header names are case-insensitive)"),
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("Orders").is_ok());
        assert!(check_name("  ").is_err());
        assert!(check_name("a\nb").is_err());
        assert!(check_name(&"x".repeat(201)).is_err());
    }

    #[test]
    fn events_are_checked_and_deduplicated() {
        let ok =
            check_events(&["message.sent".into(), "crm.*".into(), "message.sent".into()]).unwrap();
        assert_eq!(ok, vec!["message.sent", "crm.*"]);
        let err = check_events(&["message.sent".into(), "nope.x".into()]).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].0, Some(1));
        assert!(err[0].1.contains("nope.x"));
        assert!(check_events(&[]).is_err());
    }

    #[test]
    fn headers_allowed_and_refused() {
        assert!(check_header("X-Tenant", "acme-1").is_ok());
        assert!(check_header("X-Api-Version", "2024-01 beta").is_ok());
        for name in [
            "Authorization",
            "authorization",
            "Proxy-Authorization",
            "Cookie",
            "Set-Cookie",
            "Host",
            "Content-Type",
            "content-length",
            "Content-Encoding",
            "Connection",
            "Keep-Alive",
            "TE",
            "Transfer-Encoding",
            "Upgrade",
            "Trailer",
            "Expect",
            "Proxy-Connection",
            "X-Switchboard-Signature",
            "x-switchboard-event",
            "X-Switchboard-Anything",
        ] {
            assert!(check_header(name, "v").is_err(), "{name}");
        }
        for bad_name in ["", "X Tenant", "X-Tenant:", "Ünicode", "a\r\nb", "(x)"] {
            assert!(check_header(bad_name, "v").is_err(), "{bad_name:?}");
        }
        for bad_value in [
            "a\r\nX-Injected: 1",
            "a\nb",
            "tab\u{7f}",
            " lead",
            "trail ",
            "é",
            "\0",
        ] {
            assert!(check_header("X-Ok", bad_value).is_err(), "{bad_value:?}");
        }
        assert!(check_header("X-Ok", &"v".repeat(1001)).is_err());
    }

    #[test]
    fn overrides_are_bounded() {
        assert_eq!(check_timeout("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(check_timeout("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(check_timeout("1500ms"), Ok(Duration::from_millis(1500)));
        for bad in ["999ms", "31s", "1m", "0s", "soon", ""] {
            assert!(check_timeout(bad).is_err(), "{bad}");
        }
        let d =
            |v: &[&str]| check_retry_delays(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            d(&["1s", "72h"]),
            Ok(vec![Duration::from_secs(1), Duration::from_secs(72 * 3600)])
        );
        assert!(d(&[]).is_err());
        assert!(d(&["1s"; 11]).is_err());
        assert!(d(&["1s"; 10]).is_ok());
        let err = d(&["1s", "500ms", "73h", "x"]).unwrap_err();
        let idx: Vec<Option<usize>> = err.iter().map(|e| e.0).collect();
        assert_eq!(idx, vec![Some(1), Some(2), Some(3)]);
        assert_eq!(check_max_per_second(1), Ok(1));
        assert_eq!(check_max_per_second(10_000), Ok(10_000));
        for bad in [0, -1, 10_001, i64::MAX] {
            assert!(check_max_per_second(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn throttle_spacing_keeps_every_second_within_the_rate() {
        for rate in [1u32, 2, 3, 7, 10, 80, 999, 10_000] {
            let step = throttle_interval_us(rate);
            // Slots at 0, step, 2 step, ...: the most that fit in any one-second window.
            let fit = 1_000_000 / step + 1;
            assert!(fit <= i64::from(rate), "{rate}/s: {fit} in a second");
        }
    }

    #[test]
    fn credentials() {
        assert!(check_credential("client-1", MAX_CLIENT_ID_LEN, false).is_ok());
        assert!(check_credential("read write", MAX_SCOPE_LEN, true).is_ok());
        assert!(check_credential("read write", MAX_CLIENT_ID_LEN, false).is_err());
        assert!(check_credential("", MAX_CLIENT_ID_LEN, false).is_err());
        assert!(check_credential(" x", MAX_SCOPE_LEN, true).is_err());
        assert!(check_credential("é", MAX_SCOPE_LEN, true).is_err());
        assert!(check_credential(&"x".repeat(256), MAX_CLIENT_ID_LEN, false).is_err());
    }

    #[test]
    fn header_sets_are_bounded() {
        let many: BTreeMap<String, String> =
            (0..21).map(|i| (format!("X-H{i}"), "v".into())).collect();
        assert!(check_headers(&many).is_err());
        let dup: BTreeMap<String, String> =
            [("X-A".into(), "1".into()), ("x-a".into(), "2".into())]
                .into_iter()
                .collect();
        assert!(check_headers(&dup).is_err());
        let big: BTreeMap<String, String> = (0..10)
            .map(|i| (format!("X-H{i}"), "v".repeat(900)))
            .collect();
        assert!(check_headers(&big).is_err());
        assert!(check_headers(&BTreeMap::new()).is_ok());
    }
}
