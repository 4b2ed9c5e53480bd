//! Which due deliveries a dispatcher instance claims (docs/webhooks.md, "Delivery engine"), as
//! a pure policy: the store reads the candidates (due, not leased, in due order), asks
//! [`choose`] which to take and leases them.
//!
//! * At most [`Limits::limit`] deliveries to attempt at once, at most
//!   [`Limits::per_endpoint`] per endpoint in this instance, counting those it already holds
//!   ([`Limits::in_flight`]).
//! * Then, after those, at most [`Limits::ahead_limit`] deliveries ahead of the free slots,
//!   only to the endpoints in [`Limits::room`], each at most that many beyond `per_endpoint`.
//! * Candidates are taken in their order: an endpoint's claimed deliveries are the first of
//!   its candidates (its order, and so each contact's chain on an ordered endpoint, is kept),
//!   those to attempt at once before those ahead.
//!
//! Endpoints are identified by a key (the store's endpoint id; deliveries without an endpoint
//! share one key).

use std::collections::HashMap;

/// What an instance may claim.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// At most this many deliveries to attempt at once...
    pub limit: usize,
    /// ...at most this many per endpoint in this instance...
    pub per_endpoint: usize,
    /// ...counting those this instance already holds (endpoint key -> count).
    pub in_flight: &'a HashMap<i64, usize>,
    /// At most this many deliveries ahead of the free slots...
    pub ahead_limit: usize,
    /// ...only to these endpoints, each at most this many beyond `per_endpoint`.
    pub room: &'a HashMap<i64, usize>,
}

/// A claimed candidate: its index in the candidates, and whether it is claimed ahead of the
/// free slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    pub index: usize,
    pub ahead: bool,
}

impl Limits<'_> {
    /// The most deliveries to `key` this instance may hold (at once and ahead).
    pub fn most(&self, key: i64) -> usize {
        self.per_endpoint + self.room.get(&key).copied().unwrap_or(0)
    }

    fn held(&self, key: i64) -> usize {
        self.in_flight.get(&key).copied().unwrap_or(0)
    }

    /// The endpoints this instance holds its most for: none of their candidates can be
    /// claimed, so the read of candidates leaves them out. In key order.
    pub fn saturated(&self) -> Vec<i64> {
        let mut keys: Vec<i64> = self
            .in_flight
            .iter()
            .filter(|(key, n)| **n >= self.most(**key))
            .map(|(key, _)| *key)
            .collect();
        keys.sort_unstable();
        keys
    }

    /// How many candidates to read: four times what may be claimed, within 16 and 1 000 (room
    /// for candidates of endpoints that cannot take more).
    pub fn scan(&self) -> usize {
        ((self.limit + self.ahead_limit) * 4).clamp(16, 1000)
    }
}

/// Which candidates to claim (see the module documentation), in their order. `candidates` are
/// the endpoint keys of the due deliveries, in due order.
pub fn choose(limits: &Limits<'_>, candidates: impl IntoIterator<Item = i64>) -> Vec<Pick> {
    let mut used: HashMap<i64, usize> = HashMap::new();
    let mut picks = Vec::new();
    let (mut now_count, mut ahead_count) = (0, 0);
    for (index, key) in candidates.into_iter().enumerate() {
        if now_count >= limits.limit && ahead_count >= limits.ahead_limit {
            break;
        }
        let n = used.entry(key).or_insert_with(|| limits.held(key));
        let ahead = if now_count < limits.limit && *n < limits.per_endpoint {
            now_count += 1;
            false
        } else if ahead_count < limits.ahead_limit
            && limits.room.contains_key(&key)
            && *n < limits.most(key)
        {
            ahead_count += 1;
            true
        } else {
            continue;
        };
        *n += 1;
        picks.push(Pick { index, ahead });
    }
    picks
}

#[cfg(test)]
mod tests;
