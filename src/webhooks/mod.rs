//! Webhooks: the event catalogue, subscriptions, signing, URL safety and the dispatcher that
//! turns outbox events into signed deliveries.

pub mod catalogue;
pub mod dispatcher;
pub mod endpoint;
pub mod events;
pub mod purge;
pub mod retry;
pub mod signing;
pub mod url_safety;
