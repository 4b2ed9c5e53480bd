//! The store's system interface: migrations, health, settings, the configuration generation,
//! wake-ups and the hand-off, master-key rotation.

use async_trait::async_trait;

use crate::{StoreResult, Wakeups, handoff};
use switchboard_domain::Timestamp;

#[async_trait]
pub trait SystemStore: Send + Sync {
    /// Applies the embedded migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap round trip, for `/readyz`.
    async fn ping(&self) -> StoreResult<()>;
    /// A small write transaction (a few KiB, rewritten in place), for `/readyz` while writes
    /// fail ([`crate::health::write_fault`]): its success ends the fault.
    async fn probe_write(&self, now: Timestamp) -> StoreResult<()>;
    async fn get_setting(&self, key: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Stores `value` under `key` unless a value exists; returns the value now stored.
    async fn init_setting(&self, key: &str, value: &[u8]) -> StoreResult<Vec<u8>>;
    /// Which backend this is: `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// The configuration generation: a counter that every change to API keys or channels
    /// bumps in its own transaction (see `cache`).
    async fn config_generation(&self) -> StoreResult<i64>;
    /// A reader of the configuration generation for a poller: it keeps one connection between
    /// reads (see [`GenerationReader`]).
    fn generation_reader(&self) -> Box<dyn GenerationReader>;
    /// The dispatcher's wake-ups (see [`Wakeups`]): this process's commits that wrote outbox
    /// events and, on PostgreSQL, every instance's commits that wrote deliveries.
    fn wakeups(&self) -> Wakeups;
    /// The hand-off of deliveries written leased to this process's dispatcher (see
    /// [`handoff`]).
    fn handoff(&self) -> handoff::Handoff;
    /// Changes whenever events may have been written (this process's commits of outbox
    /// events; on PostgreSQL also other instances' commits that wrote deliveries, while a
    /// [`Wakeups`] is alive). Event streams wait on it, and poll as well.
    fn event_signal(&self) -> tokio::sync::watch::Receiver<u64>;
    /// Re-encrypts every stored secret with `reseal` (sealed value, associated data) and
    /// replaces the setting `check_key` with `new_check`, in one transaction. Returns the
    /// number of secrets re-encrypted. Any failure changes nothing.
    async fn reseal_secrets(
        &self,
        reseal: &Reseal,
        check_key: &str,
        new_check: &[u8],
    ) -> StoreResult<usize>;
}

/// Reads the configuration generation again and again (the key and channel cache's poller,
/// every 5 ms while requests come) on a connection it keeps: one round trip a read, where a
/// connection taken from the pool for each read costs three (the pool checks a connection when
/// it is taken and again when it is returned). A kept connection that fails is let go and the
/// read made again at once on one taken from the pool (checked), so a restarted database costs
/// no failed read. The connection is given back when the pool has no idle one left (a small
/// pool is not kept short by a poller) and when the reader is dropped.
#[async_trait]
pub trait GenerationReader: Send {
    async fn read(&mut self) -> StoreResult<i64>;
}

/// Opens a value sealed under the old master key and seals it under the new one.
pub type Reseal = dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>, String> + Send + Sync;
