//! Operations: use cases that combine domain rules and storage and record what they cause
//! (outbox events, organization log entries). Shared by the HTTP API and the admin tools.

pub mod campaigns;
pub mod channels;
pub mod contacts;
pub mod flows;
pub mod groups;
pub mod keys;
pub mod message_events;
pub mod orgs;
pub mod receiving;
pub mod recovery;
pub mod samples;
pub mod sending;
pub mod template_sync;
pub mod templates;
pub mod users;
pub mod webhooks;

use switchboard_store::StoreError;

/// Why an operation was refused. `field` names the input the refusal concerns, when one does,
/// by the operation's own name for it (`name`, `provider_template_id`, `components[0].type`;
/// inputs checked together are joined by `/`, e.g. `params/language`). Callers say it in their
/// own terms: the admin tools as the `--flag` it came from (`cli::wording::error_line`).
#[derive(Debug)]
pub enum OpError {
    /// The input breaks a rule.
    Invalid {
        field: Option<String>,
        message: String,
    },
    /// Something named in the input does not exist.
    NotFound {
        field: Option<String>,
        message: String,
    },
    /// The input conflicts with the current state.
    Conflict {
        field: Option<String>,
        message: String,
    },
    Store(StoreError),
    /// A service the operation needs (a provider) could not be reached or refused; trying
    /// again later may work.
    Unavailable(String),
}

impl OpError {
    /// `field` breaks a rule.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        OpError::Invalid {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// The input breaks a rule that concerns no one field.
    pub fn invalid(message: impl Into<String>) -> Self {
        OpError::Invalid {
            field: None,
            message: message.into(),
        }
    }

    /// What `field` names does not exist.
    pub fn not_found_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        OpError::NotFound {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        OpError::NotFound {
            field: None,
            message: message.into(),
        }
    }

    /// `field` conflicts with the current state.
    pub fn conflict_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        OpError::Conflict {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        OpError::Unavailable(message.into())
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        OpError::Conflict {
            field: None,
            message: message.into(),
        }
    }

    /// The input the refusal concerns.
    pub fn field(&self) -> Option<&str> {
        match self {
            OpError::Invalid { field, .. }
            | OpError::NotFound { field, .. }
            | OpError::Conflict { field, .. } => field.as_deref(),
            OpError::Store(_) | OpError::Unavailable(_) => None,
        }
    }
}

impl std::fmt::Display for OpError {
    /// One line for people: `field: message`, or the message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Invalid { field, message }
            | OpError::NotFound { field, message }
            | OpError::Conflict { field, message } => match field {
                Some(field) => write!(f, "{field}: {message}"),
                None => f.write_str(message),
            },
            OpError::Store(e) => e.fmt(f),
            OpError::Unavailable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        OpError::Store(e)
    }
}

pub type OpResult<T> = Result<T, OpError>;
