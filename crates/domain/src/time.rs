//! Timestamps: UTC, millisecond precision, RFC 3339 on the wire (`2026-08-14T09:30:00.000Z`).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, UTC, with millisecond precision.
///
/// Stored as Unix milliseconds: `INTEGER` on SQLite, `TIMESTAMPTZ` on PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// Why a text is not a valid timestamp.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected an RFC 3339 time such as 2026-08-14T09:30:00Z")]
pub struct TimestampParseError;

impl Timestamp {
    /// The earliest representable instant we accept (year 1970).
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub const fn millis(self) -> i64 {
        self.0
    }

    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        Timestamp(dt.timestamp_millis())
    }

    pub fn to_datetime(self) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(self.0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// Seconds since the Unix epoch (used by signatures and `Retry-After`).
    pub const fn unix_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Parses an RFC 3339 time with any offset and converts it to UTC.
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampParseError> {
        if s.len() > 64 {
            return Err(TimestampParseError);
        }
        DateTime::parse_from_rfc3339(s.trim())
            .map(|dt| Timestamp::from_datetime(dt.with_timezone(&Utc)))
            .map_err(|_| TimestampParseError)
    }

    pub fn to_rfc3339(self) -> String {
        self.to_datetime()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(d)))
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_millis(d)))
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
}

fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .examples([serde_json::json!("2026-08-14T09:30:00.000Z")])
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

/// Parses a duration such as `500ms`, `30s`, `5m`, `2h` or `7d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}` has no unit (use ms, s, m, h or d)"))?;
    let (num, unit) = s.split_at(split);
    if num.is_empty() || num.len() > 12 {
        return Err(format!("`{s}` is not a duration"));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        "d" => n * 86_400_000,
        _ => {
            return Err(format!(
                "`{s}` has an unknown unit `{unit}` (use ms, s, m, h or d)"
            ));
        }
    };
    Ok(Duration::from_millis(ms))
}

/// Formats a duration in the largest unit that represents it exactly.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_and_z() {
        let t = Timestamp::parse_rfc3339("2026-08-14T11:30:00.5+02:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-08-14T09:30:00.500Z");
    }

    #[test]
    fn rejects_non_rfc3339() {
        assert!(Timestamp::parse_rfc3339("2026-08-14").is_err());
        assert!(Timestamp::parse_rfc3339("yesterday").is_err());
        assert!(Timestamp::parse_rfc3339("").is_err());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        for bad in ["", "10", "s", "1x", "-1s", "1.5s", "99999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(86400 * 90)), "90d");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parsers_never_panic(s in "\\PC{0,80}") {
                let _ = parse_duration(&s);
                let _ = Timestamp::parse_rfc3339(&s);
            }

            #[test]
            fn durations_round_trip(ms in 0u64..10_000_000_000) {
                let d = Duration::from_millis(ms);
                prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
            }

            #[test]
            fn timestamps_round_trip(ms in 0i64..32_503_680_000_000) {
                let t = Timestamp::from_millis(ms);
                prop_assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()).unwrap(), t);
            }
        }
    }
}
