//! What the store needs from the process without knowing it: the current trace (kept with
//! each event the store writes, so that deliveries join the trace of the request that caused
//! them) and a report of each committed write transaction (a span, when spans are exported).
//!
//! The service installs one [`StoreObserver`] at start-up; without one (the store's own tests,
//! the admin tools) events carry no trace and nothing is reported.

use std::sync::OnceLock;
use std::time::SystemTime;

/// The service's side of tracing, as the store sees it.
pub trait StoreObserver: Send + Sync {
    /// The `traceparent` of the work under way in the calling task, if any.
    fn current_trace(&self) -> Option<String>;
    /// A write transaction ended (`committed` false: it failed while committing its effects).
    fn transaction(&self, started: SystemTime, ended: SystemTime, committed: bool);
}

static OBSERVER: OnceLock<Box<dyn StoreObserver>> = OnceLock::new();

/// Installs the process's observer (the first call wins; returns whether this one did).
pub fn install(observer: Box<dyn StoreObserver>) -> bool {
    OBSERVER.set(observer).is_ok()
}

pub(crate) fn current_trace() -> Option<String> {
    OBSERVER.get().and_then(|o| o.current_trace())
}

pub(crate) fn transaction(started: SystemTime, committed: bool) {
    if let Some(o) = OBSERVER.get() {
        o.transaction(started, SystemTime::now(), committed);
    }
}
