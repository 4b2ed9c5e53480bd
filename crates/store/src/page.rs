//! Pages of the newest-first lists of the routes under `/api` (contacts, groups, their members,
//! canned replies, templates, flows).

use switchboard_domain::Timestamp;

/// A position in a newest-first list: the (time, id) of the last row returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePosition {
    pub time: Timestamp,
    pub id: i64,
}

/// A page request: rows strictly after `after` in newest-first order, at most `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageQuery {
    pub after: Option<PagePosition>,
    pub limit: i64,
}
