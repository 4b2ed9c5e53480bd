//! Webhooks at run time: URL safety at connect time, the dispatcher that turns outbox
//! events into signed deliveries, and recoveries. (Retention is a worker: `crate::workers`.) The pure rules (catalogue, subscriptions,
//! retry classes, signing) are in `switchboard_domain::webhooks`.

pub mod dispatcher;
pub mod mtls;
pub mod recovery;
pub mod throttle;
pub mod url_safety;
