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

use crate::config::{Config, DatabaseUrl};
use crate::domain::Timestamp;
use crate::domain::api_key::KeyHash;
use crate::domain::channel::{Channel, ChannelStatus, ChannelType};
use crate::domain::event::Effects;
use crate::domain::organization::Organization;
use crate::domain::scope::ScopeSet;

#[cfg(test)]
pub mod conformance;
mod postgres;
mod sqlite;
pub mod types;
pub mod webhooks;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use webhooks::WebhookStore;

/// A storage failure, the same on both backends.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A unique constraint was violated (the constraint or index name when known).
    #[error("unique constraint violated{}", .0.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    UniqueViolation(Option<String>),
    #[error("foreign key violated")]
    ForeignKeyViolation,
    /// The database cannot be reached or is overloaded: a temporary condition (503).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The operation's own precondition failed (message for people).
    #[error("{0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Other(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind;
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(db) => match db.kind() {
                ErrorKind::UniqueViolation => {
                    StoreError::UniqueViolation(db.constraint().map(str::to_owned))
                }
                ErrorKind::ForeignKeyViolation => StoreError::ForeignKeyViolation,
                _ => {
                    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                    // SQLITE_BUSY / SQLITE_LOCKED, PostgreSQL connection exceptions (08xxx),
                    // admin shutdown (57P01..57P03) and too many connections (53300).
                    if matches!(
                        code.as_str(),
                        "5" | "6" | "261" | "517" | "53300" | "57P01" | "57P02" | "57P03"
                    ) || code.starts_with("08")
                    {
                        StoreError::Unavailable(db.message().to_owned())
                    } else {
                        StoreError::Other(format!("{} (code {code})", db.message()))
                    }
                }
            },
            sqlx::Error::PoolTimedOut => {
                StoreError::Unavailable("timed out waiting for a database connection".into())
            }
            sqlx::Error::PoolClosed => {
                StoreError::Unavailable("the connection pool is closed".into())
            }
            sqlx::Error::Io(e) => StoreError::Unavailable(format!("I/O error: {e}")),
            sqlx::Error::Tls(e) => StoreError::Unavailable(format!("TLS error: {e}")),
            sqlx::Error::WorkerCrashed => {
                StoreError::Unavailable("the database worker crashed".into())
            }
            other => StoreError::Other(other.to_string()),
        }
    }
}

/// Signals between the store and the background workers of this process.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    outbox: Arc<tokio::sync::Notify>,
}

impl Hooks {
    /// Called after a transaction that wrote outbox events commits: wakes the dispatcher.
    pub fn outbox_written(&self) {
        self.outbox.notify_one();
    }

    /// What the dispatcher waits on.
    pub fn outbox_signal(&self) -> Arc<tokio::sync::Notify> {
        self.outbox.clone()
    }
}

/// A function that builds the effects of a change from the row it created or changed.
pub type EffectsFn<'a, T> = Box<dyn FnOnce(&T) -> Effects + Send + 'a>;

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
pub trait SystemStore: Send + Sync {
    /// Applies the embedded migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap round trip, for `/readyz`.
    async fn ping(&self) -> StoreResult<()>;
    async fn get_setting(&self, key: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Stores `value` under `key` unless a value exists; returns the value now stored.
    async fn init_setting(&self, key: &str, value: &[u8]) -> StoreResult<Vec<u8>>;
    /// Which backend this is: `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// Notified (in this process) after every commit that wrote outbox events.
    fn outbox_signal(&self) -> Arc<tokio::sync::Notify>;
}

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
    ) -> StoreResult<Vec<crate::domain::event::NewEvent>>;
    /// The organization log, oldest first (for tests and tools; the API reads it paginated).
    async fn list_org_events(
        &self,
        org_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<crate::domain::event::OrgEvent>>;
}

/// The whole storage interface.
pub trait Store:
    SystemStore + OrgStore + ChannelStore + KeyStore + EventStore + WebhookStore
{
}

impl<T> Store for T where
    T: SystemStore + OrgStore + ChannelStore + KeyStore + EventStore + WebhookStore
{
}

pub type SharedStore = Arc<dyn Store>;

/// Connects to the configured database (creating a SQLite file if needed). Does not migrate.
pub async fn connect(config: &Config) -> StoreResult<SharedStore> {
    match &config.database_url {
        DatabaseUrl::Sqlite { path } => Ok(Arc::new(
            SqliteStore::connect(path, config.database_max_connections).await?,
        )),
        DatabaseUrl::Postgres { url } => Ok(Arc::new(
            PgStore::connect(url, config.database_max_connections).await?,
        )),
    }
}
