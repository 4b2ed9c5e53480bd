//! The dispatcher: turns due deliveries into signed HTTP requests, inside `serve`.
//!
//! 1. **Claim** due deliveries in a short transaction (`WebhookStore::claim_deliveries`): a
//!    lease (a token and an expiry of `timeout + LEASE_MARGIN`) so that several instances never
//!    make the same attempt and a crashed instance's deliveries are taken over when its leases
//!    expire. Claims respect the global concurrency (`SWITCHBOARD_WEBHOOK_CONCURRENCY`) and the
//!    per-endpoint concurrency (`SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY`): deliveries of an
//!    endpoint that is at its limit are not claimed, so a slow endpoint holds at most its own
//!    slots and never starves the others.
//! 2. **Send** each attempt outside any transaction: a signed POST through a client whose DNS
//!    resolver keeps only public addresses (connecting to the checked address), with no
//!    redirects and no proxy, within `SWITCHBOARD_WEBHOOK_TIMEOUT`.
//! 3. **Record** the outcome, conditional on still holding the lease, with its effects on the
//!    endpoint's health (`WebhookStore::record_attempts`): the record loop (`recording.rs`)
//!    writes outcomes in batches, and when no other claim is under way it claims the next
//!    deliveries for the slots those attempts freed in the same transaction
//!    (`WebhookStore::record_and_claim`), one commit instead of two. A claim running beside a
//!    recording is worth more than the saved commit on PostgreSQL (docs/benchmarks.md), so the
//!    record loop never waits for the claim lock.
//!
//! The dispatcher wakes at once when this process commits deliveries (the store's outbox
//! signal), when another instance does (on PostgreSQL: the store listens to its `NOTIFY`; both
//! come through `Store::wakeups`), when an
//! attempt finishes (a slot frees up), when the next retry falls due, and at least every
//! `SWITCHBOARD_WEBHOOK_POLL_INTERVAL` (deliveries written by other processes on SQLite). On
//! shutdown it stops claiming, lets attempts in flight finish within the grace period, then
//! interrupts the rest and hands their deliveries back (due at once, not counted as failures).

mod attempt;
mod recording;

use recording::{ToRecord, outcome_label};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::config::Config;
use crate::crypto::{AAD_SIGNING_SECRET, SecretBox};
use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;
use switchboard_store::webhooks::{
    AttemptOutcome, AttemptRecord, ClaimRequest, ClaimedDelivery, Disposition,
};

use super::url_safety::Policy;
use switchboard_domain::webhooks::delivery;
use switchboard_domain::webhooks::retry::{self, StatusClass};
use switchboard_domain::webhooks::signing;

/// How long a lease outlives the attempt's own time limit (time to record the outcome).
pub const LEASE_MARGIN: Duration = Duration::from_secs(10);
/// How long, after the grace period, interrupted attempts have to hand their deliveries back.
pub const HANDBACK_TIME: Duration = Duration::from_secs(5);
/// The most outcomes recorded in one transaction.
pub const RECORD_BATCH: usize = 64;
/// The most deliveries claimed in one transaction.
pub const CLAIM_BATCH: usize = 100;
/// How much of a response body is read (the rest is not read).
pub const READ_LIMIT: usize = 16 * 1024;
/// How much of a response body is kept in the attempt log.
pub const EXCERPT_LIMIT: usize = 1024;
/// How many attempts may await the recording of their outcome, per slot of concurrency. An
/// attempt frees its slot (and its endpoint's) when its request is over, not when its outcome
/// is recorded: the record loop writes outcomes in batches, and the slots stay busy sending.
pub const UNRECORDED_FACTOR: usize = 4;
/// Idle connections kept per host by the delivery client.
pub const IDLE_PER_HOST: usize = 64;
/// The `User-Agent` of deliveries.
pub const USER_AGENT: &str = concat!("Switchboard-Webhooks/", env!("CARGO_PKG_VERSION"));

/// Everything an attempt needs.
pub struct Dispatcher {
    store: SharedStore,
    secrets: SecretBox,
    clock: SharedClock,
    client: reqwest::Client,
    policy: Policy,
    timeout: Duration,
    retry_delays: Vec<Duration>,
    disable_after: u32,
    per_endpoint: usize,
    poll_interval: Duration,
    grace: Duration,
    global: Arc<Semaphore>,
    /// Attempts made or in flight whose outcome is not recorded yet (bounds the record loop's
    /// queue: [`UNRECORDED_FACTOR`] times the concurrency).
    unrecorded: Arc<Semaphore>,
    capacity: usize,
    /// Notified when an attempt finishes (a slot is free).
    freed: Notify,
    in_flight: Mutex<HashMap<i64, usize>>,
    wake: switchboard_store::Wakeups,
    /// Where attempts send their outcomes; the record loop records them, with a claim when it
    /// can make one.
    recorder: mpsc::UnboundedSender<ToRecord>,
    /// The record loop's end of `recorder`, taken when the dispatcher starts running.
    outcomes: Mutex<Option<mpsc::UnboundedReceiver<ToRecord>>>,
    /// Held while claiming and starting the claimed attempts: the claim loop and the record
    /// loop both claim, one at a time.
    claiming: tokio::sync::Mutex<()>,
    /// Cleared (under `claiming`) when the dispatcher stops claiming at shutdown.
    claims_open: AtomicBool,
    /// Under load, claims wait until this many slots are free (an eighth of the slots, 1 to 16).
    low_water: usize,
    attempts: TaskTracker,
    /// Cancelled after the grace period: attempts still in flight hand their deliveries back.
    hard_stop: CancellationToken,
}

impl Dispatcher {
    pub fn new(
        config: &Config,
        store: SharedStore,
        secrets: SecretBox,
        clock: SharedClock,
    ) -> Arc<Dispatcher> {
        let policy = Policy {
            allow_private: config.webhook_allow_private_targets,
        };
        let (recorder_tx, recorder_rx) = mpsc::unbounded_channel();
        Arc::new(Dispatcher {
            recorder: recorder_tx,
            outcomes: Mutex::new(Some(recorder_rx)),
            wake: store.wakeups(),
            store,
            secrets,
            clock,
            client: http_client(policy, config.webhook_timeout),
            policy,
            timeout: config.webhook_timeout,
            retry_delays: config.webhook_retry_delays.clone(),
            disable_after: config.webhook_disable_after,
            per_endpoint: config.webhook_endpoint_concurrency,
            poll_interval: config.webhook_poll_interval,
            grace: config.shutdown_grace,
            global: Arc::new(Semaphore::new(config.webhook_concurrency)),
            unrecorded: Arc::new(Semaphore::new(
                config.webhook_concurrency * UNRECORDED_FACTOR,
            )),
            capacity: config.webhook_concurrency,
            freed: Notify::new(),
            in_flight: Mutex::new(HashMap::new()),
            claiming: tokio::sync::Mutex::new(()),
            claims_open: AtomicBool::new(true),
            low_water: (config.webhook_concurrency / 8).clamp(1, 16),
            attempts: TaskTracker::new(),
            hard_stop: CancellationToken::new(),
        })
    }

    /// Runs until `shutdown`, then drains (see the module documentation).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let outcomes = self
            .outcomes
            .lock()
            .unwrap()
            .take()
            .expect("the dispatcher runs once");
        let recording = tokio::spawn(self.clone().record_loop(outcomes));
        tracing::info!(
            concurrency = self.global.available_permits(),
            per_endpoint = self.per_endpoint,
            "webhook dispatcher started"
        );
        let mut eager = true;
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            // Claims are made one at a time (here or with a batch of outcomes in the record
            // loop), each from the room left by the ones before.
            let claiming = self.claiming.lock().await;
            let limit = self.claim_limit(eager);
            let mut claimed = 0;
            if limit > 0 {
                match self.claim(limit).await {
                    Ok(batch) => {
                        failures = 0;
                        claimed = batch.len();
                        self.launch(batch);
                    }
                    Err(e) => {
                        drop(claiming);
                        failures += 1;
                        tracing::warn!(error = %e, "could not claim webhook deliveries; retrying");
                        let pause = Duration::from_millis(200 * u64::from(failures.min(25)));
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(pause) => continue,
                        }
                    }
                }
            }
            drop(claiming);
            if claimed > 0 && self.global.available_permits() > 0 {
                eager = true;
                continue; // more may be due (and saturated endpoints are now excluded)
            }
            let wait = if limit == 0 || claimed > 0 {
                self.poll_interval
            } else {
                self.until_next_due().await
            };
            eager = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => true,
                _ = self.freed.notified() => false,
                _ = tokio::time::sleep(wait) => true,
            };
        }
        {
            let _claiming = self.claiming.lock().await;
            self.claims_open.store(false, Ordering::SeqCst);
        }
        let attempts = &self.attempts;
        attempts.close();
        if !attempts.is_empty() {
            tracing::info!(
                in_flight = attempts.len(),
                "webhook dispatcher stopping: no new claims; waiting for attempts in flight"
            );
        }
        if tokio::time::timeout(self.grace, attempts.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = attempts.len(),
                "attempts still in flight after the grace period; handing their deliveries back"
            );
            self.hard_stop.cancel();
            let _ = tokio::time::timeout(HANDBACK_TIME, attempts.wait()).await;
        }
        // Every attempt has had its outcome recorded (or the hand-back time is over).
        recording.abort();
        tracing::info!("webhook dispatcher stopped");
    }

    /// How many deliveries to claim now: as many as there are free slots and room among the
    /// unrecorded outcomes (at most [`CLAIM_BATCH`]). Under load (not `eager`, attempts in
    /// flight) a claim waits until a few slots are free instead of one claim transaction per
    /// finished attempt. Called with `claiming` held.
    fn claim_limit(&self, eager: bool) -> usize {
        let available = self
            .global
            .available_permits()
            .min(self.unrecorded.available_permits());
        let idle = self.global.available_permits() == self.capacity;
        if available > 0 && (eager || idle || available >= self.low_water) {
            available.min(CLAIM_BATCH)
        } else {
            0
        }
    }

    /// Starts an attempt for each claimed delivery, each with its slot and its place among
    /// the unrecorded outcomes. Called with `claiming` held, right after the claim.
    fn launch(self: &Arc<Self>, claims: Vec<ClaimedDelivery>) {
        for d in claims {
            let permit = self
                .global
                .clone()
                .try_acquire_owned()
                .expect("claims are sized to the free slots under the claiming lock");
            let pending = self
                .unrecorded
                .clone()
                .try_acquire_owned()
                .expect("claims are sized to the free slots under the claiming lock");
            let this = self.clone();
            let stop = self.hard_stop.clone();
            self.attempts.spawn(async move {
                this.clone().deliver(d, stop, permit).await;
                drop(pending);
                this.freed.notify_one();
            });
        }
    }

    async fn until_next_due(&self) -> Duration {
        match self.store.next_delivery_due().await {
            Ok(Some(t)) => {
                let now = self.clock.now();
                if t <= now {
                    // Due but not claimable now (their endpoints are at their limit): an
                    // attempt finishing wakes the loop.
                    self.poll_interval
                } else {
                    t.since(now).min(self.poll_interval)
                }
            }
            _ => self.poll_interval,
        }
    }

    async fn claim(&self, limit: usize) -> switchboard_store::StoreResult<Vec<ClaimedDelivery>> {
        metrics::counter!("switchboard_webhook_claims_total", "with" => "alone").increment(1);
        let batch = self
            .store
            .claim_deliveries(&self.claim_request(limit))
            .await?;
        self.claimed(&batch);
        Ok(batch)
    }

    /// A claim of up to `limit` deliveries now, within each endpoint's room in this instance.
    fn claim_request(&self, limit: usize) -> ClaimRequest {
        let now = self.clock.now();
        ClaimRequest {
            token: Uuid::new_v4(),
            now,
            lease_until: now.saturating_add(self.timeout + LEASE_MARGIN),
            limit,
            per_endpoint: self.per_endpoint,
            in_flight: self.in_flight.lock().unwrap().clone(),
        }
    }

    /// Counts claimed deliveries against their endpoints' room.
    fn claimed(&self, batch: &[ClaimedDelivery]) {
        let mut map = self.in_flight.lock().unwrap();
        for d in batch {
            *map.entry(endpoint_key(d)).or_default() += 1;
        }
    }

    fn release_slot(&self, key: i64) {
        let mut map = self.in_flight.lock().unwrap();
        if let Some(n) = map.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&key);
            }
        }
    }

    /// One attempt of one claimed delivery, then its outcome.
    async fn deliver(
        self: Arc<Self>,
        d: ClaimedDelivery,
        hard_stop: CancellationToken,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let key = endpoint_key(&d);
        let token = d.token;
        let started = self.clock.now();
        let clock_start = Instant::now();
        let result = tokio::select! {
            r = self.attempt(&d) => Some(r),
            _ = hard_stop.cancelled() => None,
        };
        // The request is over: its slot and its endpoint's are free for the next claims (this
        // delivery stays leased until its outcome is recorded).
        drop(slot);
        self.release_slot(key);
        self.freed.notify_one();
        let now = self.clock.now();
        let duration_ms = i64::try_from(clock_start.elapsed().as_millis()).unwrap_or(i64::MAX);
        let url = d.endpoint.as_ref().map(|e| e.url.clone());
        let (attempt, disposition) = match result {
            None => (
                AttemptRecord {
                    number: d.attempt,
                    url,
                    started_at: started,
                    duration_ms: None,
                    response_status: None,
                    error_code: Some("attempt_interrupted".into()),
                    error_message: Some(
                        "The instance shut down during this attempt; the delivery was handed back."
                            .into(),
                    ),
                    response_body_excerpt: None,
                    signed_with: None,
                },
                Disposition::Interrupted(now),
            ),
            Some(r) => {
                let disposition = delivery::disposition(
                    delivery::classify(r.status, r.error_code),
                    d.attempt,
                    &self.retry_delays,
                    r.retry_after,
                    rand::random::<f64>(),
                    now,
                );
                metrics::counter!("switchboard_webhook_attempts_total", "outcome" => outcome_label(&disposition))
                    .increment(1);
                metrics::histogram!("switchboard_webhook_attempt_duration_seconds")
                    .record(clock_start.elapsed().as_secs_f64());
                if disposition == Disposition::Delivered {
                    metrics::histogram!("switchboard_webhook_delivery_lag_seconds")
                        .record(now.since(d.event.occurred_at).as_secs_f64());
                }
                (
                    AttemptRecord {
                        number: d.attempt,
                        url,
                        started_at: started,
                        duration_ms: Some(duration_ms),
                        response_status: r.status.map(i64::from),
                        error_code: r.error_code.map(str::to_owned),
                        error_message: r.error_message,
                        response_body_excerpt: r.excerpt,
                        signed_with: r.signed_with,
                    },
                    disposition,
                )
            }
        };
        let outcome = AttemptOutcome {
            delivery_id: d.id,
            token,
            attempt,
            disposition,
            now,
            disable_after: self.disable_after,
        };
        self.record(outcome, &d).await;
    }
}

fn endpoint_key(d: &ClaimedDelivery) -> i64 {
    d.endpoint.as_ref().map(|e| e.id).unwrap_or(0)
}

pub use attempt::{excerpt, http_client};
