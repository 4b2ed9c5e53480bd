//! Query strings of list endpoints, read strictly: every parameter must be one the endpoint
//! knows, given at most once, with a valid value; anything else is a 400 `invalid_request`
//! whose `details.param` names the parameter (as Stripe does with unknown parameters). A typo
//! in a filter then fails loudly instead of silently returning the unfiltered list.

use std::collections::HashMap;

use super::error::ApiError;
use super::pagination::PageRequest;
use switchboard_domain::Timestamp;

pub struct ListQuery {
    values: HashMap<String, String>,
}

impl ListQuery {
    /// Checks the raw pairs against the names the endpoint accepts.
    pub fn parse(pairs: Vec<(String, String)>, allowed: &[&str]) -> Result<ListQuery, ApiError> {
        let mut values = HashMap::new();
        super::query::refuse_unknown(pairs.iter().map(|(name, _)| name.as_str()), allowed)?;
        for (name, value) in pairs {
            if values.contains_key(&name) {
                return Err(ApiError::invalid_request(
                    &name,
                    format!("The query parameter `{name}` is given more than once."),
                ));
            }
            values.insert(name, value);
        }
        Ok(ListQuery { values })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// `limit` and `cursor`.
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        PageRequest::parse(self.get("limit"), self.get("cursor"))
    }

    /// A parameter parsed by `parse`; its error message becomes the 400's message.
    pub fn parsed<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|raw| parse(raw).map_err(|m| ApiError::invalid_request(name, m)))
            .transpose()
    }

    /// An RFC 3339 time.
    pub fn time(&self, name: &str) -> Result<Option<Timestamp>, ApiError> {
        self.parsed(name, |raw| {
            Timestamp::parse_rfc3339(raw).map_err(|_| {
                format!(
                    "{name} must be an RFC 3339 time such as 2026-08-14T09:30:00Z (encode `+` as %2B)"
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn unknown_and_repeated_parameters_are_400_naming_the_parameter() {
        let e = ListQuery::parse(pairs(&[("limit", "5"), ("colour", "red")]), &["limit"])
            .err()
            .unwrap();
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"));
        assert_eq!(e.details.unwrap()["param"], "colour");
        let e = ListQuery::parse(pairs(&[("limit", "5"), ("limit", "6")]), &["limit"])
            .err()
            .unwrap();
        assert_eq!(e.details.unwrap()["param"], "limit");
    }

    #[test]
    fn values_are_parsed_with_the_parameter_named_on_failure() {
        let q = ListQuery::parse(
            pairs(&[
                ("since", "yesterday"),
                ("until", "2026-08-14T09:30:00+02:00"),
            ]),
            &["since", "until"],
        )
        .unwrap();
        let e = q.time("since").unwrap_err();
        assert_eq!(e.details.unwrap()["param"], "since");
        assert_eq!(
            q.time("until").unwrap().unwrap().to_rfc3339(),
            "2026-08-14T07:30:00.000Z"
        );
        assert_eq!(q.time("missing").unwrap(), None);
        assert_eq!(q.page().unwrap().limit, 50);
    }
}
