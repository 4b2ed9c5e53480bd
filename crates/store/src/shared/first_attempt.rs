//! The first attempt of a delivery that succeeded at once, kept in the delivery row
//! (`webhook_deliveries.first_attempt`, JSON text) instead of a row of the attempt log: the
//! plain success of a first attempt, the common case, writes one row (the delivery's) instead
//! of two. Every reader of the attempt log reads it as the attempt numbered 1. Retries,
//! failures and interrupted attempts keep their rows in `webhook_attempts`. Below every module
//! that writes or reads attempts.

use serde::{Deserialize, Serialize};

use crate::webhooks::AttemptRecord;
use switchboard_domain::Timestamp;

/// What the attempt log keeps of an attempt, but its number (1), its error (none: a success)
/// and its delivery (the row it is in).
#[derive(Serialize, Deserialize)]
struct FirstAttempt {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    url: Option<String>,
    started_at_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    duration_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    response_status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    excerpt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    signed_with: Option<Vec<String>>,
}

/// The column's text for a first attempt that succeeded (`None` for any other attempt: it
/// goes to the attempt log).
pub(crate) fn text(a: &AttemptRecord) -> Option<String> {
    if a.number != 1 || a.error_code.is_some() {
        return None;
    }
    serde_json::to_string(&FirstAttempt {
        url: a.url.clone(),
        started_at_ms: a.started_at.millis(),
        duration_ms: a.duration_ms,
        response_status: a.response_status,
        excerpt: a.response_body_excerpt.clone(),
        signed_with: a.signed_with.clone(),
    })
    .ok()
}

/// The attempt a column's text keeps (`None` for text that does not parse: written by no
/// release, so never expected).
pub(crate) fn parse(text: &str) -> Option<AttemptRecord> {
    let f: FirstAttempt = serde_json::from_str(text).ok()?;
    Some(AttemptRecord {
        number: 1,
        url: f.url,
        started_at: Timestamp::from_millis(f.started_at_ms),
        duration_ms: f.duration_ms,
        response_status: f.response_status,
        error_code: None,
        error_message: None,
        response_body_excerpt: f.excerpt,
        signed_with: f.signed_with,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(number: i64, error: Option<&str>) -> AttemptRecord {
        AttemptRecord {
            number,
            url: Some("https://example.com/hook?token=x".into()),
            started_at: Timestamp::from_millis(1_786_000_000_123),
            duration_ms: Some(12),
            response_status: Some(204),
            error_code: error.map(str::to_owned),
            error_message: error.map(str::to_owned),
            response_body_excerpt: Some("ok".into()),
            signed_with: Some(vec!["sec_0123456789ab".into()]),
        }
    }

    #[test]
    fn a_first_success_reads_back_as_it_was_written() {
        let a = attempt(1, None);
        let back = parse(&text(&a).unwrap()).unwrap();
        assert_eq!(back.number, 1);
        assert_eq!(back.url, a.url);
        assert_eq!(back.started_at, a.started_at);
        assert_eq!(back.duration_ms, a.duration_ms);
        assert_eq!(back.response_status, a.response_status);
        assert_eq!(back.response_body_excerpt, a.response_body_excerpt);
        assert_eq!(back.signed_with, a.signed_with);
        assert_eq!((back.error_code, back.error_message), (None, None));
    }

    #[test]
    fn later_attempts_and_failures_go_to_the_log() {
        assert!(text(&attempt(2, None)).is_none());
        assert!(text(&attempt(1, Some("http_error"))).is_none());
        assert!(parse("not json").is_none());
    }
}
