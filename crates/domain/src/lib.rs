//! Switchboard's domain: everything that parses, validates or decides, free of I/O.
//!
//! This crate is the bottom layer of the workspace: it depends on no other Switchboard crate,
//! so nothing here can reach the store, HTTP or a provider. See `docs/architecture.md`.

pub mod api_key;
pub mod channel;
pub mod channel_selection;
pub mod clock;
pub mod contact;
pub mod event;
pub mod message;
pub mod org_log;
pub mod organization;
pub mod pacing;
pub mod permission;
pub mod phone;
pub mod scope;
pub mod scope_catalogue;
pub mod sealed;
pub mod template;
pub mod time;
#[cfg(feature = "sqlx")]
mod time_sql;
pub mod trace;
pub mod user;
pub mod validation;
pub mod webhooks;

pub use time::Timestamp;
pub use validation::{FieldError, ValidationErrors};
