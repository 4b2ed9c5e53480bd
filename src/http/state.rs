//! Shared state of the HTTP layer: built once at start-up, cloned cheaply per request.

use std::ops::Deref;
use std::sync::Arc;

use dashmap::DashMap;

use crate::config::Config;
use crate::crypto::SecretBox;
use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;

use super::rate_limit::RateLimiter;

#[derive(Clone)]
pub struct AppState(Arc<AppInner>);

pub struct AppInner {
    pub config: Arc<Config>,
    pub store: SharedStore,
    pub clock: SharedClock,
    pub secrets: SecretBox,
    pub limiter: Arc<RateLimiter>,
    /// When each key's `last_used_at` was last written by this process (ms), to write it at
    /// most once a minute per key.
    pub key_touches: DashMap<i64, i64>,
    /// The sends' idempotency keys (API key id, key) whose requests run in this process: a
    /// duplicate that comes while its first request runs here is answered at once
    /// (`http::idempotency::run_send`).
    pub sends_in_flight: DashMap<(i64, String), Running>,
    /// Cached API keys and channel lists, invalidated by the configuration generation.
    pub config_cache: Arc<crate::cache::ConfigCache>,
    /// Builds messaging provider adapters; holds the one provider HTTP client.
    pub providers: crate::providers::ProviderHub,
    /// The DNS look-up used to check webhook endpoint URLs on create and update.
    pub webhook_lookup: crate::url_safety::Lookup,
    /// Wakes this process's recovery worker when a recovery is started.
    pub recovery_wake: Arc<tokio::sync::Notify>,
    /// Cancelled on SIGTERM / Ctrl-C: open event streams end at once (their clients reconnect
    /// to another instance) instead of holding the shutdown grace.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Renders `/metrics`.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

impl AppState {
    pub fn new(inner: AppInner) -> Self {
        AppState(Arc::new(inner))
    }
}

impl Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

/// A send running in this process, as `AppInner::sends_in_flight` keeps it: its request's
/// fingerprint, since when it runs, and which request it is.
pub struct Running {
    pub fingerprint: Vec<u8>,
    pub since: std::time::Instant,
    pub id: uuid::Uuid,
}
