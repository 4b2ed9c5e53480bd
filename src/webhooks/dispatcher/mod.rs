//! The dispatcher: turns due deliveries into signed HTTP requests, inside `serve`.
//!
//! 1. **Claim** due deliveries in a short transaction (`WebhookStore::claim_deliveries`): a
//!    lease (a token and an expiry of `timeout + LEASE_MARGIN`) so that several instances never
//!    make the same attempt and a crashed instance's deliveries are taken over when its leases
//!    expire. Claims respect the global concurrency (`SWITCHBOARD_WEBHOOK_CONCURRENCY`) and the
//!    per-endpoint concurrency (`SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY`): deliveries of an
//!    endpoint that is at its limit are not claimed to start at once, so a slow endpoint holds
//!    at most its own slots and never starves the others. A claim also takes deliveries
//!    **ahead** of the free slots (up to [`AHEAD_FACTOR`] times the slots, and as many per
//!    endpoint) for the endpoints that answered an attempt within [`QUICK`] in the last
//!    [`QUICK_WINDOW`]: they wait in this instance and start, with no claim transaction, as
//!    slots free up (`pump`), in claim order within each endpoint's limit. They are leased like
//!    the others; one whose lease no longer covers an attempt (`timeout + START_MARGIN`: the
//!    endpoint slowed down) is handed back, and so is every waiting delivery at shutdown
//!    (`WebhookStore::hand_back`: as it was before the claim, no attempt counted). A slow or
//!    new endpoint gets no claim ahead, so a crash never leaves more of its deliveries leased
//!    than were in flight.
//!    **Hand-offs** fill the same room without a claim: the dispatcher publishes its room as the
//!    store's offer (`room.rs`), and a transaction that writes deliveries leases those the offer
//!    takes to this instance and hands them over after its commit (`switchboard_store::handoff`).
//!    A freed slot makes a claim only while due deliveries may be waiting (`more_due`).
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
mod brokers;
mod client_cert;
mod oauth;
mod recording;
mod room;
mod slots;
mod throttling;

use recording::{ToRecord, outcome_label};
use slots::{Slots, endpoint_key};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::crypto::{AAD_SIGNING_SECRET, SecretBox};
use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;
use switchboard_store::webhooks::{AttemptOutcome, AttemptRecord, ClaimedDelivery, Disposition};

use super::throttle::Throttle;
use crate::shared_redis::SharedRedis;
use crate::url_safety::Policy;
use switchboard_domain::webhooks::delivery;
use switchboard_domain::webhooks::retry::{self, StatusClass};
use switchboard_domain::webhooks::signing;

/// How long a lease outlives the attempt's own time limit (time to record the outcome).
pub const LEASE_MARGIN: Duration = Duration::from_secs(10);
/// A waiting delivery starts only while its lease outlasts the attempt's time limit by this
/// much (time to record the outcome); otherwise it is handed back.
pub const START_MARGIN: Duration = Duration::from_secs(5);
/// A throttled attempt starts at most this long after its slot, else it takes a new one: the
/// 10 % margin of the throttle's spacing (100 ms over any `max_per_second` slots) keeps room
/// for this and for the request's way to the receiver.
pub const THROTTLE_LATE: Duration = Duration::from_millis(25);
/// How many deliveries a claim may take ahead of the free slots, per slot (globally and per
/// endpoint): one more round of attempts.
pub const AHEAD_FACTOR: usize = 1;
/// An endpoint gets claims ahead while it answered an attempt within `QUICK`...
pub const QUICK: Duration = Duration::from_secs(1);
/// ...in the last `QUICK_WINDOW`.
pub const QUICK_WINDOW: Duration = Duration::from_secs(5);
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
    /// Notified when an attempt finishes (a slot is free) and when its outcome (other than a
    /// delivery) is recorded: the claim loop then looks at the next due time again.
    freed: Notify,
    /// The deliveries this instance holds: waiting for a slot or in flight.
    slots: Mutex<Slots>,
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
    /// Whether due deliveries may be waiting for a claim: set by every wake-up and timer (new
    /// deliveries, retries and expired leases come with one), kept by a claim that filled its
    /// room or left endpoints at their limit, cleared by one that found less than it asked for.
    /// A slot freed while it is clear makes no claim (deliveries handed off as they are written
    /// leave claims little to find).
    more_due: AtomicBool,
    /// When the next unclaimed delivery is due, as last read (`None`: read it again). Wake-ups,
    /// claims and outcomes other than a delivery forget it; a freed slot alone does not.
    next_due: Mutex<Option<Option<switchboard_domain::Timestamp>>>,
    /// Under load, claims wait until this many slots are free (an eighth of the slots, 1 to 16).
    low_water: usize,
    attempts: TaskTracker,
    /// Cancelled after the grace period: attempts still in flight hand their deliveries back.
    hard_stop: CancellationToken,
    /// Spreads the attempts of endpoints with `max_per_second`.
    throttle: Throttle,
    /// Open connections to broker destinations, by target URL.
    brokers: brokers::Connections,
    /// OAuth2 access tokens of endpoints, until they expire.
    tokens: oauth::Tokens,
    /// The certificate authorities deliveries trust besides the built-in roots.
    roots: Vec<reqwest::Certificate>,
    /// The clients of endpoints with `auth` mtls, each presenting its certificate.
    client_certs: client_cert::Clients,
    /// Deliveries written leased to this instance, as the store's writers commit them
    /// (`room.rs`).
    handoff: switchboard_store::handoff::Handoff,
}

impl Dispatcher {
    pub fn new(
        config: &Config,
        store: SharedStore,
        secrets: SecretBox,
        clock: SharedClock,
        redis: Option<SharedRedis>,
    ) -> Arc<Dispatcher> {
        let policy = Policy {
            allow_private: config.webhook_allow_private_targets,
        };
        let (recorder_tx, recorder_rx) = mpsc::unbounded_channel();
        Arc::new(Dispatcher {
            recorder: recorder_tx,
            outcomes: Mutex::new(Some(recorder_rx)),
            wake: store.wakeups(),
            handoff: store.handoff(),
            store,
            secrets,
            clock,
            client: http_client(policy, config.webhook_timeout, &config.webhook_ca_roots),
            roots: config.webhook_ca_roots.clone(),
            client_certs: client_cert::Clients::default(),
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
            slots: Mutex::new(Slots {
                open: true,
                ..Slots::default()
            }),
            claiming: tokio::sync::Mutex::new(()),
            claims_open: AtomicBool::new(true),
            more_due: AtomicBool::new(true),
            next_due: Mutex::new(None),
            low_water: (config.webhook_concurrency / 8).clamp(1, 16),
            attempts: TaskTracker::new(),
            hard_stop: CancellationToken::new(),
            brokers: brokers::Connections::default(),
            tokens: oauth::Tokens::default(),
            throttle: match redis {
                Some(r) => Throttle::shared(r),
                None => Throttle::local(),
            },
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
        let handed = self
            .handoff
            .receiver()
            .map(|rx| tokio::spawn(self.clone().receive_handed(rx)));
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
            let room = self.claim_room(eager);
            let limit = room.0 + room.1;
            let mut claimed = 0;
            // A slot that frees up is worth a claim only when due deliveries may be waiting
            // (see `more_due`); anything newly due comes with a wake-up or a timer.
            let asked = limit > 0 && (eager || self.more_due.load(Ordering::SeqCst));
            if asked {
                match self.claim(room).await {
                    Ok(batch) => {
                        failures = 0;
                        claimed = batch.len();
                        self.launch(batch);
                        self.note_claimed(limit, claimed);
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
            self.publish_offer();
            if claimed > 0 && self.global.available_permits() > 0 {
                eager = true;
                continue; // more may be due (and saturated endpoints are now excluded)
            }
            let wait = if limit == 0 || claimed > 0 {
                self.poll_interval
            } else {
                self.until_next_due(!asked).await
            };
            eager = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => true,
                _ = self.freed.notified() => false,
                _ = tokio::time::sleep(wait) => true,
            };
            if eager {
                // Something may have become due: claim, and read the next due time again.
                self.more_due.store(true, Ordering::SeqCst);
                self.forget_next_due();
            }
        }
        {
            let _claiming = self.claiming.lock().await;
            self.claims_open.store(false, Ordering::SeqCst);
            self.handoff.offer(None);
        }
        self.hand_back_waiting().await;
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
        if let Some(handed) = handed {
            handed.abort();
        }
        tracing::info!("webhook dispatcher stopped");
    }

    /// How many deliveries to claim now: `(to start at once, ahead)`. At once: as many as there
    /// are free slots and room among the unrecorded outcomes; ahead (when an endpoint is
    /// quick): up to [`AHEAD_FACTOR`] times the slots waiting; at most [`CLAIM_BATCH`] in all.
    /// Under load (attempts in flight) a claim waits until there is room for a batch (an eighth
    /// of the slots free, or half of the room ahead) instead of one claim transaction per
    /// finished attempt; a wake-up (`eager`) claims at once only when slots are free. Called
    /// with `claiming` held.
    fn claim_room(&self, eager: bool) -> (usize, usize) {
        let (now, ahead) = self.room();
        let room = now + ahead;
        let idle = self.global.available_permits() == self.capacity;
        let batch = self.low_water.max(self.capacity * AHEAD_FACTOR / 2);
        if room > 0 && (idle || (eager && now > 0) || now >= self.low_water || room >= batch) {
            (now, ahead)
        } else {
            (0, 0)
        }
    }

    /// The room for deliveries `(to start at once, ahead)`, as [`Dispatcher::claim_room`]
    /// describes it, whatever the size of the batch.
    fn room(&self) -> (usize, usize) {
        let (waiting, any_quick) = {
            let slots = self.slots.lock().unwrap();
            (slots.waiting.len(), !slots.quick.is_empty())
        };
        let free = self.global.available_permits();
        let unrecorded = self.unrecorded.available_permits().saturating_sub(waiting);
        let now = free.min(unrecorded).min(CLAIM_BATCH);
        let ahead = if any_quick {
            (self.capacity * AHEAD_FACTOR)
                .saturating_sub(waiting)
                .min(unrecorded - now)
                .min(CLAIM_BATCH - now)
        } else {
            0
        };
        (now, ahead)
    }

    /// Takes claimed deliveries in: each waits for a slot (see `pump`). Called with `claiming`
    /// held, right after the claim.
    fn launch(self: &Arc<Self>, claims: Vec<ClaimedDelivery>) {
        if claims.is_empty() {
            return;
        }
        let ahead = claims.iter().filter(|d| d.ahead).count();
        metrics::counter!("switchboard_webhook_deliveries_claimed_ahead_total")
            .increment(ahead as u64);
        {
            let mut slots = self.slots.lock().unwrap();
            for d in claims {
                *slots.held.entry(endpoint_key(&d)).or_default() += 1;
                slots.waiting.push_back(d);
            }
        }
        self.pump();
    }

    /// Starts waiting deliveries, in claim order, while there are free slots, room among the
    /// unrecorded outcomes and room in their endpoints. Each attempt runs on a task of its own
    /// with its slot and its place among the unrecorded outcomes. A waiting delivery whose lease
    /// no longer covers an attempt is handed back instead.
    fn pump(self: &Arc<Self>) {
        let mut start = Vec::new();
        let mut stale = Vec::new();
        {
            let mut slots = self.slots.lock().unwrap();
            let now = self.clock.now();
            let mut i = 0;
            while slots.open && i < slots.waiting.len() {
                let key = endpoint_key(&slots.waiting[i]);
                let start_by =
                    now.saturating_add(self.timeout_of(&slots.waiting[i]) + START_MARGIN);
                if slots.waiting[i].lease_until < start_by {
                    let d = slots.waiting.remove(i).expect("in range");
                    slots.release(key, false);
                    stale.push(d);
                    continue;
                }
                if slots.running.get(&key).copied().unwrap_or(0) >= self.per_endpoint {
                    i += 1;
                    continue;
                }
                let Ok(slot) = self.global.clone().try_acquire_owned() else {
                    break;
                };
                let Ok(pending) = self.unrecorded.clone().try_acquire_owned() else {
                    break;
                };
                *slots.running.entry(key).or_default() += 1;
                let d = slots.waiting.remove(i).expect("in range");
                start.push((d, slot, pending));
            }
        }
        for (d, slot, pending) in start {
            let this = self.clone();
            let stop = self.hard_stop.clone();
            self.attempts.spawn(async move {
                this.clone().deliver(d, stop, slot).await;
                drop(pending);
                this.pump();
                this.freed.notify_one();
            });
        }
        if !stale.is_empty() {
            let this = self.clone();
            self.attempts
                .spawn(async move { this.hand_back(stale).await });
        }
        self.publish_offer();
    }

    /// At shutdown: nothing waiting starts any more, and every waiting delivery is handed back.
    async fn hand_back_waiting(&self) {
        let waiting: Vec<ClaimedDelivery> = {
            let mut slots = self.slots.lock().unwrap();
            slots.open = false;
            let waiting: Vec<ClaimedDelivery> = slots.waiting.drain(..).collect();
            for d in &waiting {
                slots.release(endpoint_key(d), false);
            }
            waiting
        };
        if !waiting.is_empty() {
            let _ = tokio::time::timeout(HANDBACK_TIME, self.hand_back(waiting)).await;
        }
    }

    /// Hands claims whose attempt never started back to the store: due again, no attempt
    /// counted. If that fails, their leases expire and they are taken over as interrupted.
    async fn hand_back(&self, claims: Vec<ClaimedDelivery>) {
        let n = claims.len();
        let claims = claims
            .into_iter()
            .map(|d| (d.id, d.token, d.claimed_from))
            .collect();
        match self.store.hand_back(claims, self.clock.now()).await {
            Ok(handed) => {
                metrics::counter!("switchboard_webhook_deliveries_handed_back_total")
                    .increment(handed);
                tracing::info!(
                    handed_back = handed,
                    "claimed deliveries that had not started were handed back"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, claims = n, "could not hand claimed deliveries back; their leases will expire")
            }
        }
    }

    pub(super) fn forget_next_due(&self) {
        *self.next_due.lock().unwrap() = None;
    }

    /// How long to wait for the next due delivery (at most the poll interval). One already due
    /// after a skipped claim (`skipped`: a retry fell due meanwhile) is claimed at once.
    async fn until_next_due(&self, skipped: bool) -> Duration {
        let known = *self.next_due.lock().unwrap();
        let next = match known {
            Some(next) => Ok(next),
            None => self.store.next_delivery_due().await.inspect(|next| {
                *self.next_due.lock().unwrap() = Some(*next);
            }),
        };
        match next {
            Ok(Some(t)) => {
                let now = self.clock.now();
                if t <= now && skipped {
                    self.more_due.store(true, Ordering::SeqCst);
                    Duration::ZERO
                } else if t <= now {
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

    async fn claim(
        &self,
        room: (usize, usize),
    ) -> switchboard_store::StoreResult<Vec<ClaimedDelivery>> {
        metrics::counter!("switchboard_webhook_claims_total", "with" => "alone").increment(1);
        self.store.claim_deliveries(&self.claim_request(room)).await
    }

    /// One attempt of one claimed delivery, then its outcome.
    async fn deliver(
        self: Arc<Self>,
        d: ClaimedDelivery,
        hard_stop: CancellationToken,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let key = endpoint_key(&d);
        if !self.wait_for_throttle(&d, &hard_stop).await {
            // No attempt: the slot is free again, and the delivery goes back as it was.
            drop(slot);
            self.slots.lock().unwrap().release(key, true);
            self.pump();
            self.freed.notify_one();
            self.hand_back(vec![d]).await;
            return;
        }
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
        {
            let mut slots = self.slots.lock().unwrap();
            slots.release(key, true);
            if key != 0 && result.is_some() && clock_start.elapsed() < QUICK {
                slots.quick.insert(key, Instant::now());
            }
        }
        self.pump();
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
                // The endpoint's own retry delays, or the deployment's.
                let own_delays = d.endpoint.as_ref().and_then(|e| e.controls.retry_delays());
                let class = if r.acked {
                    StatusClass::Success
                } else {
                    delivery::classify(r.status, r.error_code)
                };
                let disposition = delivery::disposition(
                    class,
                    d.attempt,
                    own_delays.as_deref().unwrap_or(&self.retry_delays),
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
        if disposition != Disposition::Delivered {
            // A retry (or a hand-back) may now be the next due. The claim loop may have read the
            // next due time before this outcome was committed (the slot freed when the request
            // ended) and be waiting a whole poll interval: let it read it again.
            self.forget_next_due();
            self.freed.notify_one();
        }
    }
}

pub use attempt::{excerpt, http_client};
