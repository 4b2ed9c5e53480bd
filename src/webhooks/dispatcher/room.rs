//! The room of this instance and what fills it besides claims: the requests of its claims
//! (`claim_request`) and, from the same room, deliveries handed to it as they are written
//! (`switchboard_store::handoff`). The dispatcher publishes what it takes (its offer, the room
//! of a claim) whenever its slots change, and takes in what the store's writers hand it after
//! their commits, with no claim transaction: read back, then started as slots free up, like
//! claimed deliveries.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use uuid::Uuid;

use switchboard_store::handoff::{Handed, Offer};
use switchboard_store::webhooks::{ClaimAhead, ClaimRequest, ClaimedFrom};

use super::{AHEAD_FACTOR, Dispatcher, LEASE_MARGIN, QUICK_WINDOW};

impl Dispatcher {
    /// A claim of `room.0` deliveries to start at once and `room.1` ahead, within each
    /// endpoint's room in this instance.
    pub(super) fn claim_request(&self, room: (usize, usize)) -> ClaimRequest {
        let now = self.clock.now();
        let in_flight = {
            let mut slots = self.slots.lock().unwrap();
            let mut in_flight = slots.held.clone();
            // An endpoint whose throttle had no slot within a lease is not claimed until it has.
            let at = Instant::now();
            slots.throttled.retain(|_, until| *until > at);
            for id in slots.throttled.keys() {
                in_flight.insert(*id, usize::MAX / 2);
            }
            in_flight
        };
        let ahead = (room.1 > 0).then(|| ClaimAhead {
            limit: room.1,
            room: self.quick_endpoints(),
        });
        ClaimRequest {
            token: Uuid::new_v4(),
            now,
            lease_until: now.saturating_add(self.timeout + LEASE_MARGIN),
            timeout: self.timeout,
            limit: room.0,
            per_endpoint: self.per_endpoint,
            in_flight,
            ahead,
        }
    }

    /// The endpoints that answered an attempt within [`QUICK`] in the last [`QUICK_WINDOW`],
    /// each with its room ahead (forgetting the others).
    fn quick_endpoints(&self) -> HashMap<i64, usize> {
        let mut slots = self.slots.lock().unwrap();
        let now = Instant::now();
        slots
            .quick
            .retain(|_, at| now.duration_since(*at) < QUICK_WINDOW);
        let room = self.per_endpoint * AHEAD_FACTOR;
        slots.quick.keys().map(|&id| (id, room)).collect()
    }

    /// Publishes the room this instance has now (see `Dispatcher::room`) as the store's offer:
    /// the deliveries written from now on that it takes, under the policy of its claims.
    pub(super) fn publish_offer(&self) {
        if !self.claims_open.load(Ordering::SeqCst) {
            self.handoff.offer(None);
            return;
        }
        let req = self.claim_request(self.room());
        let (ahead_limit, room) = req
            .ahead
            .map_or((0, Default::default()), |a| (a.limit, a.room));
        self.handoff.offer(Some(Offer {
            token: req.token,
            timeout: self.timeout,
            lease_margin: LEASE_MARGIN,
            limit: req.limit,
            per_endpoint: req.per_endpoint,
            in_flight: req.in_flight,
            ahead_limit,
            room,
        }));
    }

    /// After a claim of `asked` deliveries that took `claimed`: due deliveries may still be
    /// waiting if it took all it asked for or some endpoint is at its limit (or throttled).
    pub(super) fn note_claimed(&self, asked: usize, claimed: usize) {
        let more = claimed >= asked || {
            let slots = self.slots.lock().unwrap();
            !slots.throttled.is_empty() || slots.held.values().any(|n| *n >= self.per_endpoint)
        };
        self.more_due.store(more, Ordering::SeqCst);
        if claimed > 0 {
            self.forget_next_due();
        }
    }

    /// Takes in handed deliveries until the dispatcher stops: each batch is launched (read
    /// back first unless its transaction carried all of it), or handed back when the
    /// dispatcher no longer starts attempts (shutting down) or cannot read it (then its leases
    /// expire only if the hand-back fails too).
    pub(super) async fn receive_handed(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Handed>) {
        while let Some(handed) = rx.recv().await {
            metrics::counter!("switchboard_webhook_deliveries_handed_total")
                .increment(handed.deliveries.len() as u64);
            // Known whole by the transaction that wrote them (the usual case), they are
            // attempted at once; otherwise read back first.
            let batch = match handed.claimed() {
                Some(claimed) => Ok(claimed),
                None => self.store.read_handed(&handed, self.clock.now()).await,
            };
            match batch {
                Ok(batch) if self.claims_open.load(Ordering::SeqCst) => self.launch(batch),
                Ok(batch) => self.hand_back(batch).await,
                Err(e) => {
                    tracing::warn!(error = %e, deliveries = handed.deliveries.len(), "could not read handed deliveries back; handing them back");
                    let back = handed
                        .deliveries
                        .iter()
                        .map(|d| {
                            let from = ClaimedFrom {
                                last_attempt_at: None,
                                next_attempt_at: Some(d.written_at),
                            };
                            (d.id, handed.token, from)
                        })
                        .collect();
                    if let Err(e) = self.store.hand_back(back, self.clock.now()).await {
                        tracing::warn!(error = %e, claims = handed.deliveries.len(), "could not hand handed deliveries back; their leases will expire");
                    }
                }
            }
            // In this instance's slots now (or handed back): no longer on their way.
            self.handoff.settle(&handed);
            self.publish_offer();
        }
    }
}
