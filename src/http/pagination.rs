//! Cursor pagination (CONVENTIONS.md "Lists"): `limit` (1 to 200, default 50) and an opaque
//! `cursor`; responses are `{"data": [...], "has_more": bool, "next_cursor": string|null}`.
//!
//! A cursor is the position of the last item of a page, `(time, id)`. Lists are ordered by
//! `(time, id)` descending, so the next page is every row strictly before the cursor.
//!
//! Cursors are signed (`super::cursor`) and bound to the list (the request path) and its
//! filters (every query parameter but `cursor` and `limit`, in a canonical order): one used on
//! another list, with other filters, or altered, is a 400 `invalid_cursor`. [`bind_lists`]
//! puts that binding in a task-local for the request, so every list handler signs and checks
//! its cursors the same way without passing it around.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::error::ApiError;
use super::state::AppState;

tokio::task_local! {
    static BINDING: Binding;
}

/// What the cursors of this request are bound to.
#[derive(Clone, Debug)]
struct Binding {
    key: [u8; 32],
    list: String,
    filters: String,
}

/// The canonical filters of a query string: every parameter but `cursor`, `after` and
/// `limit`, decoded, sorted.
fn canonical_filters(query: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .filter(|(k, _)| !matches!(k.as_ref(), "cursor" | "limit" | "after"))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Middleware: the cursors of a GET are bound to its path and filters.
pub async fn bind_lists(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.method() != axum::http::Method::GET {
        return next.run(req).await;
    }
    let binding = Binding {
        key: *state.secrets.cursor_key(),
        list: req.uri().path().to_owned(),
        filters: canonical_filters(req.uri().query()),
    };
    BINDING.scope(binding, next.run(req)).await
}

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
    /// The cursor's text: signed for the request's list and filters (outside a request, in
    /// unit tests, the bare position).
    pub fn encode(&self) -> String {
        let payload = format!("v1.{}.{}", self.time_ms, self.id);
        match BINDING.try_with(Clone::clone) {
            Ok(b) => super::cursor::sign(&b.key, &b.list, &b.filters, &payload),
            Err(_) => URL_SAFE_NO_PAD.encode(payload),
        }
    }

    pub fn decode(s: &str) -> Result<Cursor, ApiError> {
        let bad = || {
            ApiError::invalid_cursor(
                "The cursor is not valid for this list and these filters; use next_cursor from a page of the same list with the same filters.",
            )
        };
        if s.is_empty() || s.len() > 300 {
            return Err(bad());
        }
        let text = match BINDING.try_with(Clone::clone) {
            Ok(b) => super::cursor::verify(&b.key, &b.list, &b.filters, s)?,
            Err(_) => {
                let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
                String::from_utf8(raw).map_err(|_| bad())?
            }
        };
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

/// The query parameters of a list that has no filters: `limit` and `cursor`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1 to 200 (default 50).
    #[param(value_type = Option<i64>)]
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl PageParams {
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        PageRequest::parse(self.limit.as_deref(), self.cursor.as_deref())
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

/// The store's page request for an API page request (lists ordered by time and id).
pub(crate) fn page_query(req: &PageRequest) -> switchboard_store::legacy::PageQuery {
    switchboard_store::legacy::PageQuery {
        after: req.cursor.map(|c| switchboard_store::legacy::PagePosition {
            time: switchboard_domain::Timestamp::from_millis(c.time_ms),
            id: c.id,
        }),
        limit: req.fetch_limit(),
    }
}

/// The cursor of a row of such a list.
pub(crate) fn cursor(time: switchboard_domain::Timestamp, id: i64) -> Cursor {
    Cursor {
        time_ms: time.millis(),
        id,
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

    fn binding(list: &str, query: &str) -> Binding {
        Binding {
            key: [9; 32],
            list: list.into(),
            filters: canonical_filters(Some(query)),
        }
    }

    #[tokio::test]
    async fn cursors_are_bound_to_the_list_and_its_filters() {
        let c = Cursor {
            time_ms: 1_786_000_000_000,
            id: 7,
        };
        let issued = BINDING
            .scope(binding("/messages", "status=sent&limit=2"), async {
                c.encode()
            })
            .await;
        let decode = |list: &'static str, query: &'static str| {
            let issued = issued.clone();
            BINDING.scope(binding(list, query), async move { Cursor::decode(&issued) })
        };
        // The same list and filters (in any order, with any limit) accept it.
        assert_eq!(
            decode("/messages", "limit=5&status=sent&cursor=x")
                .await
                .unwrap(),
            c
        );
        for (list, query) in [
            ("/events", "status=sent"),
            ("/messages", "status=failed"),
            ("/messages", ""),
        ] {
            let e = decode(list, query).await.unwrap_err();
            assert_eq!(e.code, "invalid_cursor", "{list}?{query}");
        }
        assert_eq!(
            canonical_filters(Some("b=2&a=1&cursor=z&limit=3")),
            "a=1&b=2"
        );
        assert_eq!(
            canonical_filters(Some("since=2026-11-23T20%3A00%3A00%2B00%3A00")),
            "since=2026-11-23T20:00:00+00:00"
        );
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
                (400, "invalid_cursor"),
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
