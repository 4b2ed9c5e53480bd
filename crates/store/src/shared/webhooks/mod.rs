//! Webhooks in the store, by aggregate (above `write`: their changes are `WriteTx`s): endpoints and their held deliveries
//! (`endpoints`), the dispatcher's claims (`claims`) and the outcomes of attempts
//! (`deliveries`), and the delivery ledger (`ledger`); the attempt log (`attempts`).
//!
//! The fan-out of outbox events into deliveries (`super::fan_out`, called by
//! `write_effects_tx`) and the chains of ordered endpoints (`super::chains`) are below `write`,
//! beside this module. The rules stay in the domain:
//! status names, the sets of statuses a statement selects and the status changes its `CASE`
//! makes are built from `delivery` (`super::webhook_sql`), never written here as literals
//! (`tests/architecture.rs` checks it).

mod attempts;
mod claims;
mod deliveries;
#[cfg(test)]
pub(super) use deliveries::push_successes;
mod endpoints;
mod ledger;
mod recovery;

use super::{Backend, Conn, Db, dialect, push_in_list};

use super::webhook_sql as sql;
