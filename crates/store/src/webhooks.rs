//! Records and the storage interface of webhooks: endpoints, deliveries and attempts.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::event::NewEvent;
use switchboard_domain::webhooks::destination::DestinationType;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};

use super::{EffectsFn, StoreResult};

/// The delivery state machine is a domain rule (`after_attempt` decides what an outcome
/// changes); its status and the dispositions are re-exported here for the store's callers.
pub use switchboard_domain::webhooks::delivery::{DeliveryStatus, Disposition};

/// A webhook endpoint as stored. The signing secret is sealed (see `crypto::SecretBox`).
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub name: String,
    pub url: String,
    pub events: Vec<String>,
    pub headers: BTreeMap<String, String>,
    pub sealed_secret: Vec<u8>,
    pub status: EndpointStatus,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<Timestamp>,
    pub consecutive_failures: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// A legacy webhook record (`/api/webhooks`): no signing secret (`sealed_secret` is
    /// empty), deliveries unsigned, and a modern endpoint with the same URL takes precedence.
    pub legacy: bool,
    pub ordering: EndpointOrdering,
    pub controls: EndpointControls,
}

/// An endpoint's filter and its overrides of the deployment's delivery settings; `None`
/// everywhere by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointControls {
    /// The filter as JSON text, as given (the caller checked it with the domain's
    /// `Filter::parse`); `None`: every subscribed event.
    pub filter: Option<String>,
    /// The attempt time limit (ms); `None`: the deployment's.
    pub timeout_ms: Option<i64>,
    /// The delays between attempts (ms); `None`: the deployment's.
    pub retry_delays_ms: Option<Vec<i64>>,
    /// The most deliveries per second; `None`: no limit.
    pub max_per_second: Option<i64>,
    /// Where deliveries go: `Https` (to `url`) or a broker (to `target`).
    pub destination: DestinationType,
    /// A broker endpoint's target as answered: JSON text, its URL's credentials masked.
    pub target: Option<String>,
    /// A broker endpoint's full target URL, sealed (`AAD_TARGET_URL`) when it holds
    /// credentials; never answered.
    pub sealed_target_url: Option<Vec<u8>>,
    /// Authentication to an https endpoint as answered: JSON text without its secret.
    pub auth: Option<String>,
    /// The authentication's secret, sealed (`AAD_AUTH_SECRET`); never answered.
    pub sealed_auth_secret: Option<Vec<u8>>,
}

impl EndpointControls {
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    pub fn retry_delays(&self) -> Option<Vec<Duration>> {
        self.retry_delays_ms.as_ref().map(|ds| {
            ds.iter()
                .map(|ms| Duration::from_millis(u64::try_from(*ms).unwrap_or(0)))
                .collect()
        })
    }
}

/// A change to an endpoint's controls: `None` leaves a field as it is, `Some(None)` removes it.
#[derive(Clone, Debug, Default)]
pub struct ControlsPatch {
    pub filter: Option<Option<String>>,
    pub timeout_ms: Option<Option<i64>>,
    pub retry_delays_ms: Option<Option<Vec<i64>>>,
    pub max_per_second: Option<Option<i64>>,
    /// A broker endpoint's new target: (as answered, sealed full URL).
    pub target: Option<(String, Option<Vec<u8>>)>,
    /// New authentication (as answered, sealed secret); `Some(None)` removes it.
    pub auth: Option<Option<(String, Vec<u8>)>>,
}

impl ControlsPatch {
    /// The controls after this change.
    pub fn apply(self, old: &EndpointControls) -> EndpointControls {
        EndpointControls {
            filter: self.filter.unwrap_or_else(|| old.filter.clone()),
            timeout_ms: self.timeout_ms.unwrap_or(old.timeout_ms),
            retry_delays_ms: self
                .retry_delays_ms
                .unwrap_or_else(|| old.retry_delays_ms.clone()),
            max_per_second: self.max_per_second.unwrap_or(old.max_per_second),
            destination: old.destination,
            target: match &self.target {
                Some((t, _)) => Some(t.clone()),
                None => old.target.clone(),
            },
            sealed_target_url: match self.target {
                Some((_, sealed)) => sealed,
                None => old.sealed_target_url.clone(),
            },
            auth: match &self.auth {
                Some(a) => a.as_ref().map(|a| a.0.clone()),
                None => old.auth.clone(),
            },
            sealed_auth_secret: match self.auth {
                Some(a) => a.map(|a| a.1),
                None => old.sealed_auth_secret.clone(),
            },
        }
    }
}

#[derive(Clone, Debug)]
pub struct NewEndpoint {
    pub uuid: Uuid,
    pub org_id: i64,
    pub name: String,
    pub url: String,
    pub events: Vec<String>,
    pub headers: BTreeMap<String, String>,
    /// Empty for a legacy record.
    pub sealed_secret: Vec<u8>,
    pub status: EndpointStatus,
    pub now: Timestamp,
    /// A legacy webhook record (see [`EndpointRecord::legacy`]).
    pub legacy: bool,
    pub ordering: EndpointOrdering,
    pub controls: EndpointControls,
}

/// A change to an endpoint; `None` leaves a field as it is.
#[derive(Clone, Debug, Default)]
pub struct EndpointPatch {
    pub name: Option<String>,
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub headers: Option<BTreeMap<String, String>>,
    /// `Active` re-enables (resets the failure counter and resumes held deliveries);
    /// `Disabled` disables with `disabled_reason`.
    pub status: Option<EndpointStatus>,
    pub disabled_reason: Option<String>,
    /// A new sealed signing secret.
    pub sealed_secret: Option<Vec<u8>>,
    /// With a new secret: the current secret stays valid (deliveries are signed with it too)
    /// until this time, and secrets already retired keep their own end; `None` (no grace) is a
    /// cut-over: the current secret and every one retired earlier stop at once.
    pub retire_secret_until: Option<Timestamp>,
    pub ordering: Option<EndpointOrdering>,
    pub controls: ControlsPatch,
}

/// A delivery as the ledger shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub event_uuid: Uuid,
    pub event_name: String,
    pub endpoint_uuid: Option<Uuid>,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub response_status: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    pub delivered_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Whether an attempt is under way.
    pub in_flight: bool,
    /// How the delivery came to be: `event`, `manual`, `test` or `recovery`.
    pub trigger: String,
    /// The position in its contact's chain on an ordered endpoint (`X-Switchboard-Sequence`).
    pub sequence: Option<i64>,
}

/// One attempt of a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    pub number: i64,
    /// The URL the attempt was made to (endpoints can change their URL).
    pub url: Option<String>,
    pub started_at: Timestamp,
    /// `None` when the attempt was interrupted and its duration is unknown.
    pub duration_ms: Option<i64>,
    pub response_status: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// At most the first KiB of the response body.
    pub response_body_excerpt: Option<String>,
    /// The ids (`signing::secret_id`) of the secrets that signed the attempt; `None` when it
    /// was not signed (legacy records) or never made (interrupted before the request).
    pub signed_with: Option<Vec<String>>,
}

/// Which events a ledger query selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventFilter {
    Exact(String),
    Namespace(String),
}

/// A ledger query: filters, then newest first from `before`.
#[derive(Clone, Debug, Default)]
pub struct DeliveryQuery {
    pub status: Option<DeliveryStatus>,
    pub event: Option<EventFilter>,
    pub endpoint_uuid: Option<Uuid>,
    /// `created_at >= since`.
    pub since: Option<Timestamp>,
    /// `created_at < until`.
    pub until: Option<Timestamp>,
    /// Rows strictly before this `(created_at, id)` position.
    pub before: Option<(Timestamp, i64)>,
    pub limit: i64,
}

/// A request to claim due deliveries for this instance.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// Identifies this claim; recording the outcome requires it.
    pub token: Uuid,
    pub now: Timestamp,
    /// Until when the claim holds: after that, another instance may take the delivery over.
    /// A delivery to an endpoint whose own timeout is longer than `timeout` is leased that
    /// much longer.
    pub lease_until: Timestamp,
    /// The deployment's attempt time limit, on which `lease_until` is based.
    pub timeout: Duration,
    /// At most this many deliveries to attempt at once...
    pub limit: usize,
    /// ...at most this many per endpoint in this instance...
    pub per_endpoint: usize,
    /// ...counting those this instance already holds (claimed, in flight or waiting for a
    /// slot: endpoint id -> count).
    pub in_flight: HashMap<i64, usize>,
    /// Claims ahead of the free slots (prefetched), after those to attempt at once: `None`
    /// claims none.
    pub ahead: Option<ClaimAhead>,
}

impl ClaimRequest {
    /// Whether the claim asks for nothing (neither deliveries to start at once nor ahead).
    pub fn is_empty(&self) -> bool {
        self.limit == 0 && self.ahead.as_ref().is_none_or(|a| a.limit == 0)
    }
}

/// The part of a claim that goes ahead of the free slots: deliveries the dispatcher holds
/// ready and starts, with no claim transaction, as slots free up. They are leased like the
/// others.
#[derive(Clone, Debug)]
pub struct ClaimAhead {
    /// At most this many deliveries ahead...
    pub limit: usize,
    /// ...only to these endpoints, each at most this many beyond
    /// [`ClaimRequest::per_endpoint`] (endpoint id -> count).
    pub room: HashMap<i64, usize>,
}

/// What a claim changed besides its lease, so that a claim whose attempt never started can
/// be handed back exactly as it was (`DeliveryStore::hand_back`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedFrom {
    pub last_attempt_at: Option<Timestamp>,
    pub next_attempt_at: Option<Timestamp>,
}

/// The endpoint of a claimed delivery, as it is when claimed.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedEndpoint {
    pub id: i64,
    pub uuid: Uuid,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub sealed_secret: Vec<u8>,
    pub status: EndpointStatus,
    pub deleted: bool,
    /// A legacy webhook record: the delivery is sent unsigned.
    pub legacy: bool,
    /// Retired secrets still in their grace period (sealed), newest first: deliveries are
    /// signed with these too.
    pub retired_secrets: Vec<Vec<u8>>,
    /// The endpoint's time limit and retry delays (instead of the deployment's) and throttle.
    pub controls: EndpointControls,
}

/// A delivery claimed for one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedDelivery {
    pub id: i64,
    /// The claim's token (needed to record the outcome).
    pub token: Uuid,
    pub uuid: Uuid,
    pub org_id: i64,
    /// The one-based number of the attempt to make now.
    pub attempt: i64,
    pub event: NewEvent,
    /// The exact bytes of the event's envelope: the request body.
    pub envelope: String,
    /// `X-Switchboard-Sequence` on an ordered endpoint.
    pub sequence: Option<i64>,
    /// `None` when the delivery has no endpoint target.
    pub endpoint: Option<ClaimedEndpoint>,
    /// Until when this claim holds the delivery.
    pub lease_until: Timestamp,
    /// Claimed ahead of the free slots (see [`ClaimAhead`]).
    pub ahead: bool,
    /// The delivery before the claim (for a hand-back).
    pub claimed_from: ClaimedFrom,
}

/// One delivery a committed transaction wrote leased to this process (see [`crate::handoff`]).
#[derive(Clone, Debug)]
pub struct HandedDelivery {
    pub id: i64,
    pub endpoint_id: i64,
    /// Taken ahead of the free slots.
    pub ahead: bool,
    pub lease_until: Timestamp,
    /// When it was written (and due): unclaimed, it would be due then with no attempt made
    /// (what a hand-back restores).
    pub written_at: Timestamp,
    /// The delivery as a read-back would find it, built by the transaction that wrote it
    /// (which had its event and its endpoint in hand); `None` when that transaction did not
    /// know all of it (its endpoint has retired secrets in their grace period).
    pub claimed: Option<Box<ClaimedDelivery>>,
}

/// The deliveries one committed transaction handed to this process's dispatcher.
#[derive(Clone, Debug)]
pub struct Handed {
    pub token: Uuid,
    pub deliveries: Vec<HandedDelivery>,
}

impl Handed {
    /// The deliveries as claimed, when the writing transaction knew all of them: the
    /// dispatcher then attempts them at once, with no read-back (`DeliveryStore::read_handed`)
    /// between the commit and the attempt. Their leases were written by that transaction and
    /// are checked again when their outcomes are recorded, as a claim's are.
    pub fn claimed(&self) -> Option<Vec<ClaimedDelivery>> {
        self.deliveries
            .iter()
            .map(|d| d.claimed.as_deref().cloned())
            .collect()
    }
}

/// The outcome of one attempt, to record.
#[derive(Clone, Debug)]
pub struct AttemptOutcome {
    pub delivery_id: i64,
    pub token: Uuid,
    pub attempt: AttemptRecord,
    pub disposition: Disposition,
    pub now: Timestamp,
    /// Consecutive failed deliveries after which the endpoint is disabled.
    pub disable_after: u32,
}

/// What recording an outcome did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptRecorded {
    /// AttemptRecorded; the delivery's status is now this.
    Done {
        status: DeliveryStatus,
        /// The endpoint was disabled by this outcome.
        endpoint_disabled: bool,
    },
    /// The claim had expired and another instance took the delivery over: nothing recorded.
    LeaseLost,
}

/// What retention by partition dropped (PostgreSQL; SQLite has no partitions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DroppedPartitions {
    /// Partitions dropped (a deliveries partition goes with its attempts' and counts once).
    pub partitions: u64,
    pub deliveries: u64,
    pub events: u64,
}

/// Why a manual retry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryRefusal {
    /// The delivery's endpoint has been deleted.
    EndpointDeleted,
}

/// Webhook endpoints (and legacy webhook records, `EndpointRecord::legacy`).
#[async_trait]
pub trait EndpointStore: Send + Sync {
    async fn create_endpoint(
        &self,
        new: NewEndpoint,
        effects: EffectsFn<'_, EndpointRecord>,
    ) -> StoreResult<EndpointRecord>;
    /// The organization's endpoints (not deleted) of one kind (modern endpoints, or legacy
    /// records with `legacy`), newest first, from `before`.
    async fn list_endpoints(
        &self,
        org_id: i64,
        legacy: bool,
        before: Option<(Timestamp, i64)>,
        limit: i64,
    ) -> StoreResult<Vec<EndpointRecord>>;
    /// One endpoint of the organization, of either kind (see `EndpointRecord::legacy`);
    /// `NotFound` for another organization's or a deleted one.
    async fn get_endpoint(&self, org_id: i64, uuid: Uuid) -> StoreResult<EndpointRecord>;
    /// Changes an endpoint; `effects` gets the endpoint before and after.
    async fn update_endpoint(
        &self,
        org_id: i64,
        uuid: Uuid,
        patch: EndpointPatch,
        now: Timestamp,
        effects: EffectsFn<'_, (EndpointRecord, EndpointRecord)>,
    ) -> StoreResult<EndpointRecord>;
    /// Deletes an endpoint: it stops receiving, its unfinished deliveries end `failed`
    /// (`endpoint_deleted`), its secret is erased; the ledger keeps its deliveries.
    async fn delete_endpoint(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
        effects: EffectsFn<'_, EndpointRecord>,
    ) -> StoreResult<()>;
    /// Writes `event` (an `integration.test` event) and one delivery of it to this endpoint
    /// alone, whatever its subscriptions and status. Returns the delivery's UUID.
    async fn create_test_delivery(
        &self,
        org_id: i64,
        endpoint_uuid: Uuid,
        event: NewEvent,
        delivery_uuid: Uuid,
    ) -> StoreResult<Uuid>;
}

/// The dispatcher's side of deliveries: claims, the outcomes of attempts, the schedule.
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Claims due deliveries (see [`ClaimRequest`]): several instances never claim the same
    /// attempt; a claim whose lease expired is taken over (its attempt is logged as
    /// interrupted).
    async fn claim_deliveries(&self, req: &ClaimRequest) -> StoreResult<Vec<ClaimedDelivery>>;
    /// Records an attempt's outcome, if the claim still holds, with its effects on the
    /// delivery, the endpoint's health and the events it causes.
    async fn record_attempt(&self, outcome: AttemptOutcome) -> StoreResult<AttemptRecorded>;
    /// Records several outcomes in one transaction (as `record_attempt` each); the results are
    /// in the order of `outcomes`.
    async fn record_attempts(
        &self,
        outcomes: Vec<AttemptOutcome>,
    ) -> StoreResult<Vec<AttemptRecorded>>;
    /// Records `outcomes` (as `record_attempts`) and then claims (as `claim_deliveries`) in one
    /// transaction: one commit where there would be two (the dispatcher's record loop uses it
    /// when no other claim is under way). A chain whose head an outcome ended has its next
    /// delivery released before the claim, which may take it. Nothing is written if either part
    /// fails.
    async fn record_and_claim(
        &self,
        outcomes: Vec<AttemptOutcome>,
        claim: &ClaimRequest,
    ) -> StoreResult<(Vec<AttemptRecorded>, Vec<ClaimedDelivery>)>;
    /// Reads back the deliveries a committed transaction handed to this process's dispatcher
    /// (see [`crate::handoff`]): claimed deliveries, as a claim returns them (those no longer
    /// leased by the hand-off's token are left out).
    async fn read_handed(
        &self,
        handed: &Handed,
        now: Timestamp,
    ) -> StoreResult<Vec<ClaimedDelivery>>;
    /// Hands back claims whose attempt never started (`(delivery id, token, claimed from)`):
    /// each delivery is as it was before its claim (attempt count, schedule) and free to claim
    /// again at once; no attempt is logged. A claim that no longer holds its delivery is left
    /// alone. Returns how many were handed back.
    async fn hand_back(
        &self,
        claims: Vec<(i64, Uuid, ClaimedFrom)>,
        now: Timestamp,
    ) -> StoreResult<u64>;
    /// When the next unclaimed delivery becomes due (`None`: nothing scheduled). Claimed ones
    /// are not counted: this instance's claims end with their outcomes, and another's expired
    /// leases are found by the dispatcher's periodic poll.
    async fn next_delivery_due(&self) -> StoreResult<Option<Timestamp>>;
    /// The backlog at `now`: how many deliveries are due (or overdue), and the oldest due time.
    async fn delivery_backlog(&self, now: Timestamp) -> StoreResult<(i64, Option<Timestamp>)>;
}

/// The delivery ledger: deliveries with their attempts, manual retries, the purge.
#[async_trait]
pub trait LedgerStore: Send + Sync {
    async fn list_deliveries(
        &self,
        org_id: i64,
        query: &DeliveryQuery,
    ) -> StoreResult<Vec<DeliveryRecord>>;
    /// One delivery of the organization with its attempts (oldest first) and its event.
    async fn get_delivery(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<(DeliveryRecord, Vec<AttemptRecord>, NewEvent)>;
    /// Schedules an attempt of the delivery now (a finished one becomes `pending` again). A
    /// delivery with an attempt in flight is left as it is.
    async fn retry_delivery(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
    ) -> StoreResult<Result<DeliveryRecord, RetryRefusal>>;
    /// Deletes up to `batch` deliveries created before `cutoff` (with their attempts), then up
    /// to `batch` outbox events older than `cutoff` that no delivery refers to. Returns how many
    /// rows of each were deleted. On PostgreSQL with partitioned tables
    /// ([`LedgerStore::partition_for_retention`]) only rows outside the range partitions
    /// (written before partitioning, or in the default partition) go this way: the rest go
    /// whole with their partition ([`LedgerStore::drop_expired_partitions`]).
    async fn purge_deliveries(&self, cutoff: Timestamp, batch: i64) -> StoreResult<(u64, u64)>;
    /// Retention by partition (`domain::webhooks::retention`; PostgreSQL with partitioned
    /// tables; otherwise, and on SQLite, it drops nothing): starts a new live partition where the live one's oldest row is `span`
    /// old, then drops every closed partition whose rows are all older than `cutoff` and
    /// unheld (deliveries with their attempts; events once no delivery refers to them).
    async fn drop_expired_partitions(
        &self,
        now: Timestamp,
        cutoff: Timestamp,
        span: Duration,
    ) -> StoreResult<DroppedPartitions>;
    /// Partitions events, deliveries and attempts for retention (PostgreSQL, once; the
    /// operator's `SWITCHBOARD_RETENTION_PARTITIONS`): returns whether this call converted them
    /// (`false`: already partitioned). SQLite: refused (`StoreError::Conflict`).
    async fn partition_for_retention(&self) -> StoreResult<bool>;
}
