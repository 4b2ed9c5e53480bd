//! Recording attempt outcomes: one transaction per attempt under light load, batches of up to
//! [`RECORD_BATCH`] under load, with the next claim in the same transaction when one can be
//! made (`DeliveryStore::record_and_claim`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use switchboard_store::SharedStore;
use switchboard_store::webhooks::{
    AttemptOutcome, AttemptRecorded, ClaimedDelivery, DeliveryStatus, Disposition,
};

use super::{Dispatcher, RECORD_BATCH};

impl Dispatcher {
    /// Hands an outcome to the record loop, which records it (in a batch under load, with a
    /// claim when it can make one), and logs what happened. If it cannot be recorded, the lease
    /// expires and another attempt is made.
    pub(super) async fn record(&self, outcome: AttemptOutcome, d: &ClaimedDelivery) {
        let (reply, answer) = oneshot::channel();
        if self.recorder.send(ToRecord { outcome, reply }).is_err() {
            return;
        }
        match answer.await.ok().flatten() {
            Some(AttemptRecorded::Done {
                status,
                endpoint_disabled,
            }) => {
                tracing::debug!(delivery_id = %d.uuid, attempt = d.attempt, status = %status, "delivery attempt recorded");
                let endpoint_uuid = d.endpoint.as_ref().map(|e| e.uuid.to_string());
                if status == DeliveryStatus::RetriesExhausted {
                    // Never the URL (its query may hold a token) nor a secret.
                    tracing::warn!(
                        delivery_id = %d.uuid,
                        endpoint_uuid = endpoint_uuid.as_deref().unwrap_or("-"),
                        event = %d.event.name,
                        attempts = d.attempt,
                        "webhook delivery exhausted its retries"
                    );
                }
                if endpoint_disabled {
                    metrics::counter!("switchboard_webhook_endpoints_disabled_total").increment(1);
                    tracing::error!(
                        endpoint_uuid = endpoint_uuid.as_deref().unwrap_or("-"),
                        reason = %format!("{} consecutive failed deliveries", self.disable_after),
                        "webhook endpoint disabled automatically"
                    );
                }
            }
            Some(AttemptRecorded::LeaseLost) => {
                tracing::warn!(delivery_id = %d.uuid, attempt = d.attempt, "the lease of this attempt expired before its outcome was recorded; another instance took the delivery over");
            }
            None => {
                tracing::error!(delivery_id = %d.uuid, attempt = d.attempt, "could not record a delivery attempt; its lease will expire and the attempt will be made again");
            }
        }
    }
}

/// An outcome waiting to be recorded, and who waits for the result.
pub(super) struct ToRecord {
    outcome: AttemptOutcome,
    reply: oneshot::Sender<Option<AttemptRecorded>>,
}

impl Dispatcher {
    /// Records outcomes as they come, up to [`RECORD_BATCH`] per transaction: one transaction
    /// per attempt when the load is light, fewer and larger ones under load. When no claim is
    /// under way and slots are free (those of the attempts just finished), the same
    /// transaction claims the next deliveries (`DeliveryStore::record_and_claim`): one commit
    /// instead of two. Runs until the dispatcher has stopped (only recording once claims are
    /// closed at shutdown).
    pub(super) async fn record_loop(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<ToRecord>) {
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let claiming = self.claiming.try_lock().ok().filter(|_| {
                self.claims_open.load(Ordering::SeqCst) && self.more_due.load(Ordering::SeqCst)
            });
            let room = match &claiming {
                Some(_) => self.claim_room(false),
                None => (0, 0),
            };
            if room.0 + room.1 == 0 {
                drop(claiming);
                record_batch(&self.store, batch).await;
                continue;
            }
            let outcomes: Vec<AttemptOutcome> = batch.iter().map(|b| b.outcome.clone()).collect();
            let req = self.claim_request(room);
            metrics::counter!("switchboard_webhook_claims_total", "with" => "outcomes")
                .increment(1);
            match self.store.record_and_claim(outcomes, &req).await {
                Ok((results, claims)) => {
                    let claimed = claims.len();
                    self.launch(claims);
                    self.note_claimed(room.0 + room.1, claimed);
                    drop(claiming);
                    answer(batch, results);
                }
                Err(e) => {
                    drop(claiming);
                    tracing::warn!(error = %e, outcomes = batch.len(), "could not record delivery attempts with a claim; recording them alone");
                    record_batch(&self.store, batch).await;
                }
            }
        }
    }
}

/// Records a batch of outcomes in one transaction. A batch that fails is retried a few times
/// (the database may be briefly unavailable), then recorded outcome by outcome so that one bad
/// outcome cannot hold the others back.
async fn record_batch(store: &SharedStore, batch: Vec<ToRecord>) {
    let outcomes: Vec<AttemptOutcome> = batch.iter().map(|b| b.outcome.clone()).collect();
    let mut pause = Duration::from_millis(100);
    for i in 0..6 {
        match store.record_attempts(outcomes.clone()).await {
            Ok(results) => {
                answer(batch, results);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, try_ = i + 1, outcomes = outcomes.len(), "could not record delivery attempts");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
    for b in batch {
        let r = store.record_attempt(b.outcome).await.ok();
        let _ = b.reply.send(r);
    }
}

/// Gives each waiting attempt its result (in the order of the batch).
fn answer(batch: Vec<ToRecord>, results: Vec<AttemptRecorded>) {
    for (b, r) in batch.into_iter().zip(results) {
        let _ = b.reply.send(Some(r));
    }
}

pub(super) fn outcome_label(d: &Disposition) -> &'static str {
    match d {
        Disposition::Delivered => "delivered",
        Disposition::RetryAt(_) => "retry",
        Disposition::Failed => "failed",
        Disposition::Exhausted => "retries_exhausted",
        Disposition::Interrupted(_) => "interrupted",
    }
}
