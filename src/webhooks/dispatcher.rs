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
//! 3. **Record** the outcome in a second short transaction, conditional on still holding the
//!    lease (`WebhookStore::record_attempt`), with its effects on the endpoint's health.
//!
//! The dispatcher wakes at once when this process commits deliveries (the store's outbox
//! signal), when another instance does (PostgreSQL `LISTEN switchboard_deliveries`), when an
//! attempt finishes (a slot frees up), when the next retry falls due, and at least every
//! `SWITCHBOARD_WEBHOOK_POLL_INTERVAL` (deliveries written by other processes on SQLite). On
//! shutdown it stops claiming, lets attempts in flight finish within the grace period, then
//! interrupts the rest and hands their deliveries back (due at once, not counted as failures).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::config::{Config, DatabaseUrl};
use crate::crypto::{AAD_SIGNING_SECRET, SecretBox};
use switchboard_domain::clock::SharedClock;
use switchboard_store::SharedStore;
use switchboard_store::webhooks::{
    AttemptOutcome, AttemptRecord, AttemptRecorded, ClaimRequest, ClaimedDelivery, Disposition,
};

use super::url_safety::{self, DnsFailure, Policy, SafeResolver, UnsafeTarget};
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
/// The PostgreSQL notification channel.
pub const CHANNEL: &str = "switchboard_deliveries";
/// How many attempts may await the recording of their outcome, per slot of concurrency. An
/// attempt frees its slot (and its endpoint's) when its request is over, not when its outcome
/// is recorded: the recorder writes outcomes in batches, and the slots stay busy sending.
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
    /// Attempts made or in flight whose outcome is not recorded yet (bounds the recorder's
    /// queue: [`UNRECORDED_FACTOR`] times the concurrency).
    unrecorded: Arc<Semaphore>,
    capacity: usize,
    /// Notified when an attempt finishes (a slot is free).
    freed: Notify,
    in_flight: Mutex<HashMap<i64, usize>>,
    wake: Arc<Notify>,
    postgres_url: Option<String>,
    recorder: mpsc::UnboundedSender<ToRecord>,
}

/// The delivery HTTP client: safe resolver, no redirects, no proxy, HTTP/1.1.
///
/// Idle connections are kept per host up to [`IDLE_PER_HOST`]: many endpoints often share
/// one host (an integration platform, a company's gateway), and a smaller pool than the
/// attempts in flight to it would close and reopen connections under load.
pub fn http_client(policy: Policy, timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(SafeResolver::new(policy)))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .tcp_nodelay(true)
        .user_agent(USER_AGENT)
        .build()
        .expect("the webhook HTTP client builds")
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
        tokio::spawn(recorder(store.clone(), recorder_rx));
        Arc::new(Dispatcher {
            recorder: recorder_tx,
            wake: store.outbox_signal(),
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
            postgres_url: match &config.database_url {
                DatabaseUrl::Postgres { url } => Some(url.clone()),
                DatabaseUrl::Sqlite { .. } => None,
            },
        })
    }

    /// Runs until `shutdown`, then drains (see the module documentation).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let attempts = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        if let Some(url) = self.postgres_url.clone() {
            tokio::spawn(listen(url, self.wake.clone(), shutdown.clone()));
        }
        tracing::info!(
            concurrency = self.global.available_permits(),
            per_endpoint = self.per_endpoint,
            "webhook dispatcher started"
        );
        // Under load, claim in batches: once attempts are in flight, wait until a few slots
        // are free (or new work arrives) instead of one claim transaction per finished attempt.
        let low_water = (self.capacity / 8).clamp(1, 16);
        let mut eager = true;
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            let available = self
                .global
                .available_permits()
                .min(self.unrecorded.available_permits());
            let free = available.min(CLAIM_BATCH);
            let idle = self.global.available_permits() == self.capacity;
            let mut claimed = 0;
            let eligible = free > 0 && (eager || idle || available >= low_water);
            if eligible {
                match self.claim(free).await {
                    Ok(batch) => {
                        failures = 0;
                        claimed = batch.len();
                        for d in batch {
                            let permit = self
                                .global
                                .clone()
                                .try_acquire_owned()
                                .expect("only the dispatcher loop takes permits");
                            let pending = self
                                .unrecorded
                                .clone()
                                .try_acquire_owned()
                                .expect("only the dispatcher loop takes permits");
                            let this = self.clone();
                            let stop = hard_stop.clone();
                            attempts.spawn(async move {
                                this.clone().deliver(d, stop, permit).await;
                                drop(pending);
                                this.freed.notify_one();
                            });
                        }
                    }
                    Err(e) => {
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
            if claimed > 0 && self.global.available_permits() > 0 {
                eager = true;
                continue; // more may be due (and saturated endpoints are now excluded)
            }
            let wait = if !eligible || claimed > 0 {
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
            hard_stop.cancel();
            let _ = tokio::time::timeout(HANDBACK_TIME, attempts.wait()).await;
        }
        tracing::info!("webhook dispatcher stopped");
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
        let now = self.clock.now();
        let in_flight = self.in_flight.lock().unwrap().clone();
        let batch = self
            .store
            .claim_deliveries(&ClaimRequest {
                token: Uuid::new_v4(),
                now,
                lease_until: now.saturating_add(self.timeout + LEASE_MARGIN),
                limit,
                per_endpoint: self.per_endpoint,
                in_flight,
            })
            .await?;
        let mut map = self.in_flight.lock().unwrap();
        for d in &batch {
            *map.entry(endpoint_key(d)).or_default() += 1;
        }
        Ok(batch)
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
                metrics::counter!("webhook_attempts_total", "outcome" => outcome_label(&disposition))
                    .increment(1);
                metrics::histogram!("webhook_attempt_duration_seconds")
                    .record(clock_start.elapsed().as_secs_f64());
                if disposition == Disposition::Delivered {
                    metrics::histogram!("webhook_delivery_lag_seconds")
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

    /// Records an outcome, retrying a few times if the database is briefly unavailable. If it
    /// cannot be recorded, the lease expires and another attempt is made.
    /// Records an outcome through the recorder (which batches outcomes into one transaction
    /// under load) and logs what happened.
    async fn record(&self, outcome: AttemptOutcome, d: &ClaimedDelivery) {
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
                if endpoint_disabled {
                    metrics::counter!("webhook_endpoints_disabled_total").increment(1);
                    tracing::warn!(
                        endpoint_uuid = ?d.endpoint.as_ref().map(|e| e.uuid),
                        "webhook endpoint disabled after consecutive failed deliveries"
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

    /// Makes the HTTP request of one attempt.
    async fn attempt(&self, d: &ClaimedDelivery) -> AttemptResult {
        let Some(endpoint) = d.endpoint.as_ref().filter(|e| !e.deleted) else {
            return AttemptResult::error(
                delivery::ENDPOINT_DELETED,
                delivery::ENDPOINT_DELETED_MESSAGE.into(),
            );
        };
        let url = match url_safety::check_url(&endpoint.url, self.policy) {
            Ok(u) => u,
            Err(e) => {
                return AttemptResult::error(
                    "unsafe_target",
                    format!("The endpoint URL is not allowed: {e}."),
                );
            }
        };
        // A legacy webhook record has no secret: its deliveries are unsigned (specification
        // 6.3.3; see docs/legacy.md).
        let secret = match endpoint.legacy {
            true => None,
            false => match self
                .secrets
                .open(&endpoint.sealed_secret, AAD_SIGNING_SECRET)
            {
                Ok(s) => Some(String::from_utf8_lossy(&s).into_owned()),
                Err(e) => {
                    tracing::error!(endpoint_uuid = %endpoint.uuid, error = %e, "cannot open a signing secret");
                    return AttemptResult::error(
                        "secret_unavailable",
                        "The endpoint's signing secret could not be read; the attempt was not made."
                            .into(),
                    );
                }
            },
        };
        let body = match serde_json::to_vec(&d.event.envelope()) {
            Ok(b) => b,
            Err(e) => {
                return AttemptResult::error(
                    "internal_error",
                    format!("cannot encode the event: {e}"),
                );
            }
        };
        let timestamp = self.clock.now().unix_seconds();
        let mut req = self.client.post(url);
        for (name, value) in &endpoint.headers {
            req = req.header(name.as_str(), value.as_str());
        }
        let mut req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Switchboard-Event", d.event.name.as_str())
            .header("X-Switchboard-Delivery", d.uuid.to_string())
            .header("X-Switchboard-Attempt", d.attempt.to_string());
        if let Some(secret) = &secret {
            req = req
                .header("X-Switchboard-Timestamp", timestamp.to_string())
                .header(
                    "X-Switchboard-Signature",
                    signing::signature_header(secret, timestamp, &body),
                );
        }
        let req = req.body(body);

        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut resp = match tokio::time::timeout_at(deadline, req.send()).await {
            Err(_) => return AttemptResult::timeout(self.timeout),
            Ok(Err(e)) => return AttemptResult::from_transport(&e, self.timeout),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let retry_after = if retry::honours_retry_after(status.as_u16()) {
            resp.headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::parse_retry_after(v, self.clock.now()))
        } else {
            None
        };
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(url_safety::redacted);
        let mut buf = Vec::new();
        let _ = tokio::time::timeout_at(deadline, read_capped(&mut resp, &mut buf)).await;
        drop(resp);
        let excerpt = excerpt(&buf);
        let reason = status.canonical_reason().unwrap_or("");
        let (code, message) = match retry::classify_status(status.as_u16()) {
            StatusClass::Success => (None, None),
            _ if status.is_redirection() => (
                Some("redirect_not_followed"),
                Some(format!(
                    "The endpoint answered {} {reason}{}; redirects are not followed. Point the endpoint at the final URL.",
                    status.as_u16(),
                    location.map(|l| format!(" (to {l})")).unwrap_or_default()
                )),
            ),
            _ => (
                Some("http_error"),
                Some(format!(
                    "The endpoint answered {} {reason}.",
                    status.as_u16()
                )),
            ),
        };
        AttemptResult {
            status: Some(status.as_u16()),
            error_code: code,
            error_message: message,
            excerpt,
            retry_after,
        }
    }
}

/// An outcome waiting to be recorded, and who waits for the result.
struct ToRecord {
    outcome: AttemptOutcome,
    reply: oneshot::Sender<Option<AttemptRecorded>>,
}

/// Records outcomes as they come, up to [`RECORD_BATCH`] per transaction: one transaction per
/// attempt when the load is light, fewer and larger ones under load. A batch that fails is
/// retried a few times (the database may be briefly unavailable), then recorded outcome by
/// outcome so that one bad outcome cannot hold the others back.
async fn recorder(store: SharedStore, mut rx: mpsc::UnboundedReceiver<ToRecord>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < RECORD_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let outcomes: Vec<AttemptOutcome> = batch.iter().map(|b| b.outcome.clone()).collect();
        let mut pause = Duration::from_millis(100);
        let mut results = None;
        for i in 0..6 {
            match store.record_attempts(outcomes.clone()).await {
                Ok(r) => {
                    results = Some(r);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, try_ = i + 1, outcomes = outcomes.len(), "could not record delivery attempts");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
        match results {
            Some(results) => {
                for (b, r) in batch.into_iter().zip(results) {
                    let _ = b.reply.send(Some(r));
                }
            }
            None => {
                for b in batch {
                    let r = store.record_attempt(b.outcome).await.ok();
                    let _ = b.reply.send(r);
                }
            }
        }
    }
}

fn endpoint_key(d: &ClaimedDelivery) -> i64 {
    d.endpoint.as_ref().map(|e| e.id).unwrap_or(0)
}

fn outcome_label(d: &Disposition) -> &'static str {
    match d {
        Disposition::Delivered => "delivered",
        Disposition::RetryAt(_) => "retry",
        Disposition::Failed => "failed",
        Disposition::Exhausted => "retries_exhausted",
        Disposition::Interrupted(_) => "interrupted",
    }
}

/// Reads at most [`READ_LIMIT`] bytes of a body into `buf`.
async fn read_capped(resp: &mut reqwest::Response, buf: &mut Vec<u8>) {
    while buf.len() < READ_LIMIT {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = READ_LIMIT - buf.len();
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
}

/// The first KiB of a body as text (cut at a character boundary).
pub fn excerpt(body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_LIMIT + 4)]);
    let mut end = text.len().min(EXCERPT_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

/// What one attempt produced.
#[derive(Debug)]
struct AttemptResult {
    status: Option<u16>,
    error_code: Option<&'static str>,
    error_message: Option<String>,
    excerpt: Option<String>,
    retry_after: Option<Duration>,
}

impl AttemptResult {
    fn error(code: &'static str, message: String) -> Self {
        AttemptResult {
            status: None,
            error_code: Some(code),
            error_message: Some(message),
            excerpt: None,
            retry_after: None,
        }
    }

    fn timeout(limit: Duration) -> Self {
        Self::error(
            "timeout",
            format!(
                "No complete answer within {}.",
                switchboard_domain::time::format_duration(limit)
            ),
        )
    }

    fn from_transport(e: &reqwest::Error, limit: Duration) -> Self {
        let (code, message) = classify_transport(e);
        if code == "timeout" {
            return Self::timeout(limit);
        }
        Self::error(code, message)
    }
}

/// Classifies a failure to get an answer: `dns_failed`, `unsafe_target`, `timeout`,
/// `connection_closed` or `connection_failed`.
fn classify_transport(e: &reqwest::Error) -> (&'static str, String) {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(u) = s.downcast_ref::<UnsafeTarget>() {
            return (
                "unsafe_target",
                format!("{u}; webhooks are only sent to public internet addresses."),
            );
        }
        if let Some(d) = s.downcast_ref::<DnsFailure>() {
            return ("dns_failed", format!("The host name did not resolve: {d}."));
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                TimedOut => return ("timeout", String::new()),
                ConnectionRefused => {
                    return ("connection_failed", "The connection was refused.".into());
                }
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    return (
                        "connection_closed",
                        "The connection was closed before a complete answer.".into(),
                    );
                }
                _ => {}
            }
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return (
                "connection_closed",
                "The connection was closed before a complete answer.".into(),
            );
        }
        source = s.source();
    }
    if e.is_timeout() {
        return ("timeout", String::new());
    }
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    // reqwest's messages name the URL, which may carry a token in its query: drop it.
    let detail = detail
        .split(" for url (")
        .next()
        .unwrap_or_default()
        .chars()
        .take(400)
        .collect::<String>();
    (
        "connection_failed",
        format!("Could not get an answer: {detail}."),
    )
}

/// PostgreSQL: wakes the dispatcher when any instance commits deliveries.
async fn listen(url: String, wake: Arc<Notify>, stop: CancellationToken) {
    loop {
        match sqlx::postgres::PgListener::connect(&url).await {
            Ok(mut listener) => match listener.listen(CHANNEL).await {
                Ok(()) => {
                    tracing::debug!("listening for webhook deliveries of other instances");
                    // Deliveries committed while not listening are found by the next poll.
                    wake.notify_one();
                    loop {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            n = listener.recv() => match n {
                                Ok(_) => wake.notify_one(),
                                Err(e) => {
                                    tracing::warn!(error = %e, "lost the PostgreSQL LISTEN connection; reconnecting");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot LISTEN for webhook deliveries"),
            },
            Err(e) => tracing::warn!(error = %e, "cannot connect to LISTEN for webhook deliveries"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_at_most_one_kib_and_valid_text() {
        assert_eq!(excerpt(b""), None);
        assert_eq!(excerpt(b"ok").as_deref(), Some("ok"));
        let long = "é".repeat(2000);
        let e = excerpt(long.as_bytes()).unwrap();
        assert!(e.len() <= EXCERPT_LIMIT && e.len() >= EXCERPT_LIMIT - 1);
        assert!(e.chars().all(|c| c == 'é'));
        let binary = vec![0xffu8; 5000];
        assert!(excerpt(&binary).unwrap().len() <= EXCERPT_LIMIT);
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_private_addresses() {
        // `localhost` resolves to a loopback address: the strict resolver drops it, so the
        // connection is never made and the error says why.
        let client = http_client(Policy::default(), Duration::from_secs(5));
        let e = client
            .post("http://localhost:9/hook")
            .send()
            .await
            .unwrap_err();
        let (code, message) = classify_transport(&e);
        assert_eq!(code, "unsafe_target", "{message}");

        let client = http_client(Policy::default(), Duration::from_secs(5));
        let e = client
            .post("http://does-not-exist.invalid/hook")
            .send()
            .await
            .unwrap_err();
        assert_eq!(classify_transport(&e).0, "dns_failed");
    }

    #[tokio::test]
    async fn connection_failures_are_classified() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = http_client(
            Policy {
                allow_private: true,
            },
            Duration::from_secs(5),
        );
        let e = client
            .post(format!("http://127.0.0.1:{port}/hook?token=secret"))
            .send()
            .await
            .unwrap_err();
        let (code, message) = classify_transport(&e);
        assert_eq!(code, "connection_failed", "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
}
