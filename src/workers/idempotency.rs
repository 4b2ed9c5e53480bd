//! Expired idempotency records are deleted every `SWITCHBOARD_PURGE_INTERVAL`, in batches, so
//! that no statement holds the database for long.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;

/// How many expired idempotency records one purge statement deletes.
const BATCH: i64 = 1000;

pub async fn run(
    store: SharedStore,
    clock: SharedClock,
    interval: Duration,
    stop: CancellationToken,
) {
    super::every(interval, stop, || purge(&store, &clock)).await
}

async fn purge(store: &SharedStore, clock: &SharedClock) {
    let now = clock.now();
    let mut purged = 0u64;
    loop {
        match store.purge_idempotency(now, BATCH).await {
            Ok(n) => {
                purged += n;
                if n < BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not purge expired idempotency records");
                break;
            }
        }
    }
    if purged > 0 {
        tracing::info!(purged, "purged expired idempotency records");
    }
}
