//! What the store needs from the process without knowing it: the current trace (kept with
//! each event the store writes, so that deliveries join the trace of the request that caused
//! them) and a report of each committed write transaction (a span, when spans are exported).
//!
//! The service installs one [`StoreObserver`] at start-up; without one (the store's own tests,
//! the admin tools) events carry no trace and nothing is reported.

use std::future::Future;
use std::sync::OnceLock;
use std::time::SystemTime;

/// The service's side of tracing, as the store sees it.
pub trait StoreObserver: Send + Sync {
    /// The `traceparent` of the work under way in the calling task, if any.
    fn current_trace(&self) -> Option<String>;
    /// A write transaction ended (`committed` false: it failed while committing its effects).
    fn transaction(&self, started: SystemTime, ended: SystemTime, committed: bool);
    /// The same, for a transaction written on behalf of the work whose `traceparent` is given
    /// (a group commit writes several requests' records in one transaction, on a task of its
    /// own).
    fn transaction_in(
        &self,
        traceparent: &str,
        started: SystemTime,
        ended: SystemTime,
        committed: bool,
    );
    /// A group commit wrote `records` sends' records in one transaction.
    fn group_committed(&self, _records: usize) {}
    /// A storage failure (a full disk, an I/O error): writes fail until one succeeds again
    /// (`first`: the first failure since writes last succeeded).
    fn storage_failed(&self, _fault: StorageFault, _error: &str, _first: bool) {}
    /// Writes succeed again after storage failures.
    fn storage_recovered(&self) {}
}

static OBSERVER: OnceLock<Box<dyn StoreObserver>> = OnceLock::new();

/// Installs the process's observer (the first call wins; returns whether this one did).
pub fn install(observer: Box<dyn StoreObserver>) -> bool {
    OBSERVER.set(observer).is_ok()
}

tokio::task_local! {
    /// The trace of the work a task writes for (a group committer writes other tasks' records).
    static ON_BEHALF: Option<String>;
}

/// Runs `f` with `trace` as the current trace as far as the store is concerned.
pub(crate) async fn on_behalf_of<F: Future>(trace: Option<String>, f: F) -> F::Output {
    ON_BEHALF.scope(trace, f).await
}

pub(crate) fn current_trace() -> Option<String> {
    match ON_BEHALF.try_with(Clone::clone) {
        Ok(trace) => trace,
        Err(_) => OBSERVER.get().and_then(|o| o.current_trace()),
    }
}

pub(crate) fn group(records: usize) {
    if let Some(o) = OBSERVER.get() {
        o.group_committed(records);
    }
}

pub(crate) fn transaction_in(traceparent: &str, started: SystemTime, committed: bool) {
    if let Some(o) = OBSERVER.get() {
        o.transaction_in(traceparent, started, SystemTime::now(), committed);
    }
}

pub(crate) fn transaction(started: SystemTime, committed: bool) {
    if let Some(o) = OBSERVER.get() {
        o.transaction(started, SystemTime::now(), committed);
    }
}

pub(crate) fn storage_failed(fault: StorageFault, error: &str, first: bool) {
    if let Some(o) = OBSERVER.get() {
        o.storage_failed(fault, error, first);
    }
}

pub(crate) fn storage_recovered() {
    if let Some(o) = OBSERVER.get() {
        o.storage_recovered();
    }
}

/// Why writes fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    /// The storage is full (507 `storage_full`).
    Full,
    /// The storage failed to read or write (503 `service_unavailable`).
    Io,
}

impl StorageFault {
    /// `full` or `io` (the metric's label).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageFault::Full => "full",
            StorageFault::Io => "io",
        }
    }
}
