//! Reading a list's parameters (the fields of its [`super::query::StrictQuery`] type): each
//! value is checked with the parameter named on failure, a 400 `invalid_request` whose
//! `details.param` names it (as Stripe does). A typo in a filter then fails loudly instead of
//! silently returning the unfiltered list.

use super::error::ApiError;
use switchboard_domain::Timestamp;

/// A parameter parsed by `parse`; its error message becomes the 400's message.
pub fn parsed<T>(
    name: &str,
    raw: Option<&str>,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Option<T>, ApiError> {
    raw.map(|raw| parse(raw).map_err(|m| ApiError::invalid_request(name, m)))
        .transpose()
}

/// An RFC 3339 time.
pub fn time(name: &str, raw: Option<&str>) -> Result<Option<Timestamp>, ApiError> {
    parsed(name, raw, |raw| {
        Timestamp::parse_rfc3339(raw).map_err(|_| {
            format!(
                "{name} must be an RFC 3339 time such as 2026-08-14T09:30:00Z (encode `+` as %2B)"
            )
        })
    })
}

/// A time window: `until` must be later than `since`.
pub fn window(
    since: Option<&str>,
    until: Option<&str>,
) -> Result<(Option<Timestamp>, Option<Timestamp>), ApiError> {
    let (since, until) = (time("since", since)?, time("until", until)?);
    if let (Some(s), Some(u)) = (since, until) {
        if u <= s {
            return Err(ApiError::invalid_request(
                "until",
                "until must be later than since.",
            ));
        }
    }
    Ok((since, until))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_parsed_with_the_parameter_named_on_failure() {
        let e = time("since", Some("yesterday")).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"));
        assert_eq!(e.details.unwrap()["param"], "since");
        assert_eq!(
            time("until", Some("2026-08-14T09:30:00+02:00"))
                .unwrap()
                .unwrap()
                .to_rfc3339(),
            "2026-08-14T07:30:00.000Z"
        );
        assert_eq!(time("missing", None).unwrap(), None);
        let e = window(Some("2026-08-14T09:30:00Z"), Some("2026-08-14T09:00:00Z")).unwrap_err();
        assert_eq!(e.details.unwrap()["param"], "until");
    }
}
