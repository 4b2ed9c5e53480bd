//! A message's journey as `GET /messages/{uuid}` shows it (`timeline`): what happened to it,
//! oldest first. The store keeps the steps that are not rows elsewhere (accepted, the provider
//! request and response, each status change); webhook attempts come from the delivery ledger.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::MessageStatus;

/// What a step of the timeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// The API accepted the send (the request passed every check).
    Accepted,
    /// The call to the provider began.
    ProviderRequest,
    /// The provider answered: its message id, or its error code.
    ProviderResponse,
    /// The message's status changed (with the provider's code when it failed).
    Status,
    /// One attempt to deliver one of the message's events to a webhook endpoint.
    WebhookAttempt,
    /// The customer edited the message (its content is the edited one).
    Edited,
    /// The customer deleted the message (its content is gone).
    Deleted,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Accepted => "accepted",
            StepKind::ProviderRequest => "provider_request",
            StepKind::ProviderResponse => "provider_response",
            StepKind::Status => "status",
            StepKind::WebhookAttempt => "webhook_attempt",
            StepKind::Edited => "edited",
            StepKind::Deleted => "deleted",
        }
    }

    pub fn parse(s: &str) -> Option<StepKind> {
        [
            StepKind::Accepted,
            StepKind::ProviderRequest,
            StepKind::ProviderResponse,
            StepKind::Status,
            StepKind::WebhookAttempt,
            StepKind::Edited,
            StepKind::Deleted,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The `provider_code` and our `code` of a message's `error` object, when it has them.
fn codes(error: Option<&Value>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(e) = error {
        for key in ["code", "provider_code"] {
            if let Some(v) = e.get(key).filter(|v| !v.is_null()) {
                out.insert(key.to_owned(), v.clone());
            }
        }
    }
    out
}

/// The detail of a `provider_response` step: the provider's message id, or the codes of its
/// refusal.
pub fn provider_response(provider_message_id: Option<&str>, error: Option<&Value>) -> Value {
    match (provider_message_id, error) {
        (Some(id), _) => json!({ "outcome": "accepted", "provider_message_id": id }),
        (None, error) => {
            let mut detail = codes(error);
            detail.insert("outcome".into(), json!("rejected"));
            Value::Object(detail)
        }
    }
}

/// The detail of a `status` step: the new status, with the codes when it is `failed`.
pub fn status(status: MessageStatus, error: Option<&Value>) -> Value {
    let mut detail = if status == MessageStatus::Failed {
        codes(error)
    } else {
        Map::new()
    };
    detail.insert("status".into(), json!(status.as_str()));
    Value::Object(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in [
            StepKind::Accepted,
            StepKind::ProviderRequest,
            StepKind::ProviderResponse,
            StepKind::Status,
            StepKind::WebhookAttempt,
            StepKind::Edited,
            StepKind::Deleted,
        ] {
            assert_eq!(StepKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
        assert_eq!(StepKind::parse("sent"), None);
    }

    #[test]
    fn details_carry_the_provider_codes_only_when_failed() {
        let error = json!({"code": "provider_rejected", "provider_code": 131026, "message": "x"});
        assert_eq!(
            status(MessageStatus::Failed, Some(&error)),
            json!({"status": "failed", "code": "provider_rejected", "provider_code": 131026})
        );
        assert_eq!(
            status(MessageStatus::Delivered, Some(&error)),
            json!({"status": "delivered"})
        );
        assert_eq!(
            provider_response(Some("wamid.1"), None),
            json!({"outcome": "accepted", "provider_message_id": "wamid.1"})
        );
        assert_eq!(
            provider_response(None, Some(&error)),
            json!({"outcome": "rejected", "code": "provider_rejected", "provider_code": 131026})
        );
    }
}
