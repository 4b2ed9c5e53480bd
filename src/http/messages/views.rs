//! The request and response bodies of the send endpoints (the message, contact, conversation,
//! template and consent objects in them are `crate::views`).

use serde::Deserialize;
use serde_json::Value;

/// Send text or interactive content.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendMessageRequest {
    /// The channel, by numeric id. Mutually exclusive with `channel_slug`.
    pub channel_id: Option<i64>,
    /// The channel by slug, UUID, provider identifier or normalized name.
    pub channel_slug: Option<String>,
    /// The recipient (preferred).
    pub contact_uuid: Option<String>,
    /// Legacy: the recipient's phone (E.164 or international form), resolved in the
    /// organization; a contact is created when none has it.
    pub phone: Option<String>,
    /// Reply to a message: the UUID of a message of the same contact, sent or received (not a
    /// reaction), which the recipient sees quoted (WhatsApp `context.message_id`, Telegram
    /// `reply_parameters`).
    #[schema(value_type = Option<String>, format = Uuid)]
    pub reply_to: Option<String>,
    /// The body text (1 to 4096 characters); required for `type: text`. For `interactive`, the
    /// body text when `interactive.body.text` is absent.
    pub message: Option<String>,
    /// `text` (default) or `interactive`; with `reaction`, `location` or `contacts` it is not
    /// needed, and when given it must name that kind.
    #[serde(rename = "type")]
    pub message_type: Option<String>,
    /// A WhatsApp Cloud API `interactive` object of type `button` (1 to 3 reply buttons) or
    /// `list` (up to 10 rows).
    #[schema(value_type = Option<Object>)]
    pub interactive: Option<Value>,
    /// Show a preview of the first URL in the text (WhatsApp, Telegram).
    pub preview_url: Option<bool>,
    /// A reaction instead of a text: `{"message_uuid": a message of the same contact,
    /// "emoji": one emoji, or "" to remove the reaction}` (WhatsApp).
    #[schema(value_type = Option<Object>)]
    pub reaction: Option<Value>,
    /// A location instead of a text: `{"latitude", "longitude", "name"?, "address"?}`.
    #[schema(value_type = Option<Object>)]
    pub location: Option<Value>,
    /// Contacts instead of a text: a non-empty list of WhatsApp contact objects (`name`
    /// `{"formatted_name", ...}`, `phones` `[{"phone", "type"}]`, ...); Telegram sends one.
    #[schema(value_type = Option<Vec<Object>>)]
    pub contacts: Option<Value>,
}

/// Send media by URL.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendMediaRequest {
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<String>,
    pub phone: Option<String>,
    /// Reply to a message: the UUID of a message of the same contact, sent or received (not a
    /// reaction), which the recipient sees quoted (WhatsApp `context.message_id`, Telegram
    /// `reply_parameters`).
    #[schema(value_type = Option<String>, format = Uuid)]
    pub reply_to: Option<String>,
    /// `document`, `image`, `audio`, `video` or `sticker`.
    pub media_type: Option<String>,
    /// An absolute http(s) URL the provider downloads the media from.
    pub media_url: Option<String>,
    /// The file name shown to the recipient (documents).
    pub file_name: Option<String>,
    /// Caption (up to 1024 characters; not for audio and stickers).
    pub caption: Option<String>,
}

/// Send a provider template. Three forms:
///
/// * a plain template send: `template` (`name`, `language`, `components`) to `contact_uuid` or
///   `phone`, on the channel chosen as for every send;
/// * a conversation initiation (`ensure_conversation: true`): explicit `channel_id` of an
///   active whatsapp_cloud channel, `phone` (or `contact_uuid`), `template_uuid` of an active,
///   approved catalog template of that channel, `consent`, optionally `first_name` and
///   `template` (whose `name`/`language` must agree with the catalog; its `components` carry
///   the parameters, which must fit the template);
/// * a synchronized campaign recipient: a plain template send that also carries
///   `template_uuid` and `consent`; the same template and consent rules apply, on the channel
///   chosen as for every send, without opening a conversation, and every such send is audited
///   (`campaign_send.validated` / `campaign_send.refused`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct SendTemplateRequest {
    /// The channel by id. Required for conversation initiation (an active whatsapp_cloud
    /// channel); `channel_slug` and default channels do not count there.
    pub channel_id: Option<i64>,
    /// The channel by slug, UUID, provider identifier or normalized name (not for initiation).
    pub channel_slug: Option<String>,
    /// The recipient (preferred for plain sends).
    pub contact_uuid: Option<String>,
    /// The recipient's phone, normalized to E.164 (`+4915123456789`); the organization's contact
    /// with it is used, or created (with `first_name` on initiation).
    pub phone: Option<String>,
    /// Reply to a message: the UUID of a message of the same contact, sent or received (not a
    /// reaction), which the recipient sees quoted (WhatsApp `context.message_id`, Telegram
    /// `reply_parameters`).
    #[schema(value_type = Option<String>, format = Uuid)]
    pub reply_to: Option<String>,
    /// `{"name": "order_update", "language": "en_US", "components": [...]}` (WhatsApp Cloud API
    /// components with their parameters; `language` may also be `{"code": "en_US"}`). Required
    /// for plain sends; optional for catalog sends (the catalog template gives name and
    /// language, which must agree when given).
    #[schema(value_type = Option<Object>)]
    pub template: Option<Value>,
    /// `true`: conversation initiation (specification 4.3).
    pub ensure_conversation: Option<bool>,
    /// The catalog template (initiation and campaign sends): active, approved, owned by the
    /// channel.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub template_uuid: Option<String>,
    /// Opt-in evidence (initiation and campaign sends).
    #[schema(value_type = Option<ConsentInput>)]
    pub consent: Option<Value>,
    /// The name of a contact created by an initiation (1 to 200 characters).
    pub first_name: Option<String>,
}

/// The opt-in evidence of a catalog template send: the `consent` object's schema, and through
/// it the members a v1 body may give (`requests::FixedMembers`); its values are read by the
/// domain's `parse_consent`, which names each problem.
#[allow(dead_code)] // Read through its schema, never built.
#[derive(utoipa::ToSchema)]
pub struct ConsentInput {
    /// Must be `true`.
    confirmed: bool,
    /// `utility`, `marketing` or `authentication`; must match the template's category.
    purpose: String,
    /// `customer_request`, `website_form`, `checkout`, `in_person`, `phone_call` or `import`.
    source: String,
    /// Where the opt-in can be found (a form submission id, an order number, ...): 1 to 256
    /// characters.
    reference: String,
    /// When the opt-in was captured: RFC 3339, not in the future (an operator may allow some
    /// clock skew with `SWITCHBOARD_CONSENT_CLOCK_SKEW`; none by default).
    #[schema(value_type = String, format = DateTime)]
    captured_at: String,
}

pub use crate::views::sends::{CatalogSendResponse, SendResponse};
