//! What an attempt's result means (specification 3 and 8): success, a retry, or the end.
//!
//! * 2xx: delivered.
//! * Retried: connection failures (including DNS, TLS, a closed connection and a target that
//!   now resolves only to non-public addresses), timeouts, 408, 425, 429, every 5xx, and
//!   responses that are neither 2xx nor 4xx (a 3xx redirect is not followed, so it is a failed
//!   attempt that may succeed once the receiver stops redirecting).
//! * Any other 4xx: permanent rejection (`failed`), no retry.
//!
//! The delay after attempt `n` is the `n`-th configured delay (default 30 s, 5 min, 30 min) plus
//! a jitter of 0 to 10 % (never earlier than documented). On 429 and 503 a `Retry-After` (seconds
//! or an HTTP date) longer than the scheduled delay replaces it, up to [`MAX_RETRY_AFTER`] or
//! the longest configured delay if that is longer; a shorter one does not shorten the schedule.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::Timestamp;

/// The longest `Retry-After` honoured (unless the configured delays are longer).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// The largest jitter, as a fraction of the delay.
pub const MAX_JITTER: f64 = 0.10;

/// How a response status is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusClass {
    Success,
    Retryable,
    Permanent,
}

pub fn classify_status(status: u16) -> StatusClass {
    match status {
        200..=299 => StatusClass::Success,
        408 | 425 | 429 => StatusClass::Retryable,
        400..=499 => StatusClass::Permanent,
        _ => StatusClass::Retryable,
    }
}

/// Whether a `Retry-After` from this status is honoured.
pub fn honours_retry_after(status: u16) -> bool {
    matches!(status, 429 | 503)
}

/// Parses `Retry-After`: delay-seconds or an HTTP date (relative to `now`). Anything else, a
/// negative value or a date in the past is `None` (the schedule applies).
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let date = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
    let at = Timestamp::from_datetime(date);
    (at > now).then(|| at.since(now))
}

/// The delay before the next attempt, after `attempts_made` attempts of which the last failed
/// with a retryable error; `None` when no attempt is left. `jitter` is a number in `[0, 1)`
/// (drawn at random by the dispatcher), scaled to at most [`MAX_JITTER`] of the delay.
pub fn next_delay(
    attempts_made: u32,
    delays: &[Duration],
    retry_after: Option<Duration>,
    jitter: f64,
) -> Option<Duration> {
    let idx = usize::try_from(attempts_made.checked_sub(1)?).ok()?;
    let scheduled = *delays.get(idx)?;
    let ceiling = delays
        .iter()
        .copied()
        .max()
        .unwrap_or_default()
        .max(MAX_RETRY_AFTER);
    let base = match retry_after {
        Some(ra) => scheduled.max(ra.min(ceiling)),
        None => scheduled,
    };
    let jitter = jitter.clamp(0.0, 0.999_999) * MAX_JITTER;
    Some(base + base.mul_f64(jitter))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Vec<Duration> {
        vec![
            Duration::from_secs(30),
            Duration::from_secs(300),
            Duration::from_secs(1800),
        ]
    }

    #[test]
    fn statuses_are_classified_per_the_specification() {
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(classify_status(s), StatusClass::Success, "{s}");
        }
        for s in [
            408, 425, 429, 500, 502, 503, 504, 599, 301, 302, 307, 308, 100,
        ] {
            assert_eq!(classify_status(s), StatusClass::Retryable, "{s}");
        }
        for s in [400, 401, 403, 404, 405, 409, 410, 413, 422, 451, 499] {
            assert_eq!(classify_status(s), StatusClass::Permanent, "{s}");
        }
        assert!(honours_retry_after(429) && honours_retry_after(503));
        assert!(!honours_retry_after(500) && !honours_retry_after(200));
    }

    #[test]
    fn the_default_schedule_is_four_attempts() {
        let d = defaults();
        assert_eq!(next_delay(1, &d, None, 0.0), Some(Duration::from_secs(30)));
        assert_eq!(next_delay(2, &d, None, 0.0), Some(Duration::from_secs(300)));
        assert_eq!(
            next_delay(3, &d, None, 0.0),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(next_delay(4, &d, None, 0.0), None);
        assert_eq!(next_delay(0, &d, None, 0.0), None);
        assert_eq!(next_delay(9, &d, None, 0.5), None);
    }

    #[test]
    fn jitter_is_bounded_and_only_delays() {
        let d = defaults();
        for j in [0.0, 0.25, 0.5, 0.999, 1.0, 7.0, -1.0] {
            let got = next_delay(1, &d, None, j).unwrap();
            assert!(got >= Duration::from_secs(30), "{j}: {got:?}");
            assert!(got < Duration::from_secs(33), "{j}: {got:?}");
        }
        assert_eq!(
            next_delay(1, &d, None, 0.5),
            Some(Duration::from_millis(31_500))
        );
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let d = defaults();
        // Longer than scheduled: honoured.
        assert_eq!(
            next_delay(1, &d, Some(Duration::from_secs(120)), 0.0),
            Some(Duration::from_secs(120))
        );
        // Shorter: the schedule applies.
        assert_eq!(
            next_delay(1, &d, Some(Duration::from_secs(1)), 0.0),
            Some(Duration::from_secs(30))
        );
        // Capped at one hour.
        assert_eq!(
            next_delay(1, &d, Some(Duration::from_secs(86_400)), 0.0),
            Some(MAX_RETRY_AFTER)
        );
        // ... or at the longest configured delay when that is longer.
        let long = vec![Duration::from_secs(60), Duration::from_secs(7200)];
        assert_eq!(
            next_delay(1, &long, Some(Duration::from_secs(86_400)), 0.0),
            Some(Duration::from_secs(7200))
        );
        // No attempt left: Retry-After does not add one.
        assert_eq!(next_delay(4, &d, Some(Duration::from_secs(5)), 0.0), None);
    }

    #[test]
    fn retry_after_values_parse() {
        let now = Timestamp::parse_rfc3339("2015-10-21T07:27:00Z").unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:20:00 GMT", now),
            None
        );
        for bad in ["", "-5", "1.5", "soon", "99999999999999999999999"] {
            let got = parse_retry_after(bad, now);
            assert!(
                got.is_none() || bad.starts_with('9'),
                "{bad:?} gave {got:?}"
            );
        }
        // A huge number saturates and is then capped by next_delay.
        assert!(parse_retry_after("99999999999999999999999", now).is_some());
    }
}
