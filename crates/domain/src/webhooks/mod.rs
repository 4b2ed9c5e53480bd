//! The pure rules of webhooks: the event catalogue and subscriptions, endpoint fields, the
//! retry classes and delays, the delivery state machine and endpoint health, the claim policy,
//! retention by partition, signing, and the events webhooks cause.

pub mod catalogue;
pub mod claim;
pub mod delivery;
pub mod destination;
pub mod endpoint;
pub mod events;
pub mod filter;
pub mod redact;
pub mod retention;
pub mod retry;
pub mod signing;
