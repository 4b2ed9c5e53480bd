//! Cursor pagination (CONVENTIONS.md "Lists"): `limit` (1 to 200, default 50) and an opaque
//! `cursor`; responses are `{"data": [...], "has_more": bool, "next_cursor": string|null}`.
//!
//! A cursor is the position of the last item of a page, `(time, id)`, encoded as URL-safe
//! base64. Lists are ordered by `(time, id)` descending, so the next page is every row strictly
//! before the cursor. Cursors are not signed: every query is limited to the caller's
//! organization, so a forged cursor can only move within data the caller may read.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::error::ApiError;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z, in Unix milliseconds.
const MIN_CURSOR_TIME_MS: i64 = -62_135_596_800_000;
const MAX_CURSOR_TIME_MS: i64 = 253_402_300_799_999;

/// A position in a list: the time and id of the last item returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub time_ms: i64,
    pub id: i64,
}

impl Cursor {
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("v1.{}.{}", self.time_ms, self.id))
    }

    pub fn decode(s: &str) -> Result<Cursor, ApiError> {
        let bad = || {
            ApiError::invalid_request(
                "cursor",
                "The cursor is not valid; use next_cursor from a previous page.",
            )
        };
        if s.is_empty() || s.len() > 100 {
            return Err(bad());
        }
        let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
        let text = std::str::from_utf8(&raw).map_err(|_| bad())?;
        let mut parts = text.split('.');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("v1"), Some(t), Some(id), None) => {
                let cursor = Cursor {
                    time_ms: t.parse().map_err(|_| bad())?,
                    id: id.parse().map_err(|_| bad())?,
                };
                // A forged time outside years 1 to 9999 cannot be a position (and PostgreSQL
                // refuses to compare with it).
                if !(MIN_CURSOR_TIME_MS..=MAX_CURSOR_TIME_MS).contains(&cursor.time_ms) {
                    return Err(bad());
                }
                Ok(cursor)
            }
            _ => Err(bad()),
        }
    }
}

/// Parsed `limit` and `cursor` query parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: i64,
    pub cursor: Option<Cursor>,
}

impl PageRequest {
    /// Parses the raw query values (`None` when absent).
    pub fn parse(limit: Option<&str>, cursor: Option<&str>) -> Result<PageRequest, ApiError> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.trim().parse::<i64>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid_request(
                        "limit",
                        format!("limit must be a whole number from 1 to {MAX_LIMIT}."),
                    ));
                }
            },
        };
        let cursor = cursor.map(Cursor::decode).transpose()?;
        Ok(PageRequest { limit, cursor })
    }

    /// How many rows to fetch: one more than the limit, to learn whether more exist.
    pub fn fetch_limit(&self) -> i64 {
        self.limit + 1
    }
}

/// One page of a list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// Builds a page from up to `limit + 1` rows fetched in list order; `position` gives the
    /// cursor of a row.
    pub fn from_rows(
        mut rows: Vec<T>,
        req: &PageRequest,
        position: impl Fn(&T) -> Cursor,
    ) -> Page<T> {
        let has_more = rows.len() as i64 > req.limit;
        rows.truncate(req.limit as usize);
        let next_cursor = if has_more {
            rows.last().map(|r| position(r).encode())
        } else {
            None
        };
        Page {
            data: rows,
            has_more,
            next_cursor,
        }
    }

    /// A list that is always returned whole.
    pub fn complete(data: Vec<T>) -> Page<T> {
        Page {
            data,
            has_more: false,
            next_cursor: None,
        }
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            data: self.data.into_iter().map(f).collect(),
            has_more: self.has_more,
            next_cursor: self.next_cursor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let c = Cursor {
            time_ms: 1_786_000_000_000,
            id: 42,
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn bad_cursors_and_limits_are_400() {
        let forged = |raw: &str| URL_SAFE_NO_PAD.encode(raw);
        for bad in [
            "",
            "!!!",
            "bm9wZQ",
            &"A".repeat(200),
            &forged("v1.9223372036854775807.1"),
            &forged("v1.-9223372036854775808.1"),
            &forged("v1.253402300800000.1"),
        ] {
            let e = Cursor::decode(bad).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code),
                (400, "invalid_request"),
                "{bad}"
            );
        }
        for bad in ["0", "201", "-1", "ten", "1.5", ""] {
            let e = PageRequest::parse(Some(bad), None).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code),
                (400, "invalid_request"),
                "{bad}"
            );
        }
        assert_eq!(PageRequest::parse(None, None).unwrap().limit, 50);
        assert_eq!(PageRequest::parse(Some("200"), None).unwrap().limit, 200);
    }

    #[test]
    fn pages_know_whether_more_exist() {
        let req = PageRequest {
            limit: 2,
            cursor: None,
        };
        let page = Page::from_rows(vec![3, 2, 1], &req, |n| Cursor {
            time_ms: *n,
            id: *n,
        });
        assert_eq!(page.data, vec![3, 2]);
        assert!(page.has_more);
        assert_eq!(
            Cursor::decode(page.next_cursor.as_deref().unwrap())
                .unwrap()
                .id,
            2
        );
        let page = Page::from_rows(vec![1], &req, |n| Cursor {
            time_ms: *n,
            id: *n,
        });
        assert!(!page.has_more);
        assert_eq!(page.next_cursor, None);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn cursors_never_panic(s in "\\PC{0,200}", limit in "\\PC{0,20}") {
                let _ = Cursor::decode(&s);
                let _ = PageRequest::parse(Some(&limit), Some(&s));
            }

            #[test]
            fn cursors_round_trip(time_ms in MIN_CURSOR_TIME_MS..=MAX_CURSOR_TIME_MS, id in any::<i64>()) {
                let c = Cursor { time_ms, id };
                prop_assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
            }
        }
    }
}
