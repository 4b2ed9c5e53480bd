//! Recovery after an outage (CONVENTIONS "Recovery, replay and the event feed"): recoveries
//! (durable jobs that re-queue an endpoint's missing events), bulk redelivery, and the event
//! feed.

use async_trait::async_trait;
use uuid::Uuid;

use switchboard_domain::Timestamp;

use super::StoreResult;
use super::webhooks::{DeliveryStatus, EventFilter};

/// A recovery to start.
#[derive(Clone, Debug)]
pub struct NewRecovery {
    pub uuid: Uuid,
    pub org_id: i64,
    pub endpoint_uuid: Uuid,
    pub since: Timestamp,
    pub until: Timestamp,
    pub now: Timestamp,
}

/// The status of a recovery (the `status` of [`RecoveryRecord`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryStatus {
    /// Pages are still being recovered.
    Running,
    /// Every page was recovered.
    Completed,
    /// Stopped: its endpoint was deleted or disabled meanwhile (`error` says which).
    Failed,
}

impl RecoveryStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            RecoveryStatus::Running => "running",
            RecoveryStatus::Completed => "completed",
            RecoveryStatus::Failed => "failed",
        }
    }
}

/// A recovery as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryRecord {
    pub uuid: Uuid,
    pub org_id: i64,
    pub endpoint_uuid: Uuid,
    pub since: Timestamp,
    pub until: Timestamp,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub events_matched: i64,
    pub deliveries_queued: i64,
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

/// A recovery claimed by this instance (with a lease) to walk its next pages.
#[derive(Clone, Debug)]
pub struct ClaimedRecovery {
    pub id: i64,
    pub uuid: Uuid,
    /// The claim's token: each page is written only while it still holds.
    pub token: Uuid,
}

/// What walking one page did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryStep {
    /// A page was done; more may follow.
    Page { matched: i64, queued: i64 },
    /// The window is done (after this page): the recovery is `completed`.
    Completed { matched: i64, queued: i64 },
    /// The recovery ended `failed` (its endpoint was deleted or disabled meanwhile).
    Failed(String),
    /// The lease was lost: another instance took the recovery over. Nothing was written.
    LeaseLost,
}

/// The filters of a bulk redelivery.
#[derive(Clone, Debug, Default)]
pub struct BulkRetry {
    pub status: Option<DeliveryStatus>,
    pub event: Option<EventFilter>,
    pub endpoint_uuid: Option<Uuid>,
    /// `created_at >= since`.
    pub since: Option<Timestamp>,
    /// `created_at < until`.
    pub until: Option<Timestamp>,
}

/// A position in the event feed: after this event. On PostgreSQL `txid` is the writing
/// transaction (events are served in (txid, id) order, only once their transaction is older
/// than every running one); on SQLite it is 0 and the id, in commit order, is the position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FeedPosition {
    pub txid: i64,
    pub id: i64,
}

/// One event of the feed: its position and the exact bytes of its envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedItem {
    pub position: FeedPosition,
    pub envelope: String,
}

#[async_trait]
pub trait RecoveryStore: Send + Sync {
    /// Starts a recovery of an endpoint of the organization (`NotFound` for another's or a
    /// deleted one). The caller has checked the window and that the endpoint is active.
    async fn create_recovery(&self, new: NewRecovery) -> StoreResult<RecoveryRecord>;
    /// A recovery of the organization's endpoint.
    async fn get_recovery(
        &self,
        org_id: i64,
        endpoint_uuid: Uuid,
        uuid: Uuid,
    ) -> StoreResult<RecoveryRecord>;
    /// Claims a `running` recovery that no instance holds (or whose lease expired), with a
    /// lease until `lease_until`.
    async fn claim_recovery(
        &self,
        token: Uuid,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> StoreResult<Option<ClaimedRecovery>>;
    /// Walks the next `page` events of the claimed recovery's window (oldest first) in one
    /// transaction, which also records the progress and renews the lease: each event that the
    /// endpoint's current subscriptions match is counted, and gets a new delivery (`trigger:
    /// recovery`) unless the endpoint already has one of it that is `delivered`, `pending` or
    /// `retrying`. Test events and `webhook.*` events about this endpoint are skipped.
    async fn recover_page(
        &self,
        claim: &ClaimedRecovery,
        page: i64,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> StoreResult<RecoveryStep>;
    /// Redelivers now every matching delivery of the organization that is not `delivered`,
    /// not in flight and whose endpoint exists (`trigger: manual`), one statement per page of
    /// `page`. Deliveries waiting behind an earlier one of their contact's chain (ordered
    /// endpoints) keep waiting: they follow in order. Returns how many.
    async fn retry_deliveries(
        &self,
        org_id: i64,
        filter: &BulkRetry,
        now: Timestamp,
        page: i64,
    ) -> StoreResult<u64>;
    /// The organization's events after `after` (oldest first), at most `limit`, optionally only
    /// those `events` selects (see [`FeedPosition`] for the order). Test events are not in the
    /// feed.
    async fn read_feed(
        &self,
        org_id: i64,
        after: FeedPosition,
        events: &[EventFilter],
        limit: i64,
    ) -> StoreResult<Vec<FeedItem>>;
}
