//! Query code shared by both backends.
//!
//! This module is compiled twice: once inside `store::sqlite` (where `Db` is `sqlx::Sqlite`)
//! and once inside `store::postgres` (where `Db` is `sqlx::Postgres`). Write SQL in the
//! dialect both accept: `$N` placeholders, `RETURNING`, `ON CONFLICT`, no `now()` (times are
//! bound from Rust), no arrays. Statements that must differ go in the backend's `dialect`.

mod channels;
mod events;
mod idempotency;
mod keys;
mod legacy;
mod messages;
mod org_log;
mod orgs;
mod system;
mod templates;
mod users;
mod webhooks;

#[allow(unused_imports)]
pub(super) use super::{Backend, Db, dialect};

pub(crate) use events::write_effects_tx;
pub(crate) use system::bump_config_generation;
