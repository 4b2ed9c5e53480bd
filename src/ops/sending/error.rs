//! Why a send did not happen: [`SendError`], the one error of every send. Its [`code`] is
//! stable (CONVENTIONS "Errors"); the v1 and legacy HTTP routes, flow triggers and the campaign
//! worker build their answers from `code`, [`message`] and [`details`], so a rule refuses a
//! send with the same code whoever asked.
//!
//! [`code`]: SendError::code
//! [`message`]: SendError::message
//! [`details`]: SendError::details

use serde_json::{Value, json};
use uuid::Uuid;

use crate::providers::ProviderError;
use crate::views::messages::MessageOut;
use switchboard_domain::channel::ChannelType;
use switchboard_domain::channel_selection::SelectionError;
use switchboard_domain::{FieldError, Timestamp, ValidationErrors};
use switchboard_store::{RecordedOutbound, StoreError};

use crate::ops::OpError;

/// Why a send did not happen. Each variant is one error code ([`SendError::code`]); the HTTP
/// status named here is the API's.
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
    /// 422 `unsupported_for_channel`: the channel's type cannot send this kind of message
    /// (CONVENTIONS "Every kind of message": `details.channel_type`).
    UnsupportedForChannel {
        channel_id: i64,
        channel_type: ChannelType,
        message: String,
    },
    /// 422 with the refusal's code (`invalid_channel`, `invalid_template`, `consent_required`):
    /// a catalog template send broke a rule of conversation initiation or campaign sends;
    /// `invalid_media`: a `whatsapp_cloud` media file could not be fetched or breaks WhatsApp's
    /// limits (nothing was sent or recorded).
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
    /// 404 `not_found`: the triggered flow does not exist in the organization.
    FlowNotFound,
    /// The store failed: `service_unavailable` (503) when it is unreachable, else
    /// `internal_error` (500); `not_found` when a row vanished during the send.
    Store(StoreError),
}

impl SendError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            SendError::Validation(_) => "validation_failed",
            SendError::Channel(SelectionError::Conflict) => "channel_conflict",
            SendError::Channel(SelectionError::NoDefault) => "no_default_channel",
            SendError::Channel(SelectionError::Invalid { .. }) => "invalid_channel",
            SendError::UnsupportedForChannel { .. } => "unsupported_for_channel",
            SendError::ChannelUnusable { .. } => "invalid_channel",
            SendError::Refused(r) => r.code,
            SendError::ConversationRequired => "conversation_required",
            SendError::OutsideServiceWindow { .. } => "outside_service_window",
            SendError::ProviderRejected { .. } => "provider_rejected",
            SendError::ProviderUnavailable(_) => "provider_unavailable",
            SendError::LostClaim => "idempotency_in_progress",
            SendError::FlowNotFound => "not_found",
            SendError::Store(StoreError::Unavailable(_)) => "service_unavailable",
            SendError::Store(StoreError::StorageFull(_)) => "storage_full",
            SendError::Store(StoreError::NotFound) => "not_found",
            SendError::Store(_) => "internal_error",
        }
    }

    /// The explanation for people (may change; the code does not).
    pub fn message(&self) -> String {
        match self {
            SendError::Validation(errors) => errors.summary(),
            SendError::Channel(sel) => sel.message(),
            SendError::ChannelUnusable { message, .. } => message.clone(),
            SendError::UnsupportedForChannel { message, .. } => message.clone(),
            SendError::Refused(r) => r.message.clone(),
            SendError::ConversationRequired => "This channel needs an open conversation with the contact for text, interactive and media messages: the contact must write first (or send a template).".into(),
            SendError::OutsideServiceWindow { .. } => "The 24-hour customer-service window of this conversation is closed: send a template instead.".into(),
            SendError::ProviderRejected { error, .. } => {
                format!("The provider rejected the message: {}", rejection_parts(error).2)
            }
            SendError::ProviderUnavailable(reason) => format!(
                "The messaging provider is unavailable ({reason}); nothing was sent. Retry with the same Idempotency-Key."
            ),
            SendError::LostClaim => {
                "A request with this Idempotency-Key is still being processed; retry shortly."
                    .into()
            }
            SendError::FlowNotFound => "The flow was not found.".into(),
            SendError::Store(e) => e.to_string(),
        }
    }

    /// What the code has to add (`None`: nothing).
    pub fn details(&self) -> Option<Value> {
        match self {
            SendError::Validation(errors) => Some(json!({ "fields": errors.0 })),
            SendError::Channel(SelectionError::Conflict) => Some(json!({ "fields": [
                FieldError::new("channel_id", "give channel_id or channel_slug, not both"),
                FieldError::new("channel_slug", "give channel_id or channel_slug, not both"),
            ] })),
            SendError::Channel(SelectionError::NoDefault) => None,
            SendError::Channel(SelectionError::Invalid {
                reason,
                source,
                channel_ids,
            }) => Some(json!({
                "reason": reason,
                "selected_by": source,
                "channel_ids": channel_ids,
            })),
            SendError::ChannelUnusable {
                channel_id, reason, ..
            } => Some(json!({
                "reason": reason,
                "channel_ids": [channel_id],
            })),
            SendError::UnsupportedForChannel {
                channel_id,
                channel_type,
                ..
            } => Some(json!({
                "channel_type": channel_type,
                "channel_ids": [channel_id],
            })),
            SendError::Refused(r) => Some(r.details.clone()),
            SendError::OutsideServiceWindow {
                conversation_uuid,
                last_inbound_at,
                window_expired_at,
            } => Some(json!({
                "conversation_uuid": conversation_uuid,
                "last_inbound_at": last_inbound_at,
                "window_expired_at": window_expired_at,
            })),
            SendError::ProviderRejected { recorded, error } => {
                let (http_status, code, message, details) = rejection_parts(error);
                Some(json!({
                    "provider": recorded.message.channel.channel_type,
                    "provider_status": http_status,
                    "provider_code": code,
                    "provider_message": message,
                    "provider_details": details,
                    "message_id": recorded.message.id,
                    "message_uuid": recorded.message.uuid,
                    "message": MessageOut::from(&recorded.message),
                }))
            }
            SendError::ConversationRequired
            | SendError::ProviderUnavailable(_)
            | SendError::LostClaim
            | SendError::FlowNotFound
            | SendError::Store(_) => None,
        }
    }
}

/// A provider's rejection: (HTTP status, provider code, message, provider details).
fn rejection_parts(error: &ProviderError) -> (Option<u16>, Option<Value>, String, Value) {
    match error {
        ProviderError::Rejected {
            http_status,
            code,
            message,
            details,
        } => (
            Some(*http_status),
            code.clone(),
            message.clone(),
            details.clone(),
        ),
        other => (None, None, format!("{other:?}"), Value::Null),
    }
}

impl From<StoreError> for SendError {
    fn from(e: StoreError) -> Self {
        SendError::Store(e)
    }
}

impl From<Refusal> for SendError {
    fn from(r: Refusal) -> Self {
        SendError::Refused(r)
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
    /// `invalid_channel`, `invalid_template`, `consent_required`, `invalid_media` or
    /// `validation_failed`.
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

    /// A media file a `whatsapp_cloud` send would upload cannot be sent (`invalid_media`):
    /// `reason` is `too_large`, `unsupported_type` or `unreachable`; `extra` adds what the
    /// reason has to say (`limit_bytes`, `sniffed_type`, `accepted_types`).
    pub(super) fn media(
        reason: &str,
        media_type: switchboard_domain::message::MediaType,
        message: String,
        extra: Value,
    ) -> Self {
        let mut details = json!({
            "reason": reason,
            "media_type": media_type,
            "fields": [FieldError::new("media_url", message.clone())],
        });
        if let (Some(d), Value::Object(extra)) = (details.as_object_mut(), extra) {
            d.extend(extra);
        }
        Refusal {
            code: "invalid_media",
            message,
            details,
        }
    }

    /// A flow's catalog template can no longer be sent (`invalid_template`).
    pub(super) fn flow_template(
        reason: &str,
        message: &str,
        flow: &switchboard_store::legacy::FlowRecord,
    ) -> Self {
        Refusal {
            code: "invalid_template",
            message: message.to_owned(),
            details: json!({ "reason": reason, "flow_uuid": flow.uuid }),
        }
    }

    /// The refusal of a failed send's error, when the error is one: the `campaign_send.refused`
    /// audit entry's form (a validation failure is "The request is invalid." there, a channel
    /// conflict has no details).
    pub(super) fn of_send_error(e: &SendError) -> Option<Refusal> {
        match e {
            SendError::Refused(r) => Some(r.clone()),
            SendError::Validation(errors) => Some(Refusal {
                code: e.code(),
                message: "The request is invalid.".into(),
                details: json!({ "fields": errors.0 }),
            }),
            SendError::Channel(sel) => Some(Refusal {
                code: e.code(),
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
                code: e.code(),
                message: message.clone(),
                details: json!({ "reason": reason, "channel_ids": [channel_id] }),
            }),
            SendError::UnsupportedForChannel { message, .. } => Some(Refusal {
                code: e.code(),
                message: message.clone(),
                details: e.details().unwrap_or_default(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_code_message_and_details() {
        let mut errors = ValidationErrors::new();
        errors.add("phone", "is required");
        let e = SendError::Validation(errors.clone());
        assert_eq!(e.code(), "validation_failed");
        assert_eq!(e.message(), "phone: is required");
        assert_eq!(e.details(), Some(json!({ "fields": errors.0 })));

        let e = SendError::Channel(SelectionError::Conflict);
        assert_eq!(e.code(), "channel_conflict");
        let details = e.details().unwrap();
        let named: Vec<_> = details["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["field"].as_str().unwrap(), f["issue"].is_string()))
            .collect();
        assert_eq!(named, [("channel_id", true), ("channel_slug", true)]);
        let e = SendError::Channel(SelectionError::NoDefault);
        assert_eq!((e.code(), e.details()), ("no_default_channel", None));

        let e = SendError::ChannelUnusable {
            channel_id: 7,
            reason: "not_configured",
            message: "no token".into(),
        };
        assert_eq!(
            (e.code(), e.message()),
            ("invalid_channel", "no token".into())
        );
        assert_eq!(
            e.details(),
            Some(json!({ "reason": "not_configured", "channel_ids": [7] }))
        );

        let e = SendError::UnsupportedForChannel {
            channel_id: 3,
            channel_type: ChannelType::Telegram,
            message: "telegram channels cannot send template messages.".into(),
        };
        assert_eq!(e.code(), "unsupported_for_channel");
        assert_eq!(
            e.details(),
            Some(json!({ "channel_type": "telegram", "channel_ids": [3] }))
        );

        let e = SendError::ConversationRequired;
        assert_eq!((e.code(), e.details()), ("conversation_required", None));
        let e = SendError::ProviderUnavailable("timed out".into());
        assert_eq!(e.code(), "provider_unavailable");
        assert!(e.message().contains("(timed out); nothing was sent"));
        assert_eq!(SendError::LostClaim.code(), "idempotency_in_progress");
        assert_eq!(
            SendError::Store(StoreError::Unavailable("down".into())).code(),
            "service_unavailable"
        );
        assert_eq!(
            SendError::Store(StoreError::Other("x".into())).code(),
            "internal_error"
        );
    }

    #[test]
    fn refusals_keep_their_code_and_the_audit_keeps_its_own_form() {
        let r = Refusal::template(
            "inactive",
            "The template is inactive.".into(),
            vec![],
            json!({}),
        );
        let e = SendError::from(r.clone());
        assert_eq!(e.code(), "invalid_template");
        assert_eq!(e.details(), Some(r.details.clone()));
        assert_eq!(Refusal::of_send_error(&e), Some(r));

        let r = Refusal::media(
            "too_large",
            switchboard_domain::message::MediaType::Image,
            "The file is larger than 5 MB.".into(),
            json!({ "limit_bytes": 5_242_880 }),
        );
        let e = SendError::from(r);
        assert_eq!(e.code(), "invalid_media");
        let details = e.details().unwrap();
        assert_eq!(
            (
                &details["reason"],
                &details["media_type"],
                &details["limit_bytes"]
            ),
            (&json!("too_large"), &json!("image"), &json!(5_242_880))
        );
        assert_eq!(details["fields"][0]["field"], "media_url");

        let mut errors = ValidationErrors::new();
        errors.add("a", "b");
        errors.add("c", "d");
        let audit = Refusal::of_send_error(&SendError::Validation(errors)).unwrap();
        assert_eq!(
            (audit.code, audit.message.as_str()),
            ("validation_failed", "The request is invalid.")
        );
        let audit = Refusal::of_send_error(&SendError::Channel(SelectionError::Conflict)).unwrap();
        assert_eq!((audit.code, audit.details), ("channel_conflict", json!({})));
        assert_eq!(
            Refusal::of_send_error(&SendError::ConversationRequired),
            None
        );
    }
}
