//! Webhooks in the store, by aggregate: the fan-out of outbox events into deliveries
//! (`fan_out`, called by `write_effects_tx`), endpoints and their held deliveries
//! (`endpoints`), the dispatcher's claims and the outcomes of attempts (`deliveries`), and the
//! delivery ledger (`ledger`); the chains of ordered endpoints (`chains`).

mod chains;
mod deliveries;
mod endpoints;
mod fan_out;
mod ledger;
mod recovery;

use super::{Backend, Conn, Db, dialect, push_in_list};

pub(super) use fan_out::{FanOut, insert_events};
