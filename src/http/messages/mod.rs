//! Messages: `POST /api/v1/integrations/messages` (text and interactive), `/messages/media`,
//! `/messages/template` (scope `messages:write`, `Idempotency-Key` required) and `GET
//! /api/v1/integrations/messages` (history, scope `messages:read`).
//!
//! * [`views`]: request and response bodies;
//! * [`requests`]: a body, checked for shape, becomes a send plan;
//! * [`send`]: the handlers and the frame every send shares (also the legacy `/api/send*`
//!   routes and flow triggers); the rules are `ops::sending`'s;
//! * [`history`]: the message history.

pub mod batch;
pub mod history;
pub mod journey;
pub mod read;
pub mod requests;
pub mod send;
pub mod views;

use axum::Router;
use axum::routing::get;

use crate::views::messages::{ContactOut, ConversationOut, MessageOut};

use super::state::AppState;

pub use history::{HistoryQuery, list_messages};
pub use requests::{
    Addressing, SendPlan, addressing, media_request, template_request, text_request,
};
pub use send::{Route, send_error, send_frame, send_media, send_message, send_template};
pub(crate) use send::{plain_outcome, send_completion, send_context};
pub use views::{
    CatalogSendResponse, ConsentInput, SendMediaRequest, SendMessageRequest, SendResponse,
    SendTemplateRequest,
};

pub const MESSAGES_PATH: &str = "/api/v1/integrations/messages";

pub const MESSAGE_PATH: &str = "/api/v1/integrations/messages/{uuid}";

pub const MEDIA_PATH: &str = "/api/v1/integrations/messages/media";

pub const TEMPLATE_PATH: &str = "/api/v1/integrations/messages/template";

/// The longest `channel_slug` looked at.
const MAX_SLUG_INPUT: usize = 200;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(MESSAGES_PATH, get(list_messages).post(send_message))
        .route(MEDIA_PATH, axum::routing::post(send_media))
        .route(TEMPLATE_PATH, axum::routing::post(send_template))
        .route(MESSAGE_PATH, get(journey::get_message))
        .route(read::READ_PATH, axum::routing::post(read::mark_read))
        .route(batch::BATCH_PATH, axum::routing::post(batch::send_batch))
        .route(batch::BATCH_STATUS_PATH, get(batch::get_batch))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        send::send_message,
        send::send_media,
        send::send_template,
        history::list_messages,
        journey::get_message,
        read::mark_read,
        batch::send_batch,
        batch::get_batch
    ),
    components(schemas(
        SendMessageRequest,
        SendMediaRequest,
        SendTemplateRequest,
        SendResponse,
        CatalogSendResponse,
        ConsentInput,
        crate::views::templates::ConsentOut,
        crate::views::templates::TemplateOut,
        MessageOut,
        journey::MessageWithTimeline,
        read::ReadRequest,
        read::ReadAccepted,
        batch::BatchRequest,
        batch::BatchAccepted,
        batch::BatchOut,
        journey::TimelineStep,
        switchboard_domain::message::timeline::StepKind,
        ContactOut,
        ConversationOut
    ))
)]
pub struct MessagesApi;
