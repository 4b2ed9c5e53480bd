//! Telegram Bot API inbound messages mapped into the domain's [`MessageKind`] and
//! [`InboundContext`] (CONVENTIONS "Every kind of message, in and out").
//!
//! A `Message`: `text`; `photo` (the largest size), `video`, `video_note`, `voice` (`voice`),
//! `audio`, `document`, `sticker` (`animated` for animated and video stickers), `animation`
//! (`animated`); `contact` (one, as a WhatsApp contact object); `location`; `venue` (a location
//! with a name and an address); anything else is `unsupported` with its field as the provider
//! type. A `callback_query` is a `button_reply`; a `message_reaction` a `reaction`.

use serde_json::{Value, json};

use super::whatsapp_kinds::{number_of, text_of};
use switchboard_domain::message::{
    ContactsMember, InboundContext, LocationMember, MediaMember, MediaType, MessageKind, ReplyTo,
    reaction,
};

/// The fields of a `Message` that are not its content (metadata, service fields we read
/// elsewhere): a message with only these and an unknown content field is `unsupported`, named
/// by that field.
const METADATA: &[&str] = &[
    "message_id",
    "message_thread_id",
    "from",
    "sender_chat",
    "sender_boost_count",
    "sender_business_bot",
    "date",
    "business_connection_id",
    "chat",
    "forward_origin",
    "forward_from",
    "forward_from_chat",
    "forward_from_message_id",
    "forward_signature",
    "forward_sender_name",
    "forward_date",
    "is_topic_message",
    "is_automatic_forward",
    "reply_to_message",
    "external_reply",
    "quote",
    "reply_to_story",
    "via_bot",
    "edit_date",
    "has_protected_content",
    "is_from_offline",
    "media_group_id",
    "author_signature",
    "entities",
    "caption",
    "caption_entities",
    "show_caption_above_media",
    "has_media_spoiler",
    "link_preview_options",
    "effect_id",
    "reply_markup",
];

/// The kind of a `Message` (its NUL characters already removed).
pub fn kind_of(m: &Value) -> MessageKind {
    if let Some(text) = text_of(m.get("text")) {
        return MessageKind::text(text);
    }
    if let Some(sizes) = m.get("photo").and_then(Value::as_array) {
        // The sizes come smallest first; the largest by area (the last when not given).
        let largest = sizes.iter().max_by_key(|s| {
            let side = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0);
            side("width") * side("height")
        });
        if let Some(kind) = largest.and_then(|p| media(m, MediaType::Image, p, false, false)) {
            return kind;
        }
    }
    // `animation` comes with a `document` too: it goes first.
    for (field, media_type, voice) in [
        ("animation", MediaType::Video, false),
        ("video", MediaType::Video, false),
        ("video_note", MediaType::Video, false),
        ("voice", MediaType::Audio, true),
        ("audio", MediaType::Audio, false),
        ("document", MediaType::Document, false),
        ("sticker", MediaType::Sticker, false),
    ] {
        let Some(obj) = m.get(field).filter(|o| o.is_object()) else {
            continue;
        };
        let animated = field == "animation"
            || (field == "sticker"
                && (obj.get("is_animated").and_then(Value::as_bool) == Some(true)
                    || obj.get("is_video").and_then(Value::as_bool) == Some(true)));
        if let Some(kind) = media(m, media_type, obj, voice, animated) {
            return kind;
        }
    }
    if let Some(c) = m.get("contact").filter(|c| c.is_object()) {
        return contact(c);
    }
    // A venue carries its `location` too: it goes first.
    if let Some(v) = m.get("venue").filter(|v| v.is_object()) {
        if let Some(kind) = location(v.get("location"), v) {
            return kind;
        }
    }
    if let Some(kind) = location(m.get("location"), &Value::Null) {
        return kind;
    }
    let provider_type = m
        .as_object()
        .and_then(|o| o.keys().find(|k| !METADATA.contains(&k.as_str())).cloned());
    unsupported(provider_type.as_deref())
}

/// An `unsupported` message, logged once at `warn` with the provider's type (never the body).
pub fn unsupported(provider_type: Option<&str>) -> MessageKind {
    super::warn_unsupported_once("telegram", provider_type);
    MessageKind::unsupported(provider_type)
}

fn media(
    m: &Value,
    media_type: MediaType,
    obj: &Value,
    voice: bool,
    animated: bool,
) -> Option<MessageKind> {
    Some(MessageKind::Media {
        media: MediaMember {
            media_type,
            media_id: Some(text_of(obj.get("file_id"))?),
            mime_type: text_of(obj.get("mime_type")),
            sha256: None,
            caption: text_of(m.get("caption")),
            file_name: text_of(obj.get("file_name")),
            voice,
            animated,
        },
    })
}

/// Telegram's `Contact` as a WhatsApp contact object: `name` (`formatted_name`, `first_name`,
/// `last_name`) and one phone (with the Telegram user id when it has one).
fn contact(c: &Value) -> MessageKind {
    let first = text_of(c.get("first_name"));
    let last = text_of(c.get("last_name"));
    let formatted = [first.as_deref(), last.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let mut contact = json!({
        "name": {"formatted_name": formatted, "first_name": first, "last_name": last},
        "phones": [],
    });
    if let Some(phone) = text_of(c.get("phone_number")) {
        contact["phones"] = json!([{"phone": phone, "type": null, "wa_id": null}]);
    }
    if let Some(user_id) = text_of(c.get("user_id")) {
        contact["telegram_user_id"] = json!(user_id);
    }
    MessageKind::Contacts {
        contacts: ContactsMember {
            contacts: vec![contact],
        },
    }
}

/// A `Location` (with a venue's `title` and `address` as name and address).
fn location(loc: Option<&Value>, venue: &Value) -> Option<MessageKind> {
    let loc = loc?;
    let latitude = number_of(loc.get("latitude")).filter(|l| (-90.0..=90.0).contains(l))?;
    let longitude = number_of(loc.get("longitude")).filter(|l| (-180.0..=180.0).contains(l))?;
    Some(MessageKind::Location {
        location: LocationMember {
            latitude,
            longitude,
            name: text_of(venue.get("title")),
            address: text_of(venue.get("address")),
            url: None,
        },
    })
}

/// The context of a `Message`: `reply_to_message` (its provider id is `chat:message_id`) and
/// whether it was forwarded (`forward_origin`, or `forward_date` in older updates).
pub fn context_of(m: &Value, chat_id: &str) -> InboundContext {
    InboundContext {
        reply_to: m
            .pointer("/reply_to_message/message_id")
            .and_then(|id| text_of(Some(id)))
            .map(|id| ReplyTo {
                message_uuid: None,
                provider_message_id: format!("{chat_id}:{id}"),
            }),
        forwarded: m.get("forward_origin").is_some() || m.get("forward_date").is_some(),
        frequently_forwarded: false,
        referral: None,
    }
}

/// A `callback_query` as a `button_reply`: `id` its `data`, `title` the text of the pressed
/// button when the update carries the keyboard (null otherwise).
pub fn button_reply(q: &Value) -> MessageKind {
    let data = text_of(q.get("data"));
    let title = q
        .pointer("/message/reply_markup/inline_keyboard")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .find(|b| data.is_some() && text_of(b.get("callback_data")) == data)
        .and_then(|b| text_of(b.get("text")));
    MessageKind::Interactive {
        interactive: json!({
            "type": "button_reply",
            "button_reply": {"id": data.unwrap_or_default(), "title": title},
        }),
    }
}

/// A `message_reaction` update as a `reaction` to `chat:message_id`: the first emoji of
/// `new_reaction`, or null when the reactions were removed (a custom emoji or paid reaction
/// has no emoji either).
pub fn reaction_of(r: &Value, chat_id: &str) -> Option<MessageKind> {
    let target = text_of(r.get("message_id"))?;
    let emoji = r
        .get("new_reaction")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|e| {
            (e.get("type").and_then(Value::as_str) == Some("emoji"))
                .then(|| text_of(e.get("emoji")))
                .flatten()
        });
    Some(reaction(emoji, None, &format!("{chat_id}:{target}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(v: Value) -> Value {
        serde_json::to_value(kind_of(&v)).unwrap()
    }

    #[test]
    fn photo_takes_the_largest_size() {
        let v = kind(
            json!({"message_id": 5, "date": 1, "caption": "look", "photo": [
                {"file_id": "small", "file_unique_id": "a", "width": 90, "height": 60},
                {"file_id": "large", "file_unique_id": "c", "width": 1280, "height": 853},
                {"file_id": "medium", "file_unique_id": "b", "width": 320, "height": 213}
            ]}),
        );
        assert_eq!(
            v,
            json!({"type": "media", "media": {"media_type": "image", "media_id": "large",
                "mime_type": null, "sha256": null, "caption": "look", "file_name": null,
                "voice": false, "animated": false}})
        );
    }

    #[test]
    fn media_kinds() {
        let cases = [
            (
                json!({"voice": {"file_id": "v", "duration": 2, "mime_type": "audio/ogg"}}),
                "audio",
                true,
                false,
            ),
            (
                json!({"audio": {"file_id": "a", "duration": 2, "file_name": "s.mp3"}}),
                "audio",
                false,
                false,
            ),
            (
                json!({"video": {"file_id": "v", "width": 1, "height": 1, "duration": 1}}),
                "video",
                false,
                false,
            ),
            (
                json!({"video_note": {"file_id": "n", "length": 1, "duration": 1}}),
                "video",
                false,
                false,
            ),
            (
                json!({"document": {"file_id": "d", "file_name": "a.pdf"}}),
                "document",
                false,
                false,
            ),
            (
                json!({"sticker": {"file_id": "s", "is_animated": true, "is_video": false}}),
                "sticker",
                false,
                true,
            ),
            (
                json!({"animation": {"file_id": "g", "mime_type": "video/mp4"}, "document": {"file_id": "g"}}),
                "video",
                false,
                true,
            ),
        ];
        for (m, media_type, voice, animated) in cases {
            let v = kind(m.clone());
            assert_eq!(v["type"], "media", "{m}");
            assert_eq!(v["media"]["media_type"], media_type, "{m}");
            assert_eq!(v["media"]["voice"], voice, "{m}");
            assert_eq!(v["media"]["animated"], animated, "{m}");
        }
    }

    #[test]
    fn contacts_locations_venues() {
        assert_eq!(
            kind(
                json!({"contact": {"phone_number": "+4915123456789", "first_name": "Ann", "last_name": "Lee", "user_id": 42}})
            ),
            json!({"type": "contacts", "contacts": {"contacts": [{
                "name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
                "phones": [{"phone": "+4915123456789", "type": null, "wa_id": null}],
                "telegram_user_id": "42"}]}})
        );
        assert_eq!(
            kind(json!({"location": {"latitude": 52.52, "longitude": 13.405}})),
            json!({"type": "location", "location": {"latitude": 52.52, "longitude": 13.405,
                "name": null, "address": null, "url": null}})
        );
        assert_eq!(
            kind(json!({"location": {"latitude": 52.52, "longitude": 13.405},
                "venue": {"location": {"latitude": 52.52, "longitude": 13.405}, "title": "Cafe", "address": "Main St 1"}})),
            json!({"type": "location", "location": {"latitude": 52.52, "longitude": 13.405,
                "name": "Cafe", "address": "Main St 1", "url": null}})
        );
    }

    #[test]
    fn other_kinds_are_unsupported() {
        assert_eq!(
            kind(
                json!({"message_id": 1, "date": 1, "chat": {"id": 1}, "from": {"id": 1}, "dice": {"emoji": "🎲", "value": 3}})
            ),
            json!({"type": "unsupported", "unsupported": {"provider_type": "dice", "errors": []}})
        );
        assert_eq!(
            kind(json!({"message_id": 1, "poll": {"id": "p"}}))["unsupported"]["provider_type"],
            "poll"
        );
        assert_eq!(
            kind(json!({"message_id": 1, "text": ""}))["type"],
            "unsupported"
        );
    }

    #[test]
    fn replies_forwards_buttons_reactions() {
        let c = context_of(
            &json!({"reply_to_message": {"message_id": 7}, "forward_origin": {"type": "user"}}),
            "99",
        );
        assert_eq!(c.reply_to.unwrap().provider_message_id, "99:7");
        assert!(c.forwarded);
        assert!(context_of(&json!({"text": "x"}), "99").is_empty());
        let q = json!({"id": "1", "data": "yes", "message": {"reply_markup": {"inline_keyboard": [
            [{"text": "Yes please", "callback_data": "yes"}, {"text": "No", "callback_data": "no"}]]}}});
        assert_eq!(
            serde_json::to_value(button_reply(&q)).unwrap(),
            json!({"type": "interactive", "interactive": {"type": "button_reply",
                "button_reply": {"id": "yes", "title": "Yes please"}}})
        );
        let bare = button_reply(&json!({"id": "1", "data": "yes"}));
        assert_eq!(bare.member()["button_reply"]["title"], Value::Null);
        let r = reaction_of(
            &json!({"message_id": 7, "new_reaction": [{"type": "emoji", "emoji": "👍"}], "old_reaction": []}),
            "99",
        )
        .unwrap();
        assert_eq!(
            r.member(),
            json!({"emoji": "👍", "message_uuid": null, "provider_message_id": "99:7"})
        );
        let removed = reaction_of(
            &json!({"message_id": 7, "new_reaction": [], "old_reaction": [{"type": "emoji", "emoji": "👍"}]}),
            "99",
        )
        .unwrap();
        assert_eq!(removed.member()["emoji"], Value::Null);
    }
}
