//! In-process caches of API keys and channel lists, with invalidation that keeps revocations
//! effective at once.
//!
//! Every change to keys or channels bumps a *configuration generation* in the database, in
//! the same transaction (`store::shared::bump_config_generation`). A background task polls the
//! generation every [`POLL_INTERVAL`] and empties the caches when it moves. A cache entry is
//! used only while the last poll *started* less than [`MAX_STALENESS`] ago; otherwise every
//! lookup goes to the database, as if there were no cache. The admin tools wait
//! [`PROPAGATION`] (more than `MAX_STALENESS`) after committing such a change before they
//! return, so when `switchboard admin key revoke` returns, no instance answers from a cache that
//! predates the revocation.
//!
//! Lookups that race with an invalidation never repopulate the cache with what they read
//! before it: an entry is stored only if the generation did not move during the lookup.
//!
//! The poller rests when nothing has looked anything up for [`REST_AFTER`], so an idle
//! instance reads nothing from the database (each instance's poll is otherwise 200 statements
//! a second). While it rests the last poll grows stale, so the next lookup reads the database,
//! as without a cache, and wakes the poller; the staleness bound holds throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use switchboard_domain::api_key::KeyHash;
use switchboard_domain::channel::Channel;
use switchboard_store::{ApiKeyRecord, GenerationReader, Store, StoreResult};

/// How often each instance reads the configuration generation.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// A cache entry is used only if the last poll started at most this long ago.
pub const MAX_STALENESS: Duration = Duration::from_millis(20);
/// How long the admin tools wait after changing keys or channels before they return.
pub const PROPAGATION: Duration = Duration::from_millis(50);
/// The poller rests after this long without a lookup, until the next one.
pub const REST_AFTER: Duration = Duration::from_secs(2);
/// Entries kept at most per map (then the map is emptied and refilled on demand).
const MAX_ENTRIES: usize = 100_000;

pub struct ConfigCache {
    epoch: Instant,
    max_staleness_us: u64,
    /// The generation the cached entries belong to.
    generation: AtomicI64,
    /// When (µs since `epoch`) the last successful poll started; 0: never.
    fresh_from_us: AtomicU64,
    /// When (µs since `epoch`) the last lookup started.
    last_lookup_us: AtomicU64,
    /// Whether the poller rests (a lookup then wakes it through `wake`).
    resting: AtomicBool,
    wake: tokio::sync::Notify,
    keys: DashMap<[u8; 32], ApiKeyRecord>,
    channels: DashMap<i64, Arc<Vec<Channel>>>,
}

impl Default for ConfigCache {
    fn default() -> Self {
        ConfigCache {
            epoch: Instant::now(),
            max_staleness_us: MAX_STALENESS.as_micros() as u64,
            generation: AtomicI64::new(i64::MIN),
            fresh_from_us: AtomicU64::new(0),
            last_lookup_us: AtomicU64::new(0),
            resting: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            keys: DashMap::new(),
            channels: DashMap::new(),
        }
    }
}

impl ConfigCache {
    /// A cache whose entries are used for `max_staleness` after a poll (tests).
    pub fn with_max_staleness(max_staleness: Duration) -> Self {
        ConfigCache {
            max_staleness_us: max_staleness.as_micros() as u64,
            ..Default::default()
        }
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64 + 1
    }

    /// Whether cached entries may be used now; also notes the lookup that asks (and wakes a
    /// resting poller).
    fn usable(&self) -> bool {
        let now = self.now_us();
        // SeqCst with the poller's `resting` store and `idle_for` load: either the poller
        // sees this lookup before it rests, or this lookup sees it resting and wakes it.
        self.last_lookup_us.store(now, Ordering::SeqCst);
        if self.resting.load(Ordering::SeqCst) {
            self.wake.notify_one();
        }
        let fresh_from = self.fresh_from_us.load(Ordering::Acquire);
        fresh_from != 0 && now.saturating_sub(fresh_from) <= self.max_staleness_us
    }

    /// How long since the last lookup.
    fn idle_for(&self) -> Duration {
        let last = self.last_lookup_us.load(Ordering::SeqCst);
        Duration::from_micros(self.now_us().saturating_sub(last))
    }

    /// Rests while no lookup came for `rest_after`, until one comes (or `stop`). Returns
    /// whether it rested.
    async fn rest_if_idle(
        &self,
        rest_after: Duration,
        stop: &tokio_util::sync::CancellationToken,
    ) -> bool {
        if self.idle_for() < rest_after {
            return false;
        }
        self.resting.store(true, Ordering::SeqCst);
        // A lookup between the check above and the store is seen here; one after it notifies
        // (`Notify` keeps the permit if nobody waits yet).
        if self.idle_for() >= rest_after {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = self.wake.notified() => {}
            }
        }
        self.resting.store(false, Ordering::SeqCst);
        true
    }

    /// Reads the generation and empties the caches if it moved. Called every `POLL_INTERVAL`.
    pub async fn poll(&self, reader: &mut dyn GenerationReader) -> StoreResult<()> {
        let started = self.now_us();
        let current = reader.read().await?;
        if self.generation.swap(current, Ordering::AcqRel) != current {
            self.keys.clear();
            self.channels.clear();
        }
        self.fresh_from_us.fetch_max(started, Ordering::AcqRel);
        Ok(())
    }

    /// The key with this hash (cached while fresh).
    pub async fn api_key(
        &self,
        store: &dyn Store,
        hash: &KeyHash,
    ) -> StoreResult<Option<ApiKeyRecord>> {
        if self.usable() {
            if let Some(k) = self.keys.get(&hash.0) {
                return Ok(Some(k.clone()));
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let found = store.find_api_key_by_hash(hash).await?;
        if let Some(k) = &found {
            self.remember(&self.keys, generation, hash.0, k.clone());
        }
        Ok(found)
    }

    /// The organization's channels (cached while fresh).
    pub async fn channels(&self, store: &dyn Store, org_id: i64) -> StoreResult<Arc<Vec<Channel>>> {
        if self.usable() {
            if let Some(c) = self.channels.get(&org_id) {
                return Ok(c.clone());
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let list = Arc::new(store.list_channels(org_id).await?);
        self.remember(&self.channels, generation, org_id, list.clone());
        Ok(list)
    }

    /// Caches a value read from the database while the generation was `generation`, unless
    /// the generation moved during the read (the value may be older than the change) or the
    /// cache is not fresh. A full map is emptied first (bounded memory).
    fn remember<K: Eq + std::hash::Hash, V>(
        &self,
        map: &DashMap<K, V>,
        generation: i64,
        key: K,
        value: V,
    ) {
        if self.generation.load(Ordering::Acquire) == generation && self.usable() {
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
            map.insert(key, value);
        }
    }
}

/// Polls the configuration generation until `stop` is cancelled, resting while no lookup
/// comes for [`REST_AFTER`].
pub async fn run_poller(
    cache: Arc<ConfigCache>,
    store: switchboard_store::SharedStore,
    stop: tokio_util::sync::CancellationToken,
) {
    poll_until(cache, store, stop, REST_AFTER).await
}

async fn poll_until(
    cache: Arc<ConfigCache>,
    store: switchboard_store::SharedStore,
    stop: tokio_util::sync::CancellationToken,
    rest_after: Duration,
) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Keeps a connection while polling (one round trip a poll), none while resting.
    let mut reader: Option<Box<dyn GenerationReader>> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if cache.idle_for() >= rest_after {
            reader = None;
        }
        if cache.rest_if_idle(rest_after, &stop).await {
            if stop.is_cancelled() {
                return;
            }
            tick.reset();
        }
        let reader = reader.get_or_insert_with(|| store.generation_reader());
        if let Err(e) = cache.poll(reader.as_mut()).await {
            tracing::debug!(error = %e, "could not read the configuration generation; caches are bypassed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_domain::Timestamp;
    use switchboard_domain::api_key;
    use switchboard_domain::event::Effects;
    use switchboard_store::{NewApiKey, SharedStore};

    async fn store_with_key() -> (
        switchboard_store::testing::TestStore,
        api_key::GeneratedKey,
        i64,
    ) {
        let t = switchboard_store::testing::sqlite().await;
        let org = t
            .store
            .create_org("Acme", Timestamp::from_millis(0))
            .await
            .unwrap();
        let g = api_key::generate();
        let k = t
            .store
            .create_api_key(
                NewApiKey {
                    org_id: org.id,
                    name: "k".into(),
                    prefix: g.display_prefix.clone(),
                    key_hash: g.hash,
                    scopes: None,
                    legacy: false,
                    default_channel_id: None,
                    expires_at: None,
                    created_at: Timestamp::from_millis(0),
                },
                Box::new(|_| Effects::none()),
            )
            .await
            .unwrap();
        (t, g, k.id)
    }

    async fn revoke(store: &SharedStore, id: i64) {
        store
            .revoke_api_key(
                id,
                "revoked",
                Timestamp::from_millis(1),
                Box::new(|_| Effects::none()),
            )
            .await
            .unwrap();
    }

    /// Whether the cache answers that the key is revoked.
    async fn answers_revoked(cache: &ConfigCache, store: &SharedStore, hash: &KeyHash) -> bool {
        cache
            .api_key(store.as_ref(), hash)
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    }

    #[tokio::test]
    async fn without_a_fresh_poll_every_lookup_reads_the_database() {
        let (t, g, id) = store_with_key().await;
        let cache = ConfigCache::default();
        assert!(!answers_revoked(&cache, &t.store, &g.hash).await);
        revoke(&t.store, id).await;
        assert!(answers_revoked(&cache, &t.store, &g.hash).await);
    }

    #[tokio::test]
    async fn a_poll_after_a_change_drops_the_cached_key() {
        let (t, g, id) = store_with_key().await;
        let cache = ConfigCache::with_max_staleness(Duration::from_secs(60));
        cache
            .poll(t.store.generation_reader().as_mut())
            .await
            .unwrap();
        assert!(!answers_revoked(&cache, &t.store, &g.hash).await);
        assert_eq!(
            cache.keys.len(),
            1,
            "the key is cached while polls are fresh"
        );
        revoke(&t.store, id).await;
        cache
            .poll(t.store.generation_reader().as_mut())
            .await
            .unwrap();
        assert!(cache.keys.is_empty(), "the revocation moved the generation");
        assert!(answers_revoked(&cache, &t.store, &g.hash).await);
    }

    /// Waits (at most 10 s) until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn the_poller_rests_without_lookups_and_the_next_lookup_still_sees_a_revocation() {
        let (t, g, id) = store_with_key().await;
        let cache = Arc::new(ConfigCache::default());
        let stop = tokio_util::sync::CancellationToken::new();
        let poller = tokio::spawn(poll_until(
            cache.clone(),
            t.store.clone(),
            stop.clone(),
            Duration::from_millis(30),
        ));
        until("a first poll", || cache.usable()).await;
        assert!(!answers_revoked(&cache, &t.store, &g.hash).await);
        until("the poller rests", || cache.resting.load(Ordering::SeqCst)).await;
        // Resting: no poll reads the database (a poll would move `fresh_from_us`).
        let fresh_from = cache.fresh_from_us.load(Ordering::SeqCst);
        tokio::time::sleep(POLL_INTERVAL * 6).await;
        assert_eq!(cache.fresh_from_us.load(Ordering::SeqCst), fresh_from);
        assert!(cache.resting.load(Ordering::SeqCst));

        // A change while it rests: the next lookup reads the database and wakes it.
        revoke(&t.store, id).await;
        assert!(answers_revoked(&cache, &t.store, &g.hash).await);
        until("the poller polls again", || {
            cache.fresh_from_us.load(Ordering::SeqCst) > fresh_from
        })
        .await;
        assert!(answers_revoked(&cache, &t.store, &g.hash).await);
        stop.cancel();
        poller.await.unwrap();
    }

    #[tokio::test]
    async fn stale_polls_bypass_the_cache() {
        let (t, g, id) = store_with_key().await;
        let cache = ConfigCache::with_max_staleness(Duration::from_millis(1));
        cache
            .poll(t.store.generation_reader().as_mut())
            .await
            .unwrap();
        cache.api_key(t.store.as_ref(), &g.hash).await.unwrap();
        revoke(&t.store, id).await;
        // No poll for longer than the staleness bound: the cached entry is not used any more.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(answers_revoked(&cache, &t.store, &g.hash).await);
    }
}
