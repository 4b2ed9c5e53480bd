//! Records of the messaging aggregate (conversations, messages) and of idempotency.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::contact::{Contact, Conversation};
use switchboard_domain::event::Effects;
use switchboard_domain::message::timeline::StepKind;
use switchboard_domain::message::{Direction, MessageStatus, MessageType};
use switchboard_domain::phone::Phone;

/// A message as stored, with what the API shows of its channel, contact and conversation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MessageRecord {
    pub id: i64,
    pub uuid: Uuid,
    pub org_id: i64,
    pub channel: ChannelIdentity,
    pub contact_id: i64,
    pub contact_uuid: Uuid,
    pub conversation_id: Option<i64>,
    pub conversation_uuid: Option<Uuid>,
    /// The API key that sent it (outbound through the API).
    pub api_key_id: Option<i64>,
    pub direction: Direction,
    pub message_type: MessageType,
    pub status: MessageStatus,
    /// The type-specific content (shown under the key named by `message_type`).
    pub content: Value,
    pub provider_message_id: Option<String>,
    /// Why the message failed: `{"code", "message", ...provider details}`.
    pub error: Option<Value>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The consent evidence the message was sent under (catalog template sends).
    pub consent_uuid: Option<Uuid>,
    /// The W3C `traceparent` of the request that sent it or the callback that brought it.
    pub trace: Option<String>,
    /// Inbound: `reply_to`, `forwarded`, `frequently_forwarded`, `referral`.
    pub context: Option<switchboard_domain::message::InboundContext>,
    /// When the customer edited the message.
    pub edited_at: Option<Timestamp>,
    /// When the customer deleted the message (its content is then null).
    pub deleted_at: Option<Timestamp>,
    /// Outbound WhatsApp: the last `pricing` reported.
    pub pricing: Option<Value>,
    /// Outbound WhatsApp: the last conversation reported (`{"id", "origin", "expires_at"}`).
    pub provider_conversation: Option<Value>,
}

/// One step of a message's journey (see `switchboard_domain::message::timeline`); the first
/// steps are kept in `messages.journey` as a JSON array of these.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MessageStep {
    pub at: Timestamp,
    pub kind: StepKind,
    pub detail: Value,
}

/// Who an outbound message goes to.
#[derive(Clone, Debug)]
pub enum RecipientRef {
    /// An existing contact of the organization, by id.
    Contact(i64),
    /// A phone number: the organization's contact with it, created if there is none.
    Phone(Phone),
}

/// What an outbound message does to the conversation of its contact and channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConversationPolicy {
    /// Continue the open conversation, or open one.
    OpenOrContinue,
    /// Continue the open conversation if there is one; never open one.
    ContinueIfOpen,
}

#[derive(Clone, Debug)]
pub struct NewOutbound {
    pub org_id: i64,
    /// The channel it goes out on (the record shows its identity as it is when the send
    /// reads it, without reading the channel again).
    pub channel: ChannelIdentity,
    pub api_key_id: Option<i64>,
    pub recipient: RecipientRef,
    pub conversation: ConversationPolicy,
    pub uuid: Uuid,
    pub message_type: MessageType,
    pub status: MessageStatus,
    pub content: Value,
    pub provider_message_id: Option<String>,
    pub error: Option<Value>,
    pub now: Timestamp,
    /// The steps before the record (accepted, the provider request and response); the record
    /// adds the `status` step of `status`.
    pub steps: Vec<MessageStep>,
    /// Recorded `queued` for a worker to send (`status` is `queued`).
    pub queue: Option<crate::queue::QueueEntry>,
    /// A reply: `reply_to` (the message replied to).
    pub context: Option<switchboard_domain::message::InboundContext>,
}

/// What the row of a recorded outbound message holds besides what [`NewOutbound`] says.
pub(crate) struct Written<'a> {
    /// The `id` its `INSERT` returned.
    pub id: i64,
    /// The provider's id as written (none when the channel already had it).
    pub provider_message_id: Option<String>,
    pub contact: &'a Contact,
    pub conversation: Option<&'a Conversation>,
    pub consent_uuid: Option<Uuid>,
    pub trace: Option<String>,
}

impl NewOutbound {
    /// The message as its row holds it once inserted: everything in the row was bound from
    /// `self` and `written`, so the record is built without reading the row back.
    pub(crate) fn as_written(&self, written: Written<'_>) -> MessageRecord {
        MessageRecord {
            id: written.id,
            uuid: self.uuid,
            org_id: self.org_id,
            channel: self.channel.clone(),
            contact_id: written.contact.id,
            contact_uuid: written.contact.uuid,
            conversation_id: written.conversation.map(|c| c.id),
            conversation_uuid: written.conversation.map(|c| c.uuid),
            api_key_id: self.api_key_id,
            direction: Direction::Outbound,
            message_type: self.message_type,
            status: self.status,
            content: self.content.clone(),
            provider_message_id: written.provider_message_id,
            error: self.error.clone(),
            created_at: self.now,
            updated_at: self.now,
            consent_uuid: written.consent_uuid,
            trace: written.trace,
            context: self.context.clone(),
            edited_at: None,
            deleted_at: None,
            pricing: None,
            provider_conversation: None,
        }
    }
}

/// What recording a message wrote.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordedOutbound {
    pub message: MessageRecord,
    pub contact: Contact,
    pub contact_created: bool,
    pub conversation: Option<Conversation>,
    pub conversation_created: bool,
}

/// Who an inbound message is from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboundSender {
    /// A phone number (WhatsApp's `wa_id`, the sandbox's `--from`).
    Phone(Phone),
    /// A Telegram chat.
    Telegram { chat_id: String },
}

#[derive(Clone, Debug)]
pub struct NewInbound {
    pub sender: InboundSender,
    /// A display name from the provider's profile, used when the contact is created.
    pub profile_name: Option<String>,
    pub uuid: Uuid,
    pub message_type: MessageType,
    pub content: Value,
    /// The provider's id: the de-duplication key, unique per channel.
    pub provider_message_id: String,
    /// When the contact sent it (the provider's time, never later than `now`).
    pub sent_at: Timestamp,
    /// `reply_to`, `forwarded`, `frequently_forwarded`, `referral`.
    pub context: switchboard_domain::message::InboundContext,
}

/// Which outbound message a status update is about.
#[derive(Clone, Debug)]
pub enum MessageRef {
    Id(i64),
    /// The provider's id on the batch's channel.
    Provider(String),
}

#[derive(Clone, Debug)]
pub struct NewStatus {
    pub message: MessageRef,
    pub status: MessageStatus,
    /// The provider's error, for `failed`.
    pub error: Option<Value>,
    /// WhatsApp's `pricing` (`{"billable", "category", "pricing_model"}`), kept as the
    /// message's last.
    pub pricing: Option<Value>,
    /// WhatsApp's conversation (`{"id", "origin", "expires_at"}`), kept as the message's last.
    pub provider_conversation: Option<Value>,
}

/// What a provider callback (or the sandbox tools) brings for one channel.
#[derive(Clone, Debug)]
pub struct ProviderBatch {
    pub org_id: i64,
    pub channel_id: i64,
    pub messages: Vec<NewInbound>,
    pub statuses: Vec<NewStatus>,
    pub now: Timestamp,
}

/// The outcome of one inbound message.
#[derive(Clone, Debug)]
pub enum InboundOutcome {
    Stored(Box<RecordedOutbound>),
    /// Already stored (same provider id on the channel): nothing changed.
    Duplicate {
        provider_message_id: String,
    },
}

/// The outcome of one status update.
#[derive(Clone, Debug)]
pub enum StatusOutcome {
    Applied {
        message: MessageRecord,
        previous: MessageStatus,
    },
    /// The message exists but is already at or past this status (stale or duplicate), or is
    /// not an outbound message.
    Ignored { message: MessageRecord },
    /// No such message on the channel.
    NotFound,
}

#[derive(Clone, Debug, Default)]
pub struct BatchOutcome {
    pub messages: Vec<InboundOutcome>,
    pub statuses: Vec<StatusOutcome>,
    /// Edits and deletions ([`crate::MessageStore::record_message_changes`]).
    pub changes: Vec<ChangeOutcome>,
}

/// A change the customer made to an inbound message (edited or deleted), by the provider's id
/// of the message on the channel.
#[derive(Clone, Debug)]
pub struct NewChange {
    pub provider_message_id: String,
    /// The new type and content; `None`: deleted (the content becomes null).
    pub edited: Option<(MessageType, Value)>,
    /// When the customer made the change (never later than `now`).
    pub at: Timestamp,
}

/// The outcome of one change: applied (the message as it now is), or ignored (an unknown
/// message, one already deleted, or the same change again).
#[derive(Clone, Debug)]
pub enum ChangeOutcome {
    Applied(Box<MessageRecord>),
    Ignored,
}

/// What a change in a provider batch causes; the store asks for the effects of each.
pub enum BatchChange<'a> {
    Inbound(&'a RecordedOutbound),
    /// A customer's edit or deletion (`change`: `edited` or `deleted`).
    Changed {
        message: &'a MessageRecord,
        change: &'static str,
    },
    Status {
        message: &'a MessageRecord,
        previous: MessageStatus,
    },
}

pub type BatchEffectsFn<'a> = Box<dyn Fn(BatchChange<'_>) -> Effects + Send + Sync + 'a>;

/// History filters, all optional; ids already resolved within the organization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MessageFilter {
    pub channel_id: Option<i64>,
    pub contact_id: Option<i64>,
    pub conversation_id: Option<i64>,
    pub direction: Option<Direction>,
    pub status: Option<MessageStatus>,
    /// Inclusive.
    pub since: Option<Timestamp>,
    /// Exclusive.
    pub until: Option<Timestamp>,
}

/// A position in the newest-first history: the (time, id) of the last message returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryCursor {
    pub created_at: Timestamp,
    pub id: i64,
}

// ---------------------------------------------------------------------------------------------
// Idempotency

/// A request to claim an idempotency key.
#[derive(Clone, Debug)]
pub struct IdempotencyClaim {
    pub api_key_id: i64,
    pub key: String,
    pub method: String,
    pub path: String,
    /// SHA-256 of method, path and body.
    pub fingerprint: Vec<u8>,
    /// A fresh token that identifies this claimant.
    pub owner: Uuid,
    pub now: Timestamp,
    /// How long the claim holds the key before another request may take it over.
    pub lease: Duration,
    /// How long the record is kept.
    pub retention: Duration,
}

/// Proof of a claim: the record and the claimant's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimToken {
    pub record_id: i64,
    pub owner: Uuid,
}

/// A response kept for replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What a completed claim keeps for replay: a response's bytes, or the data a send or a batch
/// recorded with its claim, from which the API renders the answer (the first answer and every
/// replay alike: the store never builds an answer).
#[derive(Clone, Debug, PartialEq)]
pub enum Stored {
    Response(StoredResponse),
    Send(Box<RecordedSend>),
    Batch(crate::queue::BatchRecord),
}

/// A send recorded with its idempotency claim, as data: the record as written, and what the
/// answer needs beside it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordedSend {
    /// 201, or 422: the provider rejected the message (recorded `failed`).
    pub status: u16,
    /// The id of the request that sent it (error bodies carry it).
    pub request_id: Option<String>,
    /// What the answer shows beside the record (a catalog send's consent and template), as the
    /// API shaped it before the write.
    pub extra: Option<Value>,
    pub recorded: RecordedOutbound,
}

/// What a send's record completes: a claim made before the send, or a key first written with
/// the record itself (a send that calls nothing outside the process before its record needs no
/// claim ahead: the key's row is inserted completed in the record's transaction, and a key
/// already there makes the record fail with `ClaimLost`, written nothing).
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimRef {
    Held(ClaimToken),
    New(NewKey),
}

impl From<ClaimToken> for ClaimRef {
    fn from(token: ClaimToken) -> Self {
        ClaimRef::Held(token)
    }
}

/// A key written completed with the record of its request (no claim before it).
#[derive(Clone, Debug, PartialEq)]
pub struct NewKey {
    pub api_key_id: i64,
    pub key: String,
    pub method: String,
    pub path: String,
    /// SHA-256 of method, path and body.
    pub fingerprint: Vec<u8>,
    pub now: Timestamp,
    /// How long the record is kept.
    pub retention: Duration,
}

/// The completion of a send's idempotency claim in the transaction that records the send:
/// data only ([`RecordedSend`] without the record, which the store adds).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimCompletion {
    pub claim: ClaimRef,
    pub status: u16,
    pub request_id: Option<String>,
    pub extra: Option<Value>,
}

impl ClaimCompletion {
    /// What is kept for replay once `recorded` is written.
    pub fn with(&self, recorded: &RecordedOutbound) -> RecordedSend {
        RecordedSend {
            status: self.status,
            request_id: self.request_id.clone(),
            extra: self.extra.clone(),
            recorded: recorded.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutcome {
    /// This request owns the key now (`taken_over`: from a claimant whose lease had expired).
    Claimed { token: ClaimToken, taken_over: bool },
    /// The same request completed before: replay this.
    Replay(Stored),
    /// The key was used with a different method, path or body.
    Conflict,
    /// The same request is running under a live lease.
    InProgress,
}

/// The state of a key, read without claiming it.
#[derive(Clone, Debug, PartialEq)]
pub enum IdempotencyState {
    Absent,
    Completed {
        fingerprint: Vec<u8>,
        response: Stored,
    },
    InProgress {
        fingerprint: Vec<u8>,
    },
}

/// The effects of a grouped record.
pub type GroupEffects = Arc<dyn Fn(&RecordedOutbound) -> Effects + Send + Sync>;

/// An outbound message to record by group commit (`MessageStore::record_outbound_grouped`).
/// Its functions may be called more than once: a group that fails is rolled back and its
/// records written again one by one.
#[derive(Clone)]
pub struct GroupedOutbound {
    pub new: NewOutbound,
    /// The idempotency claim to complete with the record.
    pub completion: Option<ClaimCompletion>,
    pub effects: GroupEffects,
}
