//! Domain types: everything that parses, validates or decides lives here, free of I/O.

pub mod api_key;
pub mod channel;
pub mod channel_selection;
pub mod contact;
pub mod event;
pub mod message;
pub mod org_log;
pub mod organization;
pub mod permission;
pub mod phone;
pub mod scope;
pub mod scope_catalogue;
pub mod template;
pub mod time;
pub mod user;
pub mod validation;

pub use time::Timestamp;
pub use validation::{FieldError, ValidationErrors};
