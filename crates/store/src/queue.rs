//! Batch sends and the durable send queue: messages recorded `queued` (a batch's items, or a
//! send that pacing or the provider's throttling put off) that a worker sends later.
//!
//! A queued message has one `send_queue` row until it is sent or failed. Workers claim due rows
//! with a lease (a fresh token and an expiry); right before calling the provider a worker marks
//! the row *in flight* in a transaction of its own, so that a worker taking over an expired
//! lease knows whether the provider may already have the message (a status callback that
//! echoes the message's uuid settles it: `report_provider_id`). The outcome (the message's status,
//! provider id or error, its journey steps, its events) is written with the removal of the row,
//! under the lease, in one transaction: a claim that lost its lease writes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;
use switchboard_domain::message::MessageStatus;

use crate::{EffectsFn, MessageRecord, MessageStep, NewOutbound, RecordedOutbound, StoreResult};

/// The effects of each item of a batch.
pub type ItemEffectsFn<'a> = Box<dyn Fn(&RecordedOutbound) -> Effects + Send + Sync + 'a>;

/// Where a message recorded `queued` waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueEntry {
    /// The batch it belongs to.
    pub batch_id: Option<i64>,
    /// Not sent before this time.
    pub not_before: Timestamp,
}

/// A new batch (its items are the `NewOutbound`s recorded with it).
#[derive(Clone, Debug)]
pub struct NewBatch {
    pub uuid: Uuid,
    pub org_id: i64,
    pub api_key_id: Option<i64>,
    pub now: Timestamp,
}

/// A batch as stored, with its items counted by status.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub total: i64,
    /// Items by message status (`queued`, `sent`, `delivered`, `read`, `failed`).
    pub counts: BTreeMap<String, i64>,
    /// Items claimed by a worker right now (still `queued`).
    pub in_progress: i64,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

/// A queued message claimed by a worker.
#[derive(Clone, Debug)]
pub struct ClaimedSend {
    pub message: MessageRecord,
    /// The lease's token: every later step of this claim names it.
    pub token: Uuid,
    /// Earlier claims of this message (0 on the first).
    pub attempts: i64,
    /// An earlier claim marked it in flight and never recorded an outcome: the provider may
    /// have it.
    pub was_in_flight: bool,
    /// When that earlier claim called the provider.
    pub in_flight_at: Option<Timestamp>,
    /// The provider id a status callback reported for it while it was in flight (the
    /// provider echoed the message's uuid): the provider has it.
    pub reported_provider_message_id: Option<String>,
    pub batch_id: Option<i64>,
}

/// What a worker's send of a queued message came to.
#[derive(Clone, Debug)]
pub struct QueuedOutcome {
    /// `sent` (or what the provider said) or `failed`.
    pub status: MessageStatus,
    pub provider_message_id: Option<String>,
    pub error: Option<Value>,
    /// The journey's steps of this send (the provider request and response); the store adds
    /// the status step.
    pub steps: Vec<MessageStep>,
    pub now: Timestamp,
}

/// Whether a claim still held its lease when it wrote.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseResult<T> {
    Done(T),
    /// Another worker took the message over (the lease expired): nothing was written.
    Lost,
}

#[async_trait]
pub trait SendQueueStore: Send + Sync {
    /// Records a batch and its items (each `NewOutbound` carries its [`QueueEntry`], whose
    /// `batch_id` the store fills in) in one transaction, with the completion of the request's
    /// idempotency claim (the batch record is kept for replay) and each item's effects
    /// (`contact.created`, `conversation.created`).
    async fn record_batch(
        &self,
        batch: NewBatch,
        items: Vec<NewOutbound>,
        completion: Option<crate::ClaimToken>,
        item_effects: ItemEffectsFn<'_>,
    ) -> StoreResult<(BatchRecord, Vec<RecordedOutbound>)>;

    /// The organization's batch, with its counts.
    async fn find_batch(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<BatchRecord>>;

    /// Claims up to `limit` due queued messages (`not_before <= now`, no live lease), oldest
    /// first, each with a lease of `lease`.
    async fn claim_queued(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: i64,
    ) -> StoreResult<Vec<ClaimedSend>>;

    /// Puts a claimed message off until `not_before` (pacing, throttling), releasing the lease;
    /// `attempted` counts a provider attempt.
    async fn defer_queued(
        &self,
        message_id: i64,
        token: Uuid,
        not_before: Timestamp,
        attempted: bool,
    ) -> StoreResult<LeaseResult<()>>;

    /// Puts a claimed message that was in flight when its instance stopped off until `until`
    /// (the provider's status callback may still report it), releasing the lease; the message
    /// stays in flight.
    async fn await_outcome(
        &self,
        message_id: i64,
        token: Uuid,
        until: Timestamp,
    ) -> StoreResult<LeaseResult<()>>;

    /// A status callback reported `provider_message_id` for the channel's message `uuid`: when
    /// that message is queued and in flight, the id is kept with it (the provider has the
    /// message), and a message waiting for its outcome becomes due at once. Whether it was.
    async fn report_provider_id(
        &self,
        channel_id: i64,
        uuid: Uuid,
        provider_message_id: &str,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// Marks a claimed message in flight (committed before the provider call).
    async fn mark_in_flight(
        &self,
        message_id: i64,
        token: Uuid,
        now: Timestamp,
    ) -> StoreResult<LeaseResult<()>>;

    /// Records the outcome of a claimed message and removes it from the queue, with its
    /// effects (`message.sent`), in one transaction; completes its batch when it was the last.
    async fn finish_queued(
        &self,
        message_id: i64,
        token: Uuid,
        outcome: QueuedOutcome,
        effects: EffectsFn<'_, MessageRecord>,
    ) -> StoreResult<LeaseResult<MessageRecord>>;

    /// How many messages wait in the queue (due or not).
    async fn queued_count(&self) -> StoreResult<i64>;
}
