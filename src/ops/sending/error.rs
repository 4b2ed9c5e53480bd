//! Why a send did not happen.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::providers::ProviderError;
use switchboard_domain::channel_selection::SelectionError;
use switchboard_domain::{FieldError, Timestamp, ValidationErrors};
use switchboard_store::{RecordedOutbound, StoreError};

use crate::ops::OpError;

/// Why a send did not happen (each is one error code of the API).
#[derive(Debug)]
pub enum SendError {
    /// 422 `validation_failed`.
    Validation(ValidationErrors),
    /// 422 `channel_conflict`, `no_default_channel` or `invalid_channel`.
    Channel(SelectionError),
    /// 422 `invalid_channel`: the channel cannot do this; `reason` is `not_configured` (its
    /// provider settings lack what this needs) or `unsupported` (its type cannot).
    ChannelUnusable {
        channel_id: i64,
        reason: &'static str,
        message: String,
    },
    /// 422 with the refusal's code (`invalid_channel`, `invalid_template`, `consent_required`):
    /// a catalog template send broke a rule of conversation initiation or campaign sends.
    Refused(Refusal),
    /// 422 `conversation_required`.
    ConversationRequired,
    /// 422 `outside_service_window`.
    OutsideServiceWindow {
        conversation_uuid: Uuid,
        last_inbound_at: Option<Timestamp>,
        window_expired_at: Option<Timestamp>,
    },
    /// 422 `provider_rejected`; the message was recorded as `failed`.
    ProviderRejected {
        recorded: Box<RecordedOutbound>,
        error: ProviderError,
    },
    /// 503 `provider_unavailable`; nothing was recorded.
    ProviderUnavailable(String),
    /// 409 `idempotency_in_progress`: another request took the idempotency key over while this
    /// one ran; nothing was recorded.
    LostClaim,
    Store(StoreError),
}

impl From<StoreError> for SendError {
    fn from(e: StoreError) -> Self {
        SendError::Store(e)
    }
}

impl From<OpError> for SendError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Store(s) => SendError::Store(s),
            other => SendError::Store(StoreError::Other(other.to_string())),
        }
    }
}

/// Why a catalog send is refused: a 422 with a stable code and details.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// `invalid_channel`, `invalid_template`, `consent_required` or `validation_failed`.
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

impl Refusal {
    pub(super) fn channel(
        reason: &str,
        channel_ids: Vec<i64>,
        field: &str,
        message: String,
    ) -> Self {
        Refusal {
            code: "invalid_channel",
            details: json!({
                "reason": reason,
                "channel_ids": channel_ids,
                "fields": [FieldError::new(field, message.clone())],
            }),
            message,
        }
    }

    pub(super) fn template(
        reason: &str,
        message: String,
        fields: Vec<FieldError>,
        extra: Value,
    ) -> Self {
        let mut details = json!({ "reason": reason, "fields": fields });
        if let (Some(d), Value::Object(extra)) = (details.as_object_mut(), extra) {
            d.extend(extra);
        }
        Refusal {
            code: "invalid_template",
            message,
            details,
        }
    }

    pub(super) fn consent(errors: ValidationErrors, extra: Value) -> Self {
        let message = match errors.0.as_slice() {
            [one] => format!(
                "Consent evidence is required and must be valid: {}: {}",
                one.field, one.issue
            ),
            many => format!(
                "Consent evidence is required and must be valid: {} problems.",
                many.len()
            ),
        };
        let mut details = json!({ "fields": errors.0 });
        if let (Some(d), Value::Object(extra)) = (details.as_object_mut(), extra) {
            d.extend(extra);
        }
        Refusal {
            code: "consent_required",
            message,
            details,
        }
    }

    /// The refusal of a failed send's error, when the error is one (for the campaign audit).
    pub(super) fn of_send_error(e: &SendError) -> Option<Refusal> {
        match e {
            SendError::Refused(r) => Some(r.clone()),
            SendError::Validation(errors) => Some(Refusal {
                code: "validation_failed",
                message: "The request is invalid.".into(),
                details: json!({ "fields": errors.0 }),
            }),
            SendError::Channel(sel) => Some(Refusal {
                code: match sel {
                    SelectionError::Conflict => "channel_conflict",
                    SelectionError::NoDefault => "no_default_channel",
                    SelectionError::Invalid { .. } => "invalid_channel",
                },
                message: sel.message(),
                details: match sel {
                    SelectionError::Invalid {
                        reason,
                        source,
                        channel_ids,
                    } => {
                        json!({ "reason": reason, "selected_by": source, "channel_ids": channel_ids })
                    }
                    _ => json!({}),
                },
            }),
            SendError::ChannelUnusable {
                channel_id,
                reason,
                message,
            } => Some(Refusal {
                code: "invalid_channel",
                message: message.clone(),
                details: json!({ "reason": reason, "channel_ids": [channel_id] }),
            }),
            _ => None,
        }
    }
}
