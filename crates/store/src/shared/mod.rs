//! Query code shared by both backends.
//!
//! This module is compiled twice: once inside `store::sqlite` (where `Db` is `sqlx::Sqlite`)
//! and once inside `store::postgres` (where `Db` is `sqlx::Postgres`). Write SQL in the
//! dialect both accept: `$N` placeholders, `RETURNING`, `ON CONFLICT`, no `now()` (times are
//! bound from Rust), no arrays. Statements that must differ go in the backend's `dialect`.

mod campaigns;
mod canned_replies;
mod chains;
mod channels;
mod completions;
mod contacts;
mod conversations;
mod endpoint_columns;
mod event_payload;
mod events;
mod fan_out;
mod first_attempt;
mod flows;
mod group_commit;
mod groups;
mod idempotency;
mod keys;
mod media;
mod message_changes;
mod messages;
mod org_log;
mod orgs;
mod outbound_group;
#[cfg(test)]
pub(super) mod plans;
mod queue;
mod queue_entries;
mod system;
mod templates;
mod users;
pub(super) mod webhook_sql;
mod webhooks;
mod write;

#[allow(unused_imports)]
pub(super) use super::{Backend, Db, dialect};

pub(crate) use group_commit::GroupSlot;
pub(crate) use system::bump_config_generation;

/// A connection of this backend (inside a transaction: `&mut tx` coerces to it).
pub(super) type Conn = <Db as sqlx::Database>::Connection;

/// The most values bound in one `IN (...)` list (SQLite allows 32 766 parameters per
/// statement, PostgreSQL 65 535; a statement's other parameters stay well within the rest).
pub(super) const IN_LIST_CHUNK: usize = 500;

/// Appends ` IN ($1, $2, ...)` with `values` bound (the caller keeps lists within
/// [`IN_LIST_CHUNK`]).
pub(super) fn push_in_list<'a, T>(qb: &mut sqlx::QueryBuilder<'a, Db>, values: &[T])
where
    T: 'a + Copy + sqlx::Encode<'a, Db> + sqlx::Type<Db>,
{
    qb.push(" IN (");
    let mut sep = qb.separated(", ");
    for v in values {
        sep.push_bind(*v);
    }
    sep.push_unseparated(")");
}

/// Appends `AND (time, id) < (t, i) ORDER BY time DESC, id DESC LIMIT n`.
pub(super) fn push_page(
    qb: &mut sqlx::QueryBuilder<'_, Db>,
    time: &str,
    id: &str,
    page: crate::page::PageQuery,
) {
    if let Some(after) = page.after {
        // A row-value comparison, which indexes on (.., time, id) use as a bound.
        qb.push(format!(" AND ({time}, {id}) < ("))
            .push_bind(after.time)
            .push(", ")
            .push_bind(after.id)
            .push(")");
    }
    qb.push(format!(" ORDER BY {time} DESC, {id} DESC LIMIT "))
        .push_bind(page.limit);
}
