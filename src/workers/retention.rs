//! Retention (`SWITCHBOARD_DELIVERY_RETENTION`, 90 days by default): deliveries older than the
//! retention are deleted with their attempts, and so are outbox events older than it that no
//! delivery refers to.
//!
//! On PostgreSQL with partitioned tables (`SWITCHBOARD_RETENTION_PARTITIONS`,
//! `domain::webhooks::retention`) each purge first starts new partitions where the live one is a
//! span old and drops the closed partitions past the retention whole. Every other row (plain
//! tables, SQLite's, rows written before partitioning) is deleted in batches, each in its own
//! short transaction, so the purge never holds long locks.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchboard_domain::clock::SharedClock;
use switchboard_domain::webhooks::retention;
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
        let now = self.clock.now();
        let cutoff = now.saturating_sub(self.retention);
        let (mut deliveries, mut events, mut partitions) = (0u64, 0u64, 0u64);
        let span = retention::partition_span(self.retention);
        match self.store.drop_expired_partitions(now, cutoff, span).await {
            Ok(d) => (deliveries, events, partitions) = (d.deliveries, d.events, d.partitions),
            Err(e) => tracing::warn!(error = %e, "could not drop partitions past the retention"),
        }
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
        if deliveries > 0 || events > 0 || partitions > 0 {
            metrics::counter!("switchboard_webhook_deliveries_purged_total").increment(deliveries);
            tracing::info!(
                deliveries,
                events,
                partitions,
                "purged webhook deliveries and events past their retention"
            );
        }
    }
}
