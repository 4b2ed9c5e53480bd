//! Operations: use cases that combine domain rules and storage and record what they cause
//! (outbox events, organization log entries). Shared by the HTTP API and the admin tools.

pub mod campaigns;
pub mod channels;
pub mod contacts;
pub mod flows;
pub mod keys;
pub mod message_events;
pub mod orgs;
pub mod receiving;
pub mod sending;
pub mod templates;
pub mod users;
pub mod webhooks;

use switchboard_store::StoreError;

/// Why an operation was refused, in one line for people.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The input breaks a rule.
    #[error("{0}")]
    Invalid(String),
    /// Something named in the input does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The input conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type OpResult<T> = Result<T, OpError>;
