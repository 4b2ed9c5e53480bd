//! The answers of sends and batches, rendered from what their idempotency claims keep
//! (`switchboard_store::RecordedSend`, `BatchRecord`; see `http::recorded`): the first answer and every replay are the
//! same rendering of the same data, so a replay cannot drift from the answer it repeats.

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::messages::{ContactOut, ConversationOut, MessageOut};
use super::templates::{ConsentOut, TemplateOut};
use switchboard_domain::channel::ChannelIdentity;
use switchboard_store::RecordedOutbound;
use switchboard_store::queue::BatchRecord;

/// The body of a successful send: `201 {"message", "channel", "contact", "conversation"}`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SendResponse {
    pub message: MessageOut,
    /// The channel actually used.
    pub channel: ChannelIdentity,
    pub contact: ContactOut,
    /// The conversation the message belongs to (null when it belongs to none, e.g. a template
    /// on a WhatsApp channel without an open conversation).
    pub conversation: Option<ConversationOut>,
}

impl From<&RecordedOutbound> for SendResponse {
    fn from(r: &RecordedOutbound) -> Self {
        SendResponse {
            message: MessageOut::from(&r.message),
            channel: r.message.channel.clone(),
            contact: ContactOut::from(&r.contact),
            conversation: r.conversation.as_ref().map(ConversationOut::from),
        }
    }
}

/// The body of a successful catalog send: the send response plus the consent evidence stored
/// and the catalog template used.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CatalogSendResponse {
    #[serde(flatten)]
    pub send: SendResponse,
    #[schema(value_type = ConsentOut)]
    pub consent: Value,
    #[schema(value_type = TemplateOut)]
    pub template: Value,
}

/// What a catalog send's answer shows beside the record, kept with its claim
/// (`RecordedSend::extra`).
pub fn catalog_extra(consent: &ConsentOut, template: &TemplateOut) -> Value {
    serde_json::json!({ "consent": consent, "template": template })
}

/// The 201 body of a recorded send: the send response, and a catalog send's consent and
/// template (`extra`, [`catalog_extra`]) when it has them.
pub fn created_body(recorded: &RecordedOutbound, extra: Option<&Value>) -> Vec<u8> {
    let send = SendResponse::from(recorded);
    let body = match extra {
        Some(extra) => serde_json::to_vec(&CatalogSendResponse {
            send,
            consent: extra["consent"].clone(),
            template: extra["template"].clone(),
        }),
        None => serde_json::to_vec(&send),
    };
    body.expect("responses serialize")
}

/// A queued batch.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchAccepted {
    pub batch_id: Uuid,
    /// `queued`.
    pub status: String,
    pub total: i64,
}

/// The 202 body of a recorded batch.
pub fn accepted_body(b: &BatchRecord) -> Vec<u8> {
    serde_json::to_vec(&BatchAccepted {
        batch_id: b.uuid,
        status: "queued".into(),
        total: b.total,
    })
    .expect("responses serialize")
}
