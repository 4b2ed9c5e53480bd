//! Answers rendered from what a completed idempotency claim keeps ([`Stored`]): a response's
//! bytes as they are, a recorded send as `views::sends` and the provider's rejection show it, a
//! recorded batch as its 202. The send paths answer through the same functions, so that the
//! first answer and every replay are one rendering of the same data.

use axum::http::StatusCode;
use serde_json::Value;

use super::error::{ErrorBody, ErrorObject};
use crate::ops::sending::SendError;
use crate::providers::ProviderError;
use crate::views::sends::{accepted_body, created_body};
use switchboard_store::{RecordedOutbound, RecordedSend, Stored};

/// The status and body of a kept answer.
pub fn answer(stored: &Stored) -> (StatusCode, Vec<u8>) {
    match stored {
        Stored::Response(r) => (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK),
            r.body.clone(),
        ),
        Stored::Send(s) => send_answer(s),
        Stored::Batch(b) => (StatusCode::ACCEPTED, accepted_body(b)),
    }
}

/// A recorded send's answer: 201 with the send response, or the 422 `provider_rejected` of a
/// message the provider refused (its body names the request that sent it).
pub fn send_answer(s: &RecordedSend) -> (StatusCode, Vec<u8>) {
    if s.status == StatusCode::CREATED.as_u16() {
        return (
            StatusCode::CREATED,
            created_body(&s.recorded, s.extra.as_ref()),
        );
    }
    let e = SendError::ProviderRejected {
        recorded: Box::new(s.recorded.clone()),
        error: rejection_of(&s.recorded),
    };
    let status = StatusCode::from_u16(s.status).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    (
        status,
        error_body(e.code(), &e.message(), e.details(), s.request_id.as_deref()),
    )
}

/// An error body, with the id of the request it answers.
pub fn error_body(
    code: &str,
    message: &str,
    details: Option<Value>,
    request_id: Option<&str>,
) -> Vec<u8> {
    serde_json::to_vec(&ErrorBody {
        error: ErrorObject {
            code: code.to_owned(),
            message: message.to_owned(),
            request_id: request_id.map(str::to_owned),
            details,
        },
    })
    .expect("error bodies serialize")
}

/// The provider's rejection as a failed message keeps it (`ProviderError::to_json`).
fn rejection_of(recorded: &RecordedOutbound) -> ProviderError {
    let e = recorded.message.error.clone().unwrap_or_default();
    ProviderError::Rejected {
        http_status: e["provider_status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(0),
        code: e.get("provider_code").cloned().filter(|c| !c.is_null()),
        message: e["message"].as_str().unwrap_or_default().to_owned(),
        details: e.get("provider_details").cloned().unwrap_or_default(),
    }
}
