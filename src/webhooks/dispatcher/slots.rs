//! What an instance holds of the deliveries it claimed: per endpoint, held and running counts,
//! the queue waiting for a slot, which endpoints answer quickly, which are throttled.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use switchboard_store::webhooks::ClaimedDelivery;

/// The deliveries an instance holds, by endpoint (0: no endpoint).
#[derive(Default)]
pub(super) struct Slots {
    /// Claimed and not over yet (waiting or in flight): the claims' per-endpoint room.
    pub(super) held: HashMap<i64, usize>,
    /// In flight.
    pub(super) running: HashMap<i64, usize>,
    /// Claimed, waiting for a slot, in claim order.
    pub(super) waiting: VecDeque<ClaimedDelivery>,
    /// When each endpoint last answered an attempt within [`super::QUICK`].
    pub(super) quick: HashMap<i64, Instant>,
    /// Cleared at shutdown: nothing waiting starts any more.
    pub(super) open: bool,
    /// Endpoints whose throttle had no slot within a lease, until when (not claimed till then).
    pub(super) throttled: HashMap<i64, Instant>,
}

impl Slots {
    /// A delivery of endpoint `key` is over (or handed back): `running` if it was in flight.
    pub(super) fn release(&mut self, key: i64, running: bool) {
        fn decrement(map: &mut HashMap<i64, usize>, key: i64) {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
        decrement(&mut self.held, key);
        if running {
            decrement(&mut self.running, key);
        }
    }
}

pub(super) fn endpoint_key(d: &ClaimedDelivery) -> i64 {
    d.endpoint.as_ref().map(|e| e.id).unwrap_or(0)
}
