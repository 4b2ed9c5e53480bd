//! Retention (`SWITCHBOARD_DELIVERY_RETENTION`, 90 days by default): deliveries older than the
//! retention are deleted with their attempts, and so are outbox events older than it that no
//! delivery refers to. Deletes go in batches, each in its own short transaction, so the purge
//! never holds long locks.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;

/// Rows deleted per transaction.
pub const BATCH: i64 = 1000;

pub struct Purge {
    store: SharedStore,
    clock: SharedClock,
    retention: Duration,
}

impl Purge {
    pub fn new(store: SharedStore, clock: SharedClock, retention: Duration) -> Self {
        Purge {
            store,
            clock,
            retention,
        }
    }

    /// Purges every `interval` until `stop`.
    pub async fn run(self, interval: Duration, stop: CancellationToken) {
        super::every(interval, stop, || self.purge()).await
    }

    /// Purges everything older than the retention, batch by batch, until done.
    pub async fn purge(&self) {
        let cutoff = self.clock.now().saturating_sub(self.retention);
        let (mut deliveries, mut events) = (0u64, 0u64);
        loop {
            match self.store.purge_deliveries(cutoff, BATCH).await {
                Ok((d, e)) => {
                    deliveries += d;
                    events += e;
                    if d < BATCH as u64 && e < BATCH as u64 {
                        break;
                    }
                    // Let other writers in between batches.
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not purge old webhook deliveries");
                    break;
                }
            }
        }
        if deliveries > 0 || events > 0 {
            metrics::counter!("switchboard_webhook_deliveries_purged_total").increment(deliveries);
            tracing::info!(
                deliveries,
                events,
                "purged webhook deliveries and events past their retention"
            );
        }
    }
}
