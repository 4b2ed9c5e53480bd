//! The pure rules of webhooks: the event catalogue and subscriptions, endpoint fields, the
//! retry classes and delays, signing, and the events webhooks cause.

pub mod catalogue;
pub mod endpoint;
pub mod events;
pub mod redact;
pub mod retry;
pub mod signing;
