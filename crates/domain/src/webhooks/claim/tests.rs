use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;

fn limits<'a>(
    limit: usize,
    per_endpoint: usize,
    in_flight: &'a HashMap<i64, usize>,
    ahead_limit: usize,
    room: &'a HashMap<i64, usize>,
) -> Limits<'a> {
    Limits {
        limit,
        per_endpoint,
        in_flight,
        ahead_limit,
        room,
    }
}

fn now(index: usize) -> Pick {
    Pick {
        index,
        ahead: false,
    }
}

fn ahead(index: usize) -> Pick {
    Pick { index, ahead: true }
}

#[test]
fn claims_in_order_within_the_limit_and_per_endpoint() {
    let none = HashMap::new();
    let l = limits(3, 2, &none, 0, &none);
    // Endpoint 1 takes two, its third waits; endpoint 2 fills the limit.
    assert_eq!(choose(&l, [1, 1, 1, 2, 2]), vec![now(0), now(1), now(3)]);
    assert_eq!(choose(&l, []), vec![]);
}

#[test]
fn what_the_instance_holds_counts() {
    let held = HashMap::from([(1, 2), (2, 1)]);
    let none = HashMap::new();
    let l = limits(10, 2, &held, 0, &none);
    assert_eq!(choose(&l, [1, 2, 2, 3]), vec![now(1), now(3)]);
    assert_eq!(l.saturated(), vec![1]);
}

#[test]
fn claims_ahead_only_where_there_is_room() {
    let held = HashMap::from([(1, 1)]);
    let room = HashMap::from([(1, 2)]);
    let l = limits(1, 1, &held, 5, &room);
    // Endpoint 1 is full at once but has room for two ahead; endpoint 2 fills the one slot,
    // its second has no room ahead.
    assert_eq!(
        choose(&l, [1, 2, 2, 1, 1, 1]),
        vec![ahead(0), now(1), ahead(3)]
    );
    assert_eq!(l.most(1), 3);
    assert_eq!(l.most(2), 1);
    assert_eq!(l.saturated(), Vec::<i64>::new());
    let full = HashMap::from([(1, 3), (2, 0), (3, 7)]);
    assert_eq!(limits(1, 1, &full, 5, &room).saturated(), vec![1, 3]);
}

#[test]
fn the_scan_is_four_times_the_claim_within_bounds() {
    let none = HashMap::new();
    assert_eq!(limits(1, 1, &none, 0, &none).scan(), 16);
    assert_eq!(limits(10, 1, &none, 5, &none).scan(), 60);
    assert_eq!(limits(500, 1, &none, 0, &none).scan(), 1000);
}

#[derive(Clone, Debug)]
struct Case {
    limit: usize,
    per_endpoint: usize,
    ahead_limit: usize,
    in_flight: HashMap<i64, usize>,
    room: HashMap<i64, usize>,
    candidates: Vec<i64>,
}

impl Case {
    fn limits(&self) -> Limits<'_> {
        limits(
            self.limit,
            self.per_endpoint,
            &self.in_flight,
            self.ahead_limit,
            &self.room,
        )
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        0usize..6,
        0usize..4,
        0usize..6,
        prop::collection::hash_map(0i64..5, 0usize..6, 0..5),
        prop::collection::hash_map(0i64..5, 0usize..4, 0..5),
        prop::collection::vec(0i64..5, 0..40),
    )
        .prop_map(
            |(limit, per_endpoint, ahead_limit, in_flight, room, candidates)| Case {
                limit,
                per_endpoint,
                ahead_limit,
                in_flight,
                room,
                candidates,
            },
        )
}

proptest! {
    #[test]
    fn choose_keeps_every_limit(c in case()) {
        let l = c.limits();
        let picks = choose(&l, c.candidates.iter().copied());
        // Nothing twice, in the candidates' order.
        prop_assert!(picks.windows(2).all(|w| w[0].index < w[1].index));
        prop_assert!(picks.iter().all(|p| p.index < c.candidates.len()));
        prop_assert!(picks.iter().filter(|p| !p.ahead).count() <= c.limit);
        prop_assert!(picks.iter().filter(|p| p.ahead).count() <= c.ahead_limit);
        let keys: HashSet<i64> = c.candidates.iter().copied().collect();
        for key in keys {
            let held = c.in_flight.get(&key).copied().unwrap_or(0);
            let mine: Vec<&Pick> = picks.iter().filter(|p| c.candidates[p.index] == key).collect();
            let at_once = mine.iter().filter(|p| !p.ahead).count();
            // Never more than the endpoint's limit in flight (beyond what it held already).
            if at_once > 0 {
                prop_assert!(held + at_once <= c.per_endpoint);
            }
            if !mine.is_empty() {
                prop_assert!(held + mine.len() <= l.most(key));
            }
            if mine.iter().any(|p| p.ahead) {
                prop_assert!(c.room.contains_key(&key));
            }
            // The endpoint's first candidates, in order: at once first, then ahead.
            let its: Vec<usize> = (0..c.candidates.len()).filter(|i| c.candidates[*i] == key).collect();
            let taken: Vec<usize> = mine.iter().map(|p| p.index).collect();
            prop_assert_eq!(&its[..taken.len()], &taken[..]);
            prop_assert!(mine.windows(2).all(|w| !w[0].ahead || w[1].ahead));
            // A saturated endpoint gets nothing.
            if l.saturated().contains(&key) {
                prop_assert!(mine.is_empty());
            }
        }
    }

    #[test]
    fn choose_is_deterministic_and_greedy(c in case()) {
        let l = c.limits();
        let picks = choose(&l, c.candidates.iter().copied());
        prop_assert_eq!(&picks, &choose(&l, c.candidates.iter().copied()));
        // Leaving out the saturated endpoints' candidates (as the store's read does) changes
        // nothing but the indexes.
        let saturated = l.saturated();
        let kept: Vec<(usize, i64)> = c
            .candidates
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, k)| !saturated.contains(k))
            .collect();
        let filtered: Vec<Pick> = choose(&l, kept.iter().map(|(_, k)| *k))
            .into_iter()
            .map(|p| Pick { index: kept[p.index].0, ahead: p.ahead })
            .collect();
        prop_assert_eq!(&picks, &filtered);
        // A candidate left out at once while the limit is not reached had no slot: its
        // endpoint holds `per_endpoint`.
        let at_once = picks.iter().filter(|p| !p.ahead).count();
        if at_once < c.limit {
            for (i, key) in c.candidates.iter().enumerate() {
                if !picks.iter().any(|p| p.index == i) {
                    let held = c.in_flight.get(key).copied().unwrap_or(0);
                    let mine = picks.iter().filter(|p| !p.ahead && c.candidates[p.index] == *key).count();
                    prop_assert!(held + mine >= c.per_endpoint);
                }
            }
        }
    }
}
