//! The recovery worker, inside `serve`: claims a running recovery (a lease, so one instance
//! walks it at a time and a crashed instance's recovery is taken over when the lease expires)
//! and walks its window a page per transaction (`RecoveryStore::recover_page`, which records the
//! progress with the page: a page is done entirely or not at all).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;
use switchboard_store::recovery::RecoveryStep;

/// How long a claim holds a recovery without renewal (each page renews it).
pub const LEASE: Duration = Duration::from_secs(5);

pub struct RecoveryWorker {
    pub store: SharedStore,
    pub clock: SharedClock,
    pub page_size: i64,
    /// A pause between two pages.
    pub page_interval: Duration,
    pub poll_interval: Duration,
    /// Notified when a recovery is started in this process.
    pub wake: Arc<Notify>,
}

impl RecoveryWorker {
    pub async fn run(self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let token = Uuid::now_v7();
            let now = self.clock.now();
            match self
                .store
                .claim_recovery(token, now, now.saturating_add(LEASE))
                .await
            {
                Ok(Some(claim)) => {
                    tracing::info!(recovery_id = %claim.uuid, "recovery started");
                    loop {
                        if shutdown.is_cancelled() {
                            // The lease expires and another instance (or this one, restarted)
                            // goes on from the last page done.
                            return;
                        }
                        let now = self.clock.now();
                        match self
                            .store
                            .recover_page(&claim, self.page_size, now, now.saturating_add(LEASE))
                            .await
                        {
                            Ok(RecoveryStep::Page { .. }) => {
                                if !self.page_interval.is_zero() {
                                    tokio::select! {
                                        _ = shutdown.cancelled() => return,
                                        _ = tokio::time::sleep(self.page_interval) => {}
                                    }
                                }
                            }
                            Ok(RecoveryStep::Completed { .. }) => {
                                tracing::info!(recovery_id = %claim.uuid, "recovery completed");
                                break;
                            }
                            Ok(RecoveryStep::Failed(reason)) => {
                                tracing::warn!(recovery_id = %claim.uuid, reason, "recovery failed");
                                break;
                            }
                            Ok(RecoveryStep::LeaseLost) => break,
                            Err(e) => {
                                tracing::warn!(recovery_id = %claim.uuid, error = %e, "recovery page failed; retrying");
                                tokio::time::sleep(Duration::from_millis(500)).await;
                            }
                        }
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot claim a recovery"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.poll_interval) => {}
            }
        }
    }
}
