//! The background work of `serve`, one module per periodic job; `serve` starts them in
//! `app::serve` as a list of what runs. The long-running engines keep their own modules (the
//! webhook dispatcher and recovery in `webhooks`, the send and campaign workers in `ops`) and
//! are started beside these.
//!
//! * [`retention`]: deliveries, attempts and outbox events past `SWITCHBOARD_DELIVERY_RETENTION`;
//! * [`idempotency`]: expired idempotency records;
//! * [`gauges`]: the webhook backlog and send queue as gauges, and the storage probe while
//!   writes fail;
//! * [`template_sync`]: WhatsApp template catalogues from their Business Accounts.

pub mod gauges;
pub mod idempotency;
pub mod retention;
pub mod template_sync;

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Runs `job` every `interval`, the first time at once, until `stop` is cancelled; a run in
/// progress is abandoned when it is (each job's writes are transactions of their own, so an
/// abandoned run leaves nothing half done). A run that overruns delays the next tick instead
/// of bunching them.
pub async fn every<F, Fut>(interval: Duration, stop: CancellationToken, mut job: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = job() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_at_once_then_every_interval_until_stopped() {
        let runs = Arc::new(AtomicU32::new(0));
        let stop = CancellationToken::new();
        let counted = runs.clone();
        let task = tokio::spawn(every(Duration::from_secs(10), stop.clone(), move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the first run is at once");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "then one per interval");
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_in_progress_ends_with_the_stop() {
        let stop = CancellationToken::new();
        let task = tokio::spawn(every(Duration::from_secs(1), stop.clone(), || {
            std::future::pending::<()>()
        }));
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the worker ends with its stop")
            .unwrap();
    }
}
