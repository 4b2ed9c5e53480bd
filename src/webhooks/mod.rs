//! Webhooks at run time: the dispatcher that turns outbox events into signed deliveries
//! (checking URLs at connect time with `crate::url_safety`), and recoveries. (Retention is a worker: `crate::workers`.) The pure rules (catalogue, subscriptions,
//! retry classes, signing) are in `switchboard_domain::webhooks`.

pub mod dispatcher;
pub mod mtls;
pub mod recovery;
pub mod throttle;
