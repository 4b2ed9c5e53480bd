//! Every few seconds: the webhook backlog as gauges, so that a growing queue can be alerted on
//! (`switchboard_webhook_deliveries_due`, `switchboard_webhook_oldest_due_seconds`), the send
//! queue (`switchboard_send_queue_messages`); and while writes fail (a full disk), a small
//! write, so that `switchboard_storage_writable` comes back to 1 when space is freed even if
//! nothing else writes.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;

const INTERVAL: Duration = Duration::from_secs(5);

pub async fn run(store: SharedStore, clock: SharedClock, stop: CancellationToken) {
    super::every(INTERVAL, stop, || read(&store, &clock)).await
}

async fn read(store: &SharedStore, clock: &SharedClock) {
    let now = clock.now();
    if switchboard_store::health::write_fault().is_some()
        && let Err(e) = store.probe_write(now).await
    {
        tracing::debug!(error = %e, "writes still fail");
    }
    match store.delivery_backlog(now).await {
        Ok((due, oldest)) => {
            metrics::gauge!("switchboard_webhook_deliveries_due").set(due as f64);
            let age = oldest.map(|t| now.since(t).as_secs_f64()).unwrap_or(0.0);
            metrics::gauge!("switchboard_webhook_oldest_due_seconds").set(age);
        }
        Err(e) => tracing::debug!(error = %e, "could not read the webhook backlog"),
    }
    match store.queued_count().await {
        Ok(n) => metrics::gauge!("switchboard_send_queue_messages").set(n as f64),
        Err(e) => tracing::debug!(error = %e, "could not read the send queue"),
    }
}
