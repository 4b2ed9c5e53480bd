//! Deliveries claimed as they are written: the hand-off from a committing transaction to this
//! process's dispatcher.
//!
//! The dispatcher publishes an [`Offer`]: how many deliveries it takes now, and for which
//! endpoints, under the same policy as its claims (`claim::choose`). A transaction that fans an
//! event out into unordered deliveries (`fan_out`) takes from the offer what it can: those
//! deliveries are inserted already leased to this process (`attempts` 1, the offer's token, a
//! lease covering the attempt), exactly as a claim would leave them, and after the commit they
//! go to the dispatcher ([`Handoff::receiver`]), which attempts them. The transaction had each
//! delivery's event and endpoint in hand, so it passes them on as a claim would read them back
//! ([`HandedDelivery::claimed`]) and the dispatcher reads nothing before the attempt; only an
//! endpoint with a retired secret still in its grace period (which the fan-out does not read)
//! has its deliveries read back first ([`Handed::claimed`]).
//! A delivery so written costs one row write before its outcome instead of two (the insert
//! and the claim's update), and neither a claim transaction nor a read stands between the
//! commit and the attempt.
//!
//! Nothing else changes: a handed delivery is a claimed delivery. Another instance never sees
//! it until its lease expires (this process stopped): it is then taken over, its interrupted
//! attempt logged, as any claim's. Deliveries the offer has no room for, and those of ordered
//! endpoints (numbered in their chains), are written due and claimed as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::claim;

/// What this process's dispatcher takes as deliveries are written: a standing claim request.
/// Each delivery taken counts against it until the dispatcher publishes the next one.
#[derive(Clone, Debug)]
pub struct Offer {
    /// The lease token of the deliveries taken (recording their outcomes requires it).
    pub token: Uuid,
    /// The deployment's attempt time limit...
    pub timeout: Duration,
    /// ...and how long a lease outlives it (a delivery to an endpoint with a longer time
    /// limit of its own is leased that much longer).
    pub lease_margin: Duration,
    /// At most this many deliveries to attempt at once...
    pub limit: usize,
    /// ...at most this many per endpoint in this process...
    pub per_endpoint: usize,
    /// ...counting those it already holds (endpoint id -> count).
    pub in_flight: HashMap<i64, usize>,
    /// Then at most this many ahead of the free slots...
    pub ahead_limit: usize,
    /// ...only to these endpoints, each at most this many beyond `per_endpoint`.
    pub room: HashMap<i64, usize>,
}

pub use crate::webhooks::{Handed, HandedDelivery};

/// A delivery to hand off, as the fan-out knows it: its endpoint and that endpoint's own time
/// limit.
pub(crate) struct Candidate {
    pub endpoint_id: i64,
    pub endpoint_timeout_ms: Option<i64>,
}

/// A candidate taken: whether ahead of the free slots, and its lease.
pub(crate) struct Taken {
    pub ahead: bool,
    pub lease_until: Timestamp,
}

/// The hand-off between the store's writers and this process's dispatcher (one per store;
/// clones share it).
#[derive(Clone, Debug)]
pub struct Handoff {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    sender: mpsc::UnboundedSender<Handed>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Handed>>>,
}

#[derive(Debug, Default)]
struct State {
    offer: Option<Offer>,
    /// Taken from offers and not yet settled (in the dispatcher's hands, or given back by a
    /// transaction that did not commit): every new offer is reduced by them, so that what is
    /// on its way is never offered twice.
    pending: Pending,
}

#[derive(Debug, Default)]
struct Pending {
    now: usize,
    ahead: usize,
    per_endpoint: HashMap<i64, usize>,
}

impl Default for Handoff {
    fn default() -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Handoff {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                sender,
                receiver: Mutex::new(Some(receiver)),
            }),
        }
    }
}

impl Handoff {
    /// Publishes what the dispatcher takes from now on (`None`: nothing, e.g. while it stops),
    /// less what was taken and is not settled yet (see [`Handoff::settle`]).
    pub fn offer(&self, offer: Option<Offer>) {
        let mut state = self.inner.state.lock().unwrap();
        state.offer = offer.map(|mut o| {
            let p = &state.pending;
            o.limit = o.limit.saturating_sub(p.now);
            o.ahead_limit = o.ahead_limit.saturating_sub(p.ahead);
            for (endpoint, n) in &p.per_endpoint {
                *o.in_flight.entry(*endpoint).or_default() += n;
            }
            o
        });
    }

    /// The dispatcher holds these handed deliveries now (launched, or handed back): they no
    /// longer reduce its offers. Also called for deliveries taken by a transaction that did not
    /// commit.
    pub fn settle(&self, handed: &Handed) {
        let mut state = self.inner.state.lock().unwrap();
        let p = &mut state.pending;
        for d in &handed.deliveries {
            if d.ahead {
                p.ahead = p.ahead.saturating_sub(1);
            } else {
                p.now = p.now.saturating_sub(1);
            }
            if let Some(n) = p.per_endpoint.get_mut(&d.endpoint_id) {
                *n -= 1;
                if *n == 0 {
                    p.per_endpoint.remove(&d.endpoint_id);
                }
            }
        }
    }

    /// Where the handed deliveries arrive, after their transaction committed: to the one
    /// dispatcher of this process (`None` once taken).
    pub fn receiver(&self) -> Option<mpsc::UnboundedReceiver<Handed>> {
        self.inner.receiver.lock().unwrap().take()
    }

    /// Takes from the offer what it has room for among `candidates` (in their order), as
    /// `claim::choose` decides; `None` for each one not taken, and the offer's token.
    pub(crate) fn take(
        &self,
        candidates: &[Candidate],
        now: Timestamp,
    ) -> Option<(Uuid, Vec<Option<Taken>>)> {
        let mut state = self.inner.state.lock().unwrap();
        let State { offer, pending } = &mut *state;
        let offer = offer.as_mut()?;
        if offer.limit == 0 && offer.ahead_limit == 0 {
            return None;
        }
        let picks = claim::choose(
            &claim::Limits {
                limit: offer.limit,
                per_endpoint: offer.per_endpoint,
                in_flight: &offer.in_flight,
                ahead_limit: offer.ahead_limit,
                room: &offer.room,
            },
            candidates.iter().map(|c| c.endpoint_id),
        );
        if picks.is_empty() {
            return None;
        }
        let deployment_ms = i64::try_from(offer.timeout.as_millis()).unwrap_or(i64::MAX);
        let mut taken: Vec<Option<Taken>> = candidates.iter().map(|_| None).collect();
        for p in picks {
            let c = &candidates[p.index];
            if p.ahead {
                offer.ahead_limit -= 1;
                pending.ahead += 1;
            } else {
                offer.limit -= 1;
                pending.now += 1;
            }
            *offer.in_flight.entry(c.endpoint_id).or_default() += 1;
            *pending.per_endpoint.entry(c.endpoint_id).or_default() += 1;
            let longer = c
                .endpoint_timeout_ms
                .filter(|t| *t > deployment_ms)
                .map_or(Duration::ZERO, |t| {
                    Duration::from_millis((t - deployment_ms).unsigned_abs())
                });
            taken[p.index] = Some(Taken {
                ahead: p.ahead,
                lease_until: now.saturating_add(offer.timeout + offer.lease_margin + longer),
            });
        }
        Some((offer.token, taken))
    }

    /// Passes a committed transaction's handed deliveries to the dispatcher. Without one (it
    /// stopped), their leases expire and they are taken over.
    fn send(&self, handed: Handed) {
        if handed.deliveries.is_empty() {
            return;
        }
        if let Err(unsent) = self.inner.sender.send(handed) {
            self.settle(&unsent.0);
            tracing::warn!("handed deliveries found no dispatcher; their leases will expire");
        }
    }
}

/// Deliveries a transaction took from the offer, until it commits: then [`Uncommitted::send`]
/// hands them to the dispatcher; dropped unsent (the transaction failed), they are settled, so
/// that the offers they reduced are whole again.
#[derive(Debug)]
pub(crate) struct Uncommitted {
    handoff: Handoff,
    handed: Vec<Handed>,
}

impl Uncommitted {
    pub(crate) fn new(handoff: Handoff) -> Uncommitted {
        Uncommitted {
            handoff,
            handed: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, handed: Handed) {
        self.handed.push(handed);
    }

    /// Moves `other`'s deliveries into this one.
    pub(crate) fn absorb(&mut self, other: &mut Uncommitted) {
        self.handed.append(&mut other.handed);
    }

    /// After the commit: to the dispatcher.
    pub(crate) fn send(mut self) {
        for handed in std::mem::take(&mut self.handed) {
            self.handoff.send(handed);
        }
    }
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        for handed in &self.handed {
            self.handoff.settle(handed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(limit: usize, per_endpoint: usize) -> Offer {
        Offer {
            token: Uuid::nil(),
            timeout: Duration::from_secs(30),
            lease_margin: Duration::from_secs(10),
            limit,
            per_endpoint,
            in_flight: HashMap::new(),
            ahead_limit: 0,
            room: HashMap::new(),
        }
    }

    fn candidates(endpoints: &[i64]) -> Vec<Candidate> {
        endpoints
            .iter()
            .map(|&endpoint_id| Candidate {
                endpoint_id,
                endpoint_timeout_ms: None,
            })
            .collect()
    }

    #[test]
    fn nothing_is_taken_without_an_offer() {
        let h = Handoff::default();
        assert!(
            h.take(&candidates(&[1]), Timestamp::from_millis(0))
                .is_none()
        );
    }

    #[test]
    fn takes_count_against_the_offer_until_the_next_one() {
        let h = Handoff::default();
        h.offer(Some(offer(3, 2)));
        let now = Timestamp::from_millis(1_000);
        let (_, taken) = h.take(&candidates(&[1, 1, 1, 2]), now).unwrap();
        let took: Vec<bool> = taken.iter().map(Option::is_some).collect();
        // Two per endpoint: the third delivery to endpoint 1 is left for a claim.
        assert_eq!(took, [true, true, false, true]);
        let lease = taken[0].as_ref().unwrap().lease_until;
        assert_eq!(lease, Timestamp::from_millis(41_000));
        // The offer is used up: nothing more until the dispatcher publishes again, and a new
        // offer counts the three still on their way.
        assert!(h.take(&candidates(&[3]), now).is_none());
        h.offer(Some(offer(3, 2)));
        assert!(h.take(&candidates(&[3]), now).is_none());
        h.offer(Some(offer(4, 2)));
        assert!(h.take(&candidates(&[3]), now).is_some());
    }

    #[test]
    fn ahead_only_to_the_endpoints_with_room_and_longer_leases_for_longer_limits() {
        let h = Handoff::default();
        let mut o = offer(1, 1);
        o.ahead_limit = 5;
        o.room.insert(7, 1);
        h.offer(Some(o));
        let now = Timestamp::from_millis(0);
        let cs = vec![
            Candidate {
                endpoint_id: 7,
                endpoint_timeout_ms: Some(45_000),
            },
            Candidate {
                endpoint_id: 7,
                endpoint_timeout_ms: Some(45_000),
            },
            Candidate {
                endpoint_id: 8,
                endpoint_timeout_ms: None,
            },
        ];
        let (_, taken) = h.take(&cs, now).unwrap();
        let a = taken[0].as_ref().unwrap();
        let b = taken[1].as_ref().unwrap();
        assert!(!a.ahead && b.ahead);
        // 45 s own limit: 15 s more than the deployment's 30 s, plus the 10 s margin.
        assert_eq!(a.lease_until, Timestamp::from_millis(55_000));
        assert!(
            taken[2].is_none(),
            "no slot free and no room ahead for endpoint 8"
        );
    }

    #[test]
    fn what_is_on_its_way_is_not_offered_twice() {
        let h = Handoff::default();
        h.offer(Some(offer(2, 2)));
        let now = Timestamp::from_millis(0);
        let (token, taken) = h.take(&candidates(&[1, 1]), now).unwrap();
        assert!(taken.iter().all(Option::is_some));
        // The dispatcher republishes the same room before the two arrive: nothing more.
        h.offer(Some(offer(2, 2)));
        assert!(h.take(&candidates(&[1]), now).is_none());
        // They arrived (or their transaction failed): the room is whole again.
        let handed = Handed {
            token,
            deliveries: (0..2)
                .map(|id| HandedDelivery {
                    id,
                    endpoint_id: 1,
                    ahead: false,
                    lease_until: now,
                    written_at: now,
                    claimed: None,
                })
                .collect(),
        };
        h.settle(&handed);
        h.offer(Some(offer(2, 2)));
        assert!(h.take(&candidates(&[1, 1]), now).is_some());
        // A transaction that took deliveries and failed gives them back when dropped.
        let mut u = Uncommitted::new(h.clone());
        u.push(Handed {
            token,
            deliveries: handed.deliveries.clone(),
        });
        drop(u);
        h.offer(Some(offer(2, 2)));
        assert_eq!(h.take(&candidates(&[1, 1]), now).unwrap().1.len(), 2);
    }

    #[test]
    fn the_receiver_is_taken_once() {
        let h = Handoff::default();
        assert!(h.receiver().is_some());
        assert!(h.receiver().is_none());
    }
}
