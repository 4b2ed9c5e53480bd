//! Storage behind one interface, [`Store`], with a SQLite and a PostgreSQL implementation.
//!
//! Both implementations compile the same query code (`store/shared/`), once against
//! `sqlx::Sqlite` and once against `sqlx::Postgres`, so the SQL text is shared wherever the
//! dialects agree; the few statements that differ live in each backend's `dialect` module.
//! No `Any` driver: each backend keeps its native types (`UUID`, `TIMESTAMPTZ`, `JSONB`,
//! `BYTEA` on PostgreSQL; `BLOB`, `INTEGER` milliseconds and `TEXT` in STRICT tables on
//! SQLite), and one conformance suite (`store::conformance`) runs against both.
//!
//! Callers pass the current time in (no `now()` in SQL), so every time-dependent rule can be
//! tested with a controlled clock. State changes take an [`Effects`] (or a function producing
//! one from the created row) and write those outbox events and log entries in the same
//! transaction as the change.

use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::api_key::KeyHash;
use switchboard_domain::channel::{Channel, ChannelStatus, ChannelType};
use switchboard_domain::event::Effects;
use switchboard_domain::organization::Organization;
use switchboard_domain::scope::ScopeSet;

pub mod campaigns;
pub mod canned_replies;
pub mod contacts;
mod database_url;
mod error;
pub mod flows;
pub mod groups;
pub mod handoff;
pub mod health;
pub mod legacy;
pub mod media;
pub mod messaging;
pub mod observe;
pub mod org_data;
pub mod page;
mod postgres;
pub mod queue;
pub mod recovery;
mod sqlite;
mod system;
pub mod templates;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod webhooks;

pub use org_data::{
    Member, MemberChange, MemberQuery, NewMember, OrgEventQuery, OrgEventRecord, UserRecord,
};

pub use campaigns::CampaignStore;
pub use canned_replies::CannedReplyStore;
pub use contacts::{ContactStore, NewContact};
pub use database_url::DatabaseUrl;
pub use error::{StoreError, StoreResult};
pub use flows::FlowStore;
pub use groups::GroupStore;
pub use media::{MediaUpload, MediaUploadStore};
pub use messaging::*;
pub use postgres::PgStore;
pub use queue::SendQueueStore;
pub use recovery::RecoveryStore;
pub use sqlite::SqliteStore;
pub use system::{GenerationReader, Reseal, SystemStore};
pub use templates::{
    ConsentContext, ConsentRecord, NewConsent, NewTemplate, ProviderTemplateStatus, TemplateChange,
    TemplatePatch, TemplateRecord,
};
pub use webhooks::{DeliveryStore, EndpointStore, LedgerStore};

/// Signals between the store and the background workers of this process.
#[derive(Clone, Debug)]
pub struct Hooks {
    outbox: Arc<tokio::sync::Notify>,
    /// Counts this process's commits that wrote outbox events (and, on PostgreSQL, other
    /// instances' that wrote deliveries): what event streams wait on.
    events: Arc<tokio::sync::watch::Sender<u64>>,
    /// Deliveries written leased to this process's dispatcher (see [`handoff`]).
    handoff: handoff::Handoff,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            outbox: Arc::default(),
            events: Arc::new(tokio::sync::watch::Sender::new(0)),
            handoff: handoff::Handoff::default(),
        }
    }
}

impl Hooks {
    /// Called after a transaction that wrote outbox events commits: wakes the dispatcher and
    /// the event streams.
    pub fn outbox_written(&self) {
        self.outbox.notify_one();
        self.events_written();
    }

    /// Called after a transaction that wrote outbox events but no delivery for a claim (none,
    /// or only deliveries handed to this process's dispatcher) commits: wakes the event streams.
    pub fn events_written(&self) {
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// What wakes the webhook dispatcher: a commit of this process that wrote outbox events and,
/// on PostgreSQL, a commit of any other instance that wrote deliveries (the store listens to
/// its own `NOTIFY`, reconnecting when the connection is lost). The listener runs while a
/// `Wakeups` of the process is alive; dropping the last one stops it.
#[derive(Clone, Debug)]
pub struct Wakeups {
    signal: Arc<tokio::sync::Notify>,
    _listener: Option<Arc<ListenerTask>>,
}

impl Wakeups {
    /// Waits for the next wake-up (one stored wake-up is kept, so none is lost between waits).
    pub async fn notified(&self) {
        self.signal.notified().await;
    }

    /// Wakes the waiter (also used by the dispatcher itself, e.g. when a slot frees up).
    pub fn wake(&self) {
        self.signal.notify_one();
    }
}

/// Aborts the listener task with the last `Wakeups`.
#[derive(Debug)]
struct ListenerTask(tokio::task::JoinHandle<()>);

impl Drop for ListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A function that builds the effects of a change from the row it created or changed.
pub type EffectsFn<'a, T> = Box<dyn FnOnce(&T) -> Effects + Send + 'a>;

/// The effects function of a change that causes nothing.
pub fn no_effects<T>() -> EffectsFn<'static, T> {
    Box::new(|_| Effects::none())
}

// ---------------------------------------------------------------------------------------------
// Records

/// An API key as stored: never the key itself, only its hash and display prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: i64,
    pub org_id: i64,
    pub name: String,
    pub prefix: String,
    pub key_hash: KeyHash,
    /// `None` for pre-scope keys, which act as wildcard keys.
    pub scopes: Option<ScopeSet>,
    pub legacy: bool,
    pub default_channel_id: Option<i64>,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub revoked_reason: Option<String>,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
}

impl ApiKeyRecord {
    /// The effective scopes: pre-scope keys are wildcard keys.
    pub fn effective_scopes(&self) -> ScopeSet {
        self.scopes.clone().unwrap_or(ScopeSet::Wildcard)
    }
}

#[derive(Clone, Debug)]
pub struct NewApiKey {
    pub org_id: i64,
    pub name: String,
    pub prefix: String,
    pub key_hash: KeyHash,
    pub scopes: Option<ScopeSet>,
    pub legacy: bool,
    pub default_channel_id: Option<i64>,
    pub expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

#[derive(Clone, Debug)]
pub struct NewChannel {
    pub org_id: i64,
    pub uuid: Uuid,
    /// `None`: derived from the name, made unique within the organization.
    pub slug: Option<String>,
    pub channel_type: ChannelType,
    pub name: String,
    pub identifier: String,
    pub status: ChannelStatus,
    pub is_default: bool,
    /// The sealed provider configuration.
    pub provider_config: Option<Vec<u8>>,
    pub now: Timestamp,
}

#[derive(Clone, Debug, Default)]
pub struct ChannelPatch {
    pub name: Option<String>,
    pub slug: Option<String>,
    pub identifier: Option<String>,
    pub status: Option<ChannelStatus>,
    /// `true`: make this the organization's default channel.
    pub make_default: bool,
    /// A new sealed provider configuration.
    pub provider_config: Option<Vec<u8>>,
}

// ---------------------------------------------------------------------------------------------
// The interface, grouped by aggregate. `Store` is all of them.

#[async_trait]
pub trait OrgStore: Send + Sync {
    async fn create_org(&self, name: &str, now: Timestamp) -> StoreResult<Organization>;
    async fn get_org(&self, id: i64) -> StoreResult<Organization>;
    async fn list_orgs(&self) -> StoreResult<Vec<Organization>>;
}

#[async_trait]
pub trait ChannelStore: Send + Sync {
    /// Creates a channel; a taken slug is `UniqueViolation`. With `is_default`, the
    /// organization's previous default stops being the default.
    async fn create_channel(
        &self,
        new: NewChannel,
        effects: EffectsFn<'_, Channel>,
    ) -> StoreResult<Channel>;
    async fn update_channel(
        &self,
        id: i64,
        patch: ChannelPatch,
        now: Timestamp,
        effects: EffectsFn<'_, Channel>,
    ) -> StoreResult<Channel>;
    /// A channel by its global id, in any organization (for the admin tools).
    async fn get_channel(&self, id: i64) -> StoreResult<Channel>;
    /// A channel by UUID, in any organization (for provider callbacks).
    async fn get_channel_by_uuid(&self, uuid: Uuid) -> StoreResult<Channel>;
    /// The organization's channels, by id.
    async fn list_channels(&self, org_id: i64) -> StoreResult<Vec<Channel>>;
    /// The sealed provider configuration of a channel.
    async fn get_channel_provider_config(&self, id: i64) -> StoreResult<Option<Vec<u8>>>;
}

#[async_trait]
pub trait KeyStore: Send + Sync {
    async fn create_api_key(
        &self,
        new: NewApiKey,
        effects: EffectsFn<'_, ApiKeyRecord>,
    ) -> StoreResult<ApiKeyRecord>;
    /// The one indexed lookup of authentication.
    async fn find_api_key_by_hash(&self, hash: &KeyHash) -> StoreResult<Option<ApiKeyRecord>>;
    async fn get_api_key(&self, id: i64) -> StoreResult<ApiKeyRecord>;
    async fn list_api_keys(&self, org_id: i64) -> StoreResult<Vec<ApiKeyRecord>>;
    /// Revokes a key; revoking a revoked key is `Conflict`.
    async fn revoke_api_key(
        &self,
        id: i64,
        reason: &str,
        now: Timestamp,
        effects: EffectsFn<'_, ApiKeyRecord>,
    ) -> StoreResult<ApiKeyRecord>;
    /// Replaces a key: `new` is created with the old key's organization, name, scopes, default
    /// channel and expiry, and the old key is revoked (reason `rotated`). Returns (old, new).
    async fn rotate_api_key(
        &self,
        id: i64,
        new_hash: KeyHash,
        new_prefix: String,
        now: Timestamp,
        effects: EffectsFn<'_, (ApiKeyRecord, ApiKeyRecord)>,
    ) -> StoreResult<(ApiKeyRecord, ApiKeyRecord)>;
    /// Records use of a key (callers coalesce this to about once a minute per key).
    async fn touch_api_key(&self, id: i64, now: Timestamp) -> StoreResult<()>;
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Writes effects on their own (for changes with no row of their own).
    async fn write_effects(&self, effects: Effects) -> StoreResult<()>;
    /// The outbox events of an organization, oldest first (for tests and tools).
    async fn list_outbox_events(
        &self,
        org_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<switchboard_domain::event::NewEvent>>;
    /// The organization log, oldest first (for tests and tools; the API reads it paginated).
    async fn list_org_events(
        &self,
        org_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<switchboard_domain::event::OrgEvent>>;
}

/// Users, their memberships of organizations, roles and permission overrides.
///
/// Members are addressed by organization and case-folded e-mail address
/// (`Email::normalized`). Changes run in one transaction with their effects; a change that
/// changes nothing still calls `effects` (with equal `before` and `after`), and writes
/// whatever it returns.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Adds a member, creating the user when no user has the address (in any case). An existing
    /// user's name is replaced when `new.name` is given. A user who is a member already is
    /// `Conflict`.
    async fn add_member(
        &self,
        new: NewMember,
        effects: EffectsFn<'_, Member>,
    ) -> StoreResult<Member>;
    async fn get_member(&self, org_id: i64, email_normalized: &str) -> StoreResult<Member>;
    /// A page of the organization's members, oldest membership first.
    async fn list_members(&self, org_id: i64, query: &MemberQuery) -> StoreResult<Vec<Member>>;
    async fn set_member_role(
        &self,
        org_id: i64,
        email_normalized: &str,
        role: switchboard_domain::permission::Role,
        now: Timestamp,
        effects: EffectsFn<'_, MemberChange>,
    ) -> StoreResult<MemberChange>;
    /// Grants or revokes one permission for a membership, or (`None`) removes its override.
    async fn set_member_permission(
        &self,
        org_id: i64,
        email_normalized: &str,
        permission: switchboard_domain::permission::Permission,
        effect: Option<switchboard_domain::permission::OverrideEffect>,
        now: Timestamp,
        effects: EffectsFn<'_, MemberChange>,
    ) -> StoreResult<MemberChange>;
    /// Removes a membership and its overrides; a user left without any membership is deleted
    /// (no personal data is kept for nothing). Returns the membership as it was.
    async fn remove_member(
        &self,
        org_id: i64,
        email_normalized: &str,
        effects: EffectsFn<'_, Member>,
    ) -> StoreResult<Member>;
}

/// Reading the organization log (it is written through `Effects`).
#[async_trait]
pub trait OrgLogStore: Send + Sync {
    /// A page of the organization's log, newest first, filtered.
    async fn query_org_events(
        &self,
        org_id: i64,
        query: &OrgEventQuery,
    ) -> StoreResult<Vec<OrgEventRecord>>;
    /// One entry of the organization's log.
    async fn get_org_event(&self, org_id: i64, uuid: Uuid) -> StoreResult<OrgEventRecord>;
}

/// Conversations (opened and continued by the messages recorded through [`MessageStore`]).
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// The open conversation of a contact on a channel.
    async fn find_open_conversation(
        &self,
        contact_id: i64,
        channel_id: i64,
    ) -> StoreResult<Option<switchboard_domain::contact::Conversation>>;
    /// A conversation of the organization by UUID.
    async fn find_conversation(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<Option<switchboard_domain::contact::Conversation>>;
}

/// Messages, outbound and inbound, with the contacts and conversations they create.
#[async_trait]
pub trait MessageStore: Send + Sync {
    /// Records an outbound message with its contact (found or created) and conversation (per
    /// the policy), its effects and, when given, the completion of its idempotency claim, in
    /// one transaction. A claim no longer owned is `Conflict` and nothing is written.
    async fn record_outbound(
        &self,
        new: NewOutbound,
        completion: Option<ClaimCompletion>,
        effects: EffectsFn<'_, RecordedOutbound>,
    ) -> StoreResult<RecordedOutbound>;
    /// [`MessageStore::record_outbound`] by group commit: records sent at the same time are
    /// written together, several in one transaction and one commit, each answered once its
    /// transaction committed. A record that fails fails alone (its group is rolled back and
    /// written again one record per transaction). Without a group committer, one transaction.
    async fn record_outbound_grouped(
        &self,
        record: GroupedOutbound,
    ) -> StoreResult<RecordedOutbound> {
        let GroupedOutbound {
            new,
            completion,
            effects,
        } = record;
        self.record_outbound(new, completion, Box::new(move |r| effects(r)))
            .await
    }
    /// Records what a provider reported for one channel (inbound messages, de-duplicated on the
    /// provider id; status updates, forward only) in one transaction.
    async fn record_provider_batch(
        &self,
        batch: ProviderBatch,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<BatchOutcome>;
    /// A message by its global id (for the admin tools).
    async fn get_message(&self, id: i64) -> StoreResult<MessageRecord>;
    /// The organization's message with this uuid (`NotFound` for another organization's).
    async fn find_message(&self, org_id: i64, uuid: Uuid) -> StoreResult<MessageRecord>;
    /// Applies customers' edits and deletions of inbound messages of the channel, in one
    /// transaction with their effects: an edit replaces the type and content and sets
    /// `edited_at`, a deletion nulls the content and sets `deleted_at`; each adds a timeline
    /// step. A change to an unknown or deleted message, or the same edit again, is ignored.
    async fn record_message_changes(
        &self,
        channel_id: i64,
        changes: Vec<NewChange>,
        now: Timestamp,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<Vec<ChangeOutcome>>;
    /// The uuids of the organization's messages (any channel, inbound or outbound) with these
    /// provider ids; ids of no message of the organization are absent.
    async fn message_uuids_by_provider_ids(
        &self,
        org_id: i64,
        provider_message_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, Uuid>>;
    /// The message's journey, oldest first: its own steps and every attempt to deliver one of
    /// its events.
    async fn message_timeline(&self, message_id: i64) -> StoreResult<Vec<MessageStep>>;
    /// A page of the organization's messages, newest first.
    async fn list_messages(
        &self,
        org_id: i64,
        filter: &MessageFilter,
        after: Option<HistoryCursor>,
        limit: i64,
    ) -> StoreResult<Vec<MessageRecord>>;
}

/// Idempotency records: one per credential and `Idempotency-Key`.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims a key in a short transaction of its own (see [`ClaimOutcome`]). A record expires
    /// `retention` after its claim, but never while a claim holds it (not before the lease
    /// ends); an expired record counts as absent.
    async fn claim_idempotency(&self, claim: IdempotencyClaim) -> StoreResult<ClaimOutcome>;
    /// Stores the response of a claim still owned; `false` when the claim was lost.
    async fn complete_idempotency(
        &self,
        token: ClaimToken,
        response: StoredResponse,
    ) -> StoreResult<bool>;
    /// Gives a claim up (after a 5xx), so that a retry with the key can run.
    async fn release_idempotency(&self, token: ClaimToken) -> StoreResult<()>;
    /// The state of a key, without claiming it (expired records are absent).
    async fn idempotency_state(
        &self,
        api_key_id: i64,
        key: &str,
        now: Timestamp,
    ) -> StoreResult<IdempotencyState>;
    /// Deletes up to `batch` records expired at `now`; returns how many.
    async fn purge_idempotency(&self, now: Timestamp, batch: i64) -> StoreResult<u64>;
}

/// The template catalogue and the consent evidence of catalog template sends.
#[async_trait]
pub trait TemplateStore: Send + Sync {
    /// Creates a template; a template of the channel with the same name and language, or with
    /// the same provider id, is `UniqueViolation`.
    async fn create_template(
        &self,
        new: NewTemplate,
        effects: EffectsFn<'_, TemplateRecord>,
    ) -> StoreResult<TemplateRecord>;
    /// Changes a template (any organization, for the admin tools); `NotFound` when there is
    /// none. A provider id another template of the channel has is `UniqueViolation`.
    async fn update_template(
        &self,
        uuid: Uuid,
        patch: TemplatePatch,
        now: Timestamp,
        effects: EffectsFn<'_, TemplateChange>,
    ) -> StoreResult<TemplateChange>;
    /// A template by UUID, in any organization (for the admin tools).
    async fn get_template(&self, uuid: Uuid) -> StoreResult<TemplateRecord>;
    /// A page of the organization's catalogue, newest first, optionally filtered.
    async fn list_templates_page(
        &self,
        org_id: i64,
        channel_id: Option<i64>,
        status: Option<switchboard_domain::template::TemplateStatus>,
        name: Option<&str>,
        page: page::PageQuery,
    ) -> StoreResult<Vec<TemplateRecord>>;
    /// A template of the organization by UUID.
    async fn find_template(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<TemplateRecord>>;
    /// A channel's templates, oldest first.
    async fn list_channel_templates(&self, channel_id: i64) -> StoreResult<Vec<TemplateRecord>>;
    /// The organization's templates on all its channels, oldest first.
    async fn list_org_templates(&self, org_id: i64) -> StoreResult<Vec<TemplateRecord>>;
    /// Applies a status the provider reported to the channel's template it names: by provider
    /// id, else by name and language (whose template then takes the provider id). `None` when
    /// no template matches or the status is already that one.
    async fn apply_template_status(
        &self,
        channel_id: i64,
        update: ProviderTemplateStatus,
        now: Timestamp,
        effects: EffectsFn<'_, TemplateChange>,
    ) -> StoreResult<Option<TemplateChange>>;
    /// Records an outbound catalog template message like `record_outbound` (contact found or
    /// created, with `contact_name`; conversation per the policy), with its consent evidence
    /// (append-only, linked from the message, and from the conversation when the conversation
    /// has no consent yet and the policy opens conversations), in one transaction.
    async fn record_consented_outbound(
        &self,
        new: NewOutbound,
        contact_name: Option<String>,
        consent: NewConsent,
        completion: Option<ClaimCompletion>,
        effects: EffectsFn<'_, RecordedOutbound>,
    ) -> StoreResult<RecordedOutbound>;
    /// Consent evidence of the organization by UUID.
    async fn find_consent(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<ConsentRecord>>;
}

/// The whole storage interface.
pub trait Store:
    SystemStore
    + OrgStore
    + ChannelStore
    + KeyStore
    + EventStore
    + UserStore
    + OrgLogStore
    + ContactStore
    + ConversationStore
    + MessageStore
    + SendQueueStore
    + IdempotencyStore
    + EndpointStore
    + DeliveryStore
    + LedgerStore
    + RecoveryStore
    + TemplateStore
    + GroupStore
    + CannedReplyStore
    + CampaignStore
    + FlowStore
    + MediaUploadStore
{
}

impl<T> Store for T where
    T: SystemStore
        + OrgStore
        + ChannelStore
        + KeyStore
        + EventStore
        + UserStore
        + OrgLogStore
        + ContactStore
        + ConversationStore
        + MessageStore
        + SendQueueStore
        + IdempotencyStore
        + EndpointStore
        + DeliveryStore
        + LedgerStore
        + RecoveryStore
        + TemplateStore
        + GroupStore
        + CannedReplyStore
        + CampaignStore
        + FlowStore
        + MediaUploadStore
{
}

pub type SharedStore = Arc<dyn Store>;

/// Connects to the database (creating a SQLite file if needed) with a pool of at most
/// `max_connections`. Does not migrate.
pub async fn connect(url: &DatabaseUrl, max_connections: u32) -> StoreResult<SharedStore> {
    match url {
        DatabaseUrl::Sqlite { path } => {
            Ok(Arc::new(SqliteStore::connect(path, max_connections).await?))
        }
        DatabaseUrl::Postgres { url } => {
            Ok(Arc::new(PgStore::connect(url, max_connections).await?))
        }
    }
}
