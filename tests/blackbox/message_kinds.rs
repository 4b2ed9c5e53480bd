//! Issue 32: every kind of message, in and out (CONVENTIONS "Every kind of message, in and
//! out"). Real-shaped, signed provider callbacks (WhatsApp Cloud webhooks, Telegram updates)
//! posted to the running server; each kind is checked in the API (list and single message) and
//! in the `message.received` event data.

use serde_json::{Value, json};

use crate::both_backends;
use crate::db_peek;
use crate::fake_providers::{Fake, hub_signature, wa_text, wa_webhook};
use crate::support::{Backend, Resp, Seed, Server, TestEnv};

both_backends!(
    message_kinds_whatsapp_inbound_every_kind,
    message_kinds_telegram_inbound_every_kind,
    message_kinds_edits_and_deletions,
    message_kinds_statuses_and_number_changes,
    message_kinds_outbound_reaction_location_contacts,
    message_kinds_read_receipts,
    message_kinds_reachability,
);

pub(crate) const MESSAGES: &str = "/api/v1/integrations/messages";
pub(crate) const PHONE_DIGITS: &str = "4915123456789";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const APP_SECRET: &str = "app-secret-for-tests";
pub(crate) const PHONE_NUMBER_ID: &str = "1098765";
const TG_TOKEN: &str = "123456789:AAFakeBotTokenForTests_xyz";
const TG_SECRET: &str = "tg-secret_token-1";

pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn post_raw(server: &Server, path: &str, body: &Value, headers: &[(&str, String)]) -> Resp {
    let mut req = server
        .client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap());
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    Server::read(req.send().await.unwrap()).await
}

pub(crate) async fn wa_callback(server: &Server, channel_uuid: &str, body: &Value) -> Resp {
    let sig = hub_signature(APP_SECRET, &serde_json::to_vec(body).unwrap());
    post_raw(
        server,
        &format!("/inbound/{channel_uuid}"),
        body,
        &[("x-hub-signature-256", sig)],
    )
    .await
}

pub(crate) async fn tg_update(server: &Server, channel_uuid: &str, update: &Value) -> Resp {
    post_raw(
        server,
        &format!("/inbound/{channel_uuid}"),
        update,
        &[("x-telegram-bot-api-secret-token", TG_SECRET.into())],
    )
    .await
}

/// The organization's inbound messages by provider id, as the list shows them.
pub(crate) async fn inbound_by_provider_id(server: &Server, key: &str) -> Vec<(String, Value)> {
    let r = server
        .get(&format!("{MESSAGES}?limit=200&direction=inbound"), key)
        .await
        .expect(200);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["provider_message_id"].as_str().unwrap().to_owned(),
                m.clone(),
            )
        })
        .collect()
}

pub(crate) fn find<'a>(all: &'a [(String, Value)], pid: &str) -> &'a Value {
    &all.iter()
        .find(|(p, _)| p == pid)
        .unwrap_or_else(|| panic!("no inbound message {pid}"))
        .1
}

/// Checks that the list, the single message and the `message.received` data show the message
/// the same way, and that it is of `kind` with `member`.
async fn check_kind(
    env: &TestEnv,
    server: &Server,
    seed: &Seed,
    all: &[(String, Value)],
    pid: &str,
    kind: &str,
    member: &Value,
) -> Value {
    let listed = find(all, pid).clone();
    assert_eq!(listed["type"], kind, "{pid}: {listed}");
    assert_eq!(&listed[kind], member, "{pid}: {listed}");
    // Nothing is ever an empty text.
    assert!(
        !(kind == "text" && listed["text"]["body"] == ""),
        "{pid}: {listed}"
    );
    let uuid = listed["uuid"].as_str().unwrap();
    let one = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    for k in [
        "type",
        kind,
        "reply_to",
        "forwarded",
        "frequently_forwarded",
        "referral",
    ] {
        assert_eq!(one.body[k], listed[k], "{pid}: {k}");
    }
    let events = db_peek::events_named(env, seed.org_id, "message.received").await;
    let event = events
        .iter()
        .find(|e| e.data["message_uuid"] == uuid)
        .unwrap_or_else(|| panic!("no message.received for {pid}"));
    assert_eq!(event.data["type"], kind);
    assert_eq!(event.data["message"], listed, "{pid}");
    listed
}

pub(crate) async fn whatsapp_channel(env: &TestEnv, seed: &Seed, graph: &Fake) -> String {
    let wa = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "WhatsApp",
            "--slug",
            "wa",
            "--provider-config",
            &json!({
                "phone_number_id": PHONE_NUMBER_ID,
                "access_token": WA_TOKEN,
                "app_secret": APP_SECRET,
                "verify_token": "verify-me",
                "api_base_url": graph.base_url,
            })
            .to_string(),
        ])
        .await;
    wa["uuid"].as_str().unwrap().to_owned()
}

pub(crate) async fn telegram_channel(env: &TestEnv, seed: &Seed, bot: &Fake) -> String {
    let tg = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "telegram",
            "--name",
            "Bot",
            "--slug",
            "bot",
            "--provider-config",
            &json!({"bot_token": TG_TOKEN, "secret_token": TG_SECRET, "api_base_url": bot.base_url})
                .to_string(),
        ])
        .await;
    tg["uuid"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------------

async fn message_kinds_whatsapp_inbound_every_kind(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    let msg = |id: &str, kind: &str, member: Value| {
        let mut m =
            json!({"from": PHONE_DIGITS, "id": id, "timestamp": now.to_string(), "type": kind});
        m[kind] = member;
        m
    };

    // A first message, which later ones reply and react to.
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.FIRST", now - 5, "Hello shop")],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let first = inbound_by_provider_id(&server, &seed.key).await;
    let first_uuid = find(&first, "wamid.FIRST")["uuid"].clone();

    let mut reply = wa_text(PHONE_DIGITS, "wamid.REPLY", now, "Yes, that one");
    reply["context"] = json!({"from": PHONE_DIGITS, "id": "wamid.FIRST"});
    reply["referral"] = json!({"source_url": "https://fb.me/ad", "source_id": "120",
        "source_type": "ad", "headline": "Spring sale", "body": "20% off", "media_type": "image",
        "image_url": "https://example.com/i.jpg", "ctwa_clid": "ARAkLk"});
    let mut forwarded = wa_text(PHONE_DIGITS, "wamid.FWD", now, "look at this");
    forwarded["context"] = json!({"forwarded": true, "frequently_forwarded": true});
    let mut unknown_reply = wa_text(PHONE_DIGITS, "wamid.REPLY2", now, "and this?");
    unknown_reply["context"] = json!({"from": PHONE_DIGITS, "id": "wamid.NOT-OURS"});
    let mut unsupported = msg("wamid.UNSUP", "unsupported", json!({"type": "pool"}));
    unsupported["errors"] = json!([{"code": 131051, "title": "Message type unknown",
        "message": "Message type unknown", "error_data": {"details": "Message type is currently not supported."}}]);
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            msg(
                "wamid.REACT",
                "reaction",
                json!({"message_id": "wamid.FIRST", "emoji": "\u{1F62E}"}),
            ),
            msg(
                "wamid.UNREACT",
                "reaction",
                json!({"message_id": "wamid.FIRST"}),
            ),
            msg(
                "wamid.LOC",
                "location",
                json!({"latitude": 38.9072, "longitude": -77.0369, "name": "Office",
                    "address": "1 Main St", "url": "https://example.com"}),
            ),
            msg(
                "wamid.CONTACTS",
                "contacts",
                json!([{"name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
                    "phones": [{"phone": "+1 (555) 010-0100", "type": "CELL", "wa_id": "15550100100"}],
                    "emails": [{"email": "ann@example.com", "type": "WORK"}],
                    "org": {"company": "Example"}}]),
            ),
            msg(
                "wamid.ORDER",
                "order",
                json!({"catalog_id": "cat-77", "text": "for Friday", "product_items": [
                    {"product_retailer_id": "sku-1", "quantity": 2, "item_price": 10.5, "currency": "EUR"},
                    {"product_retailer_id": "sku-2", "quantity": 1, "item_price": 3, "currency": "EUR"}]}),
            ),
            msg(
                "wamid.SYSTEM",
                "system",
                json!({"body": "Ada changed from 4915123456789 to 4915123456780",
                    "new_wa_id": "4915123456780", "type": "user_changed_number"}),
            ),
            unsupported,
            msg(
                "wamid.FLOW",
                "interactive",
                json!({"type": "nfm_reply", "nfm_reply": {"name": "flow", "body": "Sent",
                    "response_json": "{\"flow_token\":\"FT-9\",\"size\":\"M\",\"count\":2}"}}),
            ),
            msg(
                "wamid.QUICK",
                "button",
                json!({"payload": "STOP", "text": "Stop promotions"}),
            ),
            msg(
                "wamid.VOICE",
                "audio",
                json!({"id": "media-1", "mime_type": "audio/ogg; codecs=opus", "sha256": "abc", "voice": true}),
            ),
            msg(
                "wamid.STICKER",
                "sticker",
                json!({"id": "media-2", "mime_type": "image/webp", "sha256": "def", "animated": true}),
            ),
            msg("wamid.NEW", "ephemeral", json!({})),
            reply,
            forwarded,
            unknown_reply,
        ],
        vec![],
    );
    let r = wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    assert_eq!(r.body["received"], 15, "{}", r.text);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let (e, s) = (&env, &server);

    let m = check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.REACT",
        "reaction",
        &json!({"emoji": "😮", "message_uuid": first_uuid, "provider_message_id": "wamid.FIRST"}),
    )
    .await;
    assert_eq!(m["reply_to"], Value::Null);
    check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.UNREACT",
        "reaction",
        &json!({"emoji": null, "message_uuid": first_uuid, "provider_message_id": "wamid.FIRST"}),
    )
    .await;
    check_kind(e, s, &seed, &all, "wamid.LOC", "location",
        &json!({"latitude": 38.9072, "longitude": -77.0369, "name": "Office", "address": "1 Main St",
            "url": "https://example.com"})).await;
    let m = check_kind(e, s, &seed, &all, "wamid.CONTACTS", "contacts",
        &json!({"contacts": [{"name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
            "phones": [{"phone": "+1 (555) 010-0100", "type": "CELL", "wa_id": "15550100100"}],
            "emails": [{"email": "ann@example.com", "type": "WORK"}], "org": {"company": "Example"}}]})).await;
    assert_eq!(m["forwarded"], false);
    check_kind(e, s, &seed, &all, "wamid.ORDER", "order",
        &json!({"catalog_id": "cat-77", "text": "for Friday", "items": [
            {"product_retailer_id": "sku-1", "quantity": 2.0, "item_price": 10.5, "currency": "EUR"},
            {"product_retailer_id": "sku-2", "quantity": 1.0, "item_price": 3.0, "currency": "EUR"}]})).await;
    check_kind(e, s, &seed, &all, "wamid.SYSTEM", "system",
        &json!({"kind": "user_changed_number", "body": "Ada changed from 4915123456789 to 4915123456780",
            "new_phone": "+4915123456780"})).await;
    check_kind(e, s, &seed, &all, "wamid.UNSUP", "unsupported",
        &json!({"provider_type": "pool", "errors": [{"code": 131051, "title": "Message type unknown",
            "message": "Message type unknown"}]})).await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.NEW",
        "unsupported",
        &json!({"provider_type": "ephemeral", "errors": []}),
    )
    .await;
    check_kind(e, s, &seed, &all, "wamid.FLOW", "interactive",
        &json!({"type": "nfm_reply", "nfm_reply": {"name": "flow", "body": "Sent", "flow_token": "FT-9",
            "response": {"flow_token": "FT-9", "size": "M", "count": 2}}})).await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.QUICK",
        "interactive",
        &json!({"type": "button", "button": {"payload": "STOP", "text": "Stop promotions"}}),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.VOICE",
        "media",
        &json!({"media_type": "audio", "media_id": "media-1", "mime_type": "audio/ogg; codecs=opus",
            "sha256": "abc", "caption": null, "file_name": null, "voice": true, "animated": false}),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.STICKER",
        "media",
        &json!({"media_type": "sticker", "media_id": "media-2", "mime_type": "image/webp",
            "sha256": "def", "caption": null, "file_name": null, "voice": false, "animated": true}),
    )
    .await;
    let m = check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.REPLY",
        "text",
        &json!({"body": "Yes, that one"}),
    )
    .await;
    assert_eq!(
        m["reply_to"],
        json!({"message_uuid": first_uuid, "provider_message_id": "wamid.FIRST"})
    );
    assert_eq!(
        m["referral"],
        json!({"source_url": "https://fb.me/ad", "source_id": "120", "source_type": "ad",
            "headline": "Spring sale", "body": "20% off", "media_type": "image", "ctwa_clid": "ARAkLk"})
    );
    assert_eq!(
        (
            m["forwarded"].as_bool(),
            m["frequently_forwarded"].as_bool()
        ),
        (Some(false), Some(false))
    );
    assert!(
        m.get("context").is_none(),
        "WhatsApp's raw context is not kept: {m}"
    );
    let m = check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.FWD",
        "text",
        &json!({"body": "look at this"}),
    )
    .await;
    assert_eq!(
        (
            m["forwarded"].as_bool(),
            m["frequently_forwarded"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(m["reply_to"], Value::Null);
    assert_eq!(m["referral"], Value::Null);
    let m = check_kind(
        e,
        s,
        &seed,
        &all,
        "wamid.REPLY2",
        "text",
        &json!({"body": "and this?"}),
    )
    .await;
    assert_eq!(
        m["reply_to"],
        json!({"message_uuid": null, "provider_message_id": "wamid.NOT-OURS"})
    );
    // More of the same odd kinds: still stored as unsupported, still one warning per type.
    let more = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            msg("wamid.UNSUP2", "unsupported", json!({"type": "pool"})),
            msg("wamid.NEW2", "ephemeral", json!({})),
        ],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &more).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    assert_eq!(find(&all, "wamid.UNSUP2")["type"], "unsupported");
    assert_eq!(find(&all, "wamid.NEW2")["type"], "unsupported");
    // Each unknown kind was logged at warn once, with its provider type, never with the body.
    let logs = server.logs();
    let warned = |t: &str| {
        logs.lines()
            .filter(|l| l.contains("stored as unsupported") && l.contains(t))
            .count()
    };
    assert_eq!((warned("ephemeral"), warned("pool")), (1, 1), "{logs}");
    assert!(!logs.contains("Yes, that one"), "a message body was logged");
}

async fn message_kinds_telegram_inbound_every_kind(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let bot = Fake::telegram(TG_TOKEN).await;
    let tg_uuid = telegram_channel(&env, &seed, &bot).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    let chat = json!({"id": 4242, "type": "private", "first_name": "Grace"});
    let from = json!({"id": 4242, "is_bot": false, "first_name": "Grace", "last_name": "Hopper"});
    let mut update_id = 100;
    let mut message = |id: i64, content: Value| {
        update_id += 1;
        let mut m = json!({"message_id": id, "date": now, "chat": chat, "from": from});
        m.as_object_mut()
            .unwrap()
            .extend(content.as_object().unwrap().clone());
        json!({"update_id": update_id, "message": m})
    };
    let updates = vec![
        message(1, json!({"text": "Hello bot"})),
        message(
            2,
            json!({"caption": "my cat", "photo": [
            {"file_id": "ph-s", "file_unique_id": "a", "width": 90, "height": 67, "file_size": 1000},
            {"file_id": "ph-m", "file_unique_id": "b", "width": 320, "height": 240, "file_size": 9000},
            {"file_id": "ph-l", "file_unique_id": "c", "width": 1280, "height": 960, "file_size": 90000}]}),
        ),
        message(
            3,
            json!({"voice": {"file_id": "vo-1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"}}),
        ),
        message(
            4,
            json!({"video_note": {"file_id": "vn-1", "file_unique_id": "n", "length": 240, "duration": 5}}),
        ),
        message(
            5,
            json!({"animation": {"file_id": "an-1", "file_unique_id": "g", "width": 1, "height": 1,
            "duration": 1, "mime_type": "video/mp4", "file_name": "fun.mp4"},
            "document": {"file_id": "an-1", "file_unique_id": "g", "mime_type": "video/mp4", "file_name": "fun.mp4"}}),
        ),
        message(
            6,
            json!({"contact": {"phone_number": "+4915123456789", "first_name": "Ann", "last_name": "Lee", "user_id": 77}}),
        ),
        message(
            7,
            json!({"location": {"latitude": 52.52, "longitude": 13.405}}),
        ),
        message(
            8,
            json!({"location": {"latitude": 48.8584, "longitude": 2.2945},
            "venue": {"location": {"latitude": 48.8584, "longitude": 2.2945}, "title": "Eiffel Tower",
                "address": "Champ de Mars"}}),
        ),
        message(9, json!({"dice": {"emoji": "🎲", "value": 4}})),
        message(
            10,
            json!({"text": "replying", "reply_to_message": {"message_id": 1, "date": now,
            "chat": chat, "from": from, "text": "Hello bot"}, "forward_origin": {"type": "hidden_user",
            "sender_user_name": "X", "date": now}}),
        ),
        json!({"update_id": 200, "callback_query": {"id": "cb-1", "from": from, "chat_instance": "1", "data": "yes",
            "message": {"message_id": 11, "date": now, "chat": chat, "text": "Continue?",
                "reply_markup": {"inline_keyboard": [[{"text": "Yes please", "callback_data": "yes"},
                    {"text": "No", "callback_data": "no"}]]}}}}),
        json!({"update_id": 201, "message_reaction": {"chat": chat, "message_id": 1, "user": from,
            "date": now, "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}]}}),
        json!({"update_id": 202, "message_reaction": {"chat": chat, "message_id": 1, "user": from,
            "date": now, "old_reaction": [{"type": "emoji", "emoji": "👍"}], "new_reaction": []}}),
    ];
    for u in &updates {
        let r = tg_update(&server, &tg_uuid, u).await.expect(200);
        assert_eq!(r.body["received"], 1, "{u}: {}", r.text);
    }
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let first_uuid = find(&all, "4242:1")["uuid"].clone();
    let (e, s) = (&env, &server);
    let media = |media_type: &str,
                 id: &str,
                 mime: Value,
                 caption: Value,
                 file_name: Value,
                 voice: bool,
                 animated: bool| {
        json!({"media_type": media_type, "media_id": id, "mime_type": mime, "sha256": null,
            "caption": caption, "file_name": file_name, "voice": voice, "animated": animated})
    };
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:1",
        "text",
        &json!({"body": "Hello bot"}),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:2",
        "media",
        &media(
            "image",
            "ph-l",
            Value::Null,
            json!("my cat"),
            Value::Null,
            false,
            false,
        ),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:3",
        "media",
        &media(
            "audio",
            "vo-1",
            json!("audio/ogg"),
            Value::Null,
            Value::Null,
            true,
            false,
        ),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:4",
        "media",
        &media(
            "video",
            "vn-1",
            Value::Null,
            Value::Null,
            Value::Null,
            false,
            false,
        ),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:5",
        "media",
        &media(
            "video",
            "an-1",
            json!("video/mp4"),
            Value::Null,
            json!("fun.mp4"),
            false,
            true,
        ),
    )
    .await;
    check_kind(e, s, &seed, &all, "4242:6", "contacts",
        &json!({"contacts": [{"name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
            "phones": [{"phone": "+4915123456789", "type": null, "wa_id": null}], "telegram_user_id": "77"}]})).await;
    check_kind(e, s, &seed, &all, "4242:7", "location",
        &json!({"latitude": 52.52, "longitude": 13.405, "name": null, "address": null, "url": null})).await;
    check_kind(e, s, &seed, &all, "4242:8", "location",
        &json!({"latitude": 48.8584, "longitude": 2.2945, "name": "Eiffel Tower", "address": "Champ de Mars",
            "url": null})).await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:9",
        "unsupported",
        &json!({"provider_type": "dice", "errors": []}),
    )
    .await;
    let m = check_kind(
        e,
        s,
        &seed,
        &all,
        "4242:10",
        "text",
        &json!({"body": "replying"}),
    )
    .await;
    assert_eq!(
        m["reply_to"],
        json!({"message_uuid": first_uuid, "provider_message_id": "4242:1"})
    );
    assert_eq!(m["forwarded"], true);
    check_kind(
        e,
        s,
        &seed,
        &all,
        "callback:cb-1",
        "interactive",
        &json!({"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes please"}}),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "reaction:4242:201",
        "reaction",
        &json!({"emoji": "👍", "message_uuid": first_uuid, "provider_message_id": "4242:1"}),
    )
    .await;
    check_kind(
        e,
        s,
        &seed,
        &all,
        "reaction:4242:202",
        "reaction",
        &json!({"emoji": null, "message_uuid": first_uuid, "provider_message_id": "4242:1"}),
    )
    .await;
    assert!(
        server.logs().contains("dice"),
        "no warning for the unknown kind"
    );
}

/// The `message.status.update` events about a message that carry a `change`.
async fn changes_of(env: &TestEnv, seed: &Seed, uuid: &str) -> Vec<Value> {
    db_peek::events_named(env, seed.org_id, "message.status.update")
        .await
        .into_iter()
        .filter(|e| e.data["message_uuid"] == uuid && e.data.get("change").is_some())
        .map(|e| e.data)
        .collect()
}

async fn message_kinds_edits_and_deletions(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let bot = Fake::telegram(TG_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let tg_uuid = telegram_channel(&env, &seed, &bot).await;
    let server = env.start(&[]).await;
    let now = unix_now();

    // WhatsApp: a text, then its edit (twice: the second changes nothing), then its revoke.
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.ORIG", now - 60, "Helo")],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let uuid = find(&all, "wamid.ORIG")["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let edit = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            json!({"from": PHONE_DIGITS, "id": "wamid.EDIT1", "timestamp": (now - 30).to_string(),
            "type": "edit", "edit": {"original_message_id": "wamid.ORIG",
                "message": {"context": {"id": "wamid.ORIG"}, "type": "text", "text": {"body": "Hello"}}}}),
        ],
        vec![],
    );
    let r = wa_callback(&server, &wa_uuid, &edit).await.expect(200);
    assert_eq!(
        (
            r.body["received"].as_i64(),
            r.body["changes_applied"].as_i64()
        ),
        (Some(0), Some(1)),
        "{}",
        r.text
    );
    let one = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(one.body["text"], json!({"body": "Hello"}));
    assert!(one.body["edited_at"].is_string(), "{}", one.text);
    assert!(one.body.get("deleted_at").is_none());
    let steps: Vec<&str> = one.body["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert!(steps.contains(&"edited"), "{steps:?}");
    let events = changes_of(&env, &seed, &uuid).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["change"], "edited");
    assert_eq!(events[0]["message"]["text"]["body"], "Hello");
    assert_eq!(events[0]["message"]["uuid"], uuid);
    // The same edit delivered again: nothing changes, nothing is emitted.
    let r = wa_callback(&server, &wa_uuid, &edit).await.expect(200);
    assert_eq!(
        (
            r.body["changes_applied"].as_i64(),
            r.body["changes_ignored"].as_i64()
        ),
        (Some(0), Some(1))
    );
    assert_eq!(changes_of(&env, &seed, &uuid).await.len(), 1);

    let revoke = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            json!({"from": PHONE_DIGITS, "id": "wamid.REVOKE1", "timestamp": now.to_string(),
            "type": "revoke", "revoke": {"original_message_id": "wamid.ORIG"}}),
        ],
        vec![],
    );
    let r = wa_callback(&server, &wa_uuid, &revoke).await.expect(200);
    assert_eq!(r.body["changes_applied"], 1, "{}", r.text);
    let one = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(one.body["type"], "text");
    assert_eq!(
        one.body["text"],
        Value::Null,
        "the content is gone: {}",
        one.text
    );
    assert!(one.body["deleted_at"].is_string());
    assert!(one.text.contains("\"deleted\""));
    let events = changes_of(&env, &seed, &uuid).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["change"], "deleted");
    assert_eq!(events[1]["message"]["text"], Value::Null);
    // Again, and an edit after the deletion: ignored.
    let r = wa_callback(&server, &wa_uuid, &revoke).await.expect(200);
    assert_eq!(r.body["changes_ignored"], 1);
    let r = wa_callback(&server, &wa_uuid, &edit).await.expect(200);
    assert_eq!(r.body["changes_ignored"], 1);
    assert_eq!(changes_of(&env, &seed, &uuid).await.len(), 2);
    // A revoke of a message we never stored is ignored too; no edit or revoke is stored as a
    // message of its own.
    let stray = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            json!({"from": PHONE_DIGITS, "id": "wamid.REVOKE2", "timestamp": now.to_string(),
            "type": "revoke", "revoke": {"original_message_id": "wamid.NEVER"}}),
        ],
        vec![],
    );
    let r = wa_callback(&server, &wa_uuid, &stray).await.expect(200);
    assert_eq!(
        (
            r.body["received"].as_i64(),
            r.body["changes_ignored"].as_i64()
        ),
        (Some(0), Some(1))
    );
    let all = inbound_by_provider_id(&server, &seed.key).await;
    assert_eq!(all.len(), 1, "{all:?}");

    // Telegram: edited_message.
    let chat = json!({"id": 4242, "type": "private"});
    let from = json!({"id": 4242, "is_bot": false, "first_name": "Grace"});
    tg_update(
        &server,
        &tg_uuid,
        &json!({"update_id": 1, "message": {"message_id": 3, "date": now - 10,
        "chat": chat, "from": from, "text": "teh plan"}}),
    )
    .await
    .expect(200);
    let r = tg_update(
        &server,
        &tg_uuid,
        &json!({"update_id": 2, "edited_message": {"message_id": 3,
        "date": now - 10, "edit_date": now, "chat": chat, "from": from, "text": "the plan"}}),
    )
    .await
    .expect(200);
    assert_eq!(r.body["changes_applied"], 1, "{}", r.text);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let m = find(&all, "4242:3");
    assert_eq!(m["text"]["body"], "the plan");
    assert!(m["edited_at"].is_string());
    let events = changes_of(&env, &seed, m["uuid"].as_str().unwrap()).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["change"], "edited");
}

async fn send_text(server: &Server, seed: &Seed, body: &str) -> Value {
    let r = server
        .post_with(
            MESSAGES,
            &seed.key,
            &json!({"channel_slug": "wa", "phone": format!("+{PHONE_DIGITS}"), "message": body}),
            &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
        )
        .await
        .expect(201);
    r.body["message"].clone()
}

async fn message_kinds_statuses_and_number_changes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.HI", now - 5, "Hi")],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let out = send_text(&server, &seed, "Welcome").await;
    let wamid = out["provider_message_id"].as_str().unwrap().to_owned();
    let uuid = out["uuid"].as_str().unwrap().to_owned();
    let status = |st: &str, with_billing: bool| {
        let mut s = json!({"id": wamid, "status": st, "timestamp": now.to_string(),
            "recipient_id": PHONE_DIGITS});
        if with_billing {
            s["conversation"] = json!({"id": "CONV-1", "expiration_timestamp": (now + 86_400).to_string(),
                "origin": {"type": "service"}});
            s["pricing"] = json!({"billable": true, "pricing_model": "CBP", "category": "service"});
        }
        wa_webhook(PHONE_NUMBER_ID, vec![], vec![s])
    };
    let updates = || async {
        db_peek::events_named(&env, seed.org_id, "message.status.update")
            .await
            .into_iter()
            .filter(|e| e.data["message_uuid"] == uuid.as_str())
            .count()
    };
    // `sent` with pricing and conversation (the send recorded it sent already: nothing moves,
    // but the billing is kept), then `delivered`, then `played` (= read), then `read` again.
    let r = wa_callback(&server, &wa_uuid, &status("sent", true))
        .await
        .expect(200);
    assert_eq!(r.body["statuses_ignored"], 1, "{}", r.text);
    let one = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(
        one.body["pricing"],
        json!({"billable": true, "category": "service", "pricing_model": "CBP"})
    );
    assert_eq!(one.body["provider_conversation"]["id"], "CONV-1");
    assert_eq!(one.body["provider_conversation"]["origin"], "service");
    assert!(one.body["provider_conversation"]["expires_at"].is_string());
    assert_eq!(updates().await, 0);
    wa_callback(&server, &wa_uuid, &status("delivered", false))
        .await
        .expect(200);
    let r = wa_callback(&server, &wa_uuid, &status("played", false))
        .await
        .expect(200);
    assert_eq!(r.body["statuses_applied"], 1, "{}", r.text);
    let one = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(one.body["status"], "read");
    assert_eq!(one.body["pricing"]["category"], "service", "kept");
    assert_eq!(updates().await, 2);
    // Duplicates and a step back change and emit nothing.
    for st in ["played", "read", "delivered"] {
        let r = wa_callback(&server, &wa_uuid, &status(st, false))
            .await
            .expect(200);
        assert_eq!(r.body["statuses_ignored"], 1, "{st}");
    }
    assert_eq!(updates().await, 2);
    let after = server
        .get(&format!("{MESSAGES}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(after.body["updated_at"], one.body["updated_at"]);

    // A failed status keeps the provider's code.
    let out = send_text(&server, &seed, "Second").await;
    let failed = wa_webhook(
        PHONE_NUMBER_ID,
        vec![],
        vec![crate::fake_providers::wa_status(
            out["provider_message_id"].as_str().unwrap(),
            "failed",
            PHONE_DIGITS,
        )],
    );
    wa_callback(&server, &wa_uuid, &failed).await.expect(200);
    let one = server
        .get(
            &format!("{MESSAGES}/{}", out["uuid"].as_str().unwrap()),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(one.body["status"], "failed");
    assert_eq!(one.body["error"]["provider_code"], 131026);

    // The customer changes number: the contact moves (its uuid stays), contact.updated.
    let contact_uuid = out["contact_uuid"].as_str().unwrap().to_owned();
    let system = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            json!({"from": PHONE_DIGITS, "id": "wamid.SYS", "timestamp": now.to_string(),
            "type": "system", "system": {"body": "Ada changed from 4915123456789 to 4915123456780",
                "new_wa_id": "4915123456780", "type": "user_changed_number"}}),
        ],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &system).await.expect(200);
    let c = server
        .get(
            &format!("/api/v1/integrations/contacts/{contact_uuid}"),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(c.body["phone"], "+4915123456780", "{}", c.text);
    let updated: Vec<_> = db_peek::events_named(&env, seed.org_id, "contact.updated")
        .await
        .into_iter()
        .filter(|e| e.data["contact_uuid"] == contact_uuid.as_str())
        .collect();
    assert_eq!(updated.len(), 1);
    assert_eq!(updated[0].data["contact"]["phone"], "+4915123456780");
    // The same callback again: a duplicate, nothing moves.
    let r = wa_callback(&server, &wa_uuid, &system).await.expect(200);
    assert_eq!(r.body["duplicates"], 1);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "contact.updated")
            .await
            .len(),
        1
    );
}

pub(crate) async fn send_body(server: &Server, seed: &Seed, body: Value) -> Resp {
    server
        .post_with(
            MESSAGES,
            &seed.key,
            &body,
            &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
        )
        .await
}

pub(crate) fn fields(r: &Resp) -> Vec<String> {
    r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no field details in {}", r.text))
        .iter()
        .map(|f| f["field"].as_str().unwrap().to_owned())
        .collect()
}

async fn message_kinds_outbound_reaction_location_contacts(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let bot = Fake::telegram(TG_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let tg_uuid = telegram_channel(&env, &seed, &bot).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    // Two customers write in (the window opens); one message of each.
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            wa_text(PHONE_DIGITS, "wamid.IN1", now - 5, "Hi"),
            wa_text("4915123456700", "wamid.OTHER", now - 5, "Hello"),
        ],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let mine = find(&all, "wamid.IN1").clone();
    let other = find(&all, "wamid.OTHER").clone();
    let to = json!({"channel_slug": "wa", "contact_uuid": mine["contact_uuid"]});
    let with = |extra: Value| {
        let mut b = to.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let sends_before = graph.received().await.len();

    // Bad input: clear 4xx, nothing sent.
    let r = send_body(
        &server,
        &seed,
        with(json!({"reaction": {"message_uuid": other["uuid"], "emoji": "👍"}})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["reaction.message_uuid"]);
    let r = send_body(
        &server,
        &seed,
        with(json!({"location": {"latitude": 91.5, "longitude": 13.4}})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["location.latitude"]);
    let r = send_body(&server, &seed, with(json!({"contacts": []})))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["contacts"]);
    let r = send_body(
        &server,
        &seed,
        with(json!({"location": {"latitude": 1, "longitude": 2}, "message": "x"})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["message"]);
    // `type` is not needed; another kind's type is refused, as is a member a location has not.
    let r = send_body(
        &server,
        &seed,
        with(json!({"type": "text", "location": {"latitude": 1, "longitude": 2}})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["type"]);
    let r = send_body(
        &server,
        &seed,
        with(json!({"location": {"latitude": 1, "longitude": 2, "altitude": 30}})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["location.altitude"]);
    assert_eq!(
        graph.received().await.len(),
        sends_before,
        "nothing was sent"
    );

    // A reaction, its removal, a location and contacts, as WhatsApp takes them.
    let r = send_body(
        &server,
        &seed,
        with(json!({"reaction": {"message_uuid": mine["uuid"], "emoji": "👍"}})),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["type"], "reaction");
    assert_eq!(
        r.body["message"]["reaction"],
        json!({"emoji": "👍", "message_uuid": mine["uuid"], "provider_message_id": "wamid.IN1"})
    );
    let r = send_body(
        &server,
        &seed,
        with(json!({"reaction": {"message_uuid": mine["uuid"], "emoji": ""}})),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["reaction"]["emoji"], Value::Null);
    let r = send_body(
        &server,
        &seed,
        with(
            json!({"type": "location", "location": {"latitude": 52.52, "longitude": 13.405,
        "name": "Office", "address": "Main St 1"}}),
        ),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["location"]["name"], "Office");
    let card = json!([{"name": {"formatted_name": "Ann Lee", "first_name": "Ann", "last_name": "Lee"},
        "phones": [{"phone": "+4915123456789", "type": "CELL"}]}]);
    let r = send_body(&server, &seed, with(json!({"contacts": card})))
        .await
        .expect(201);
    assert_eq!(r.body["message"]["contacts"]["contacts"], card);
    let sent: Vec<Value> = graph.received().await[sends_before..]
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(sent.len(), 4);
    assert_eq!(
        (sent[0]["type"].as_str(), &sent[0]["reaction"]),
        (
            Some("reaction"),
            &json!({"message_id": "wamid.IN1", "emoji": "👍"})
        )
    );
    assert_eq!(sent[1]["reaction"]["emoji"], "");
    assert_eq!(
        sent[2]["location"],
        json!({"latitude": 52.52, "longitude": 13.405, "name": "Office", "address": "Main St 1"})
    );
    assert_eq!(sent[3]["contacts"], card);

    // Telegram: a reaction (setMessageReaction on the message, removed with an empty emoji), a
    // venue and a contact.
    let tg_update_body = json!({"update_id": 1, "message": {"message_id": 3, "date": now,
        "chat": {"id": 4242, "type": "private"}, "from": {"id": 4242, "first_name": "Grace"}, "text": "hey"}});
    tg_update(&server, &tg_uuid, &tg_update_body)
        .await
        .expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let tg_msg = find(&all, "4242:3").clone();
    let tg_to = |extra: Value| {
        let mut b = json!({"channel_slug": "bot", "contact_uuid": tg_msg["contact_uuid"]});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let calls_before = bot.received().await.len();
    let reacted = send_body(
        &server,
        &seed,
        tg_to(json!({"reaction": {"message_uuid": tg_msg["uuid"], "emoji": "👍"}})),
    )
    .await
    .expect(201);
    assert_eq!(
        reacted.body["message"]["type"], "reaction",
        "{}",
        reacted.text
    );
    assert_eq!(
        reacted.body["message"]["reaction"]["message_uuid"], tg_msg["uuid"],
        "{}",
        reacted.text
    );
    send_body(
        &server,
        &seed,
        tg_to(json!({"reaction": {"message_uuid": tg_msg["uuid"], "emoji": ""}})),
    )
    .await
    .expect(201);
    let reactions: Vec<_> = bot.received().await[calls_before..].to_vec();
    assert!(
        reactions[0].path.ends_with("/setMessageReaction"),
        "{}",
        reactions[0].path
    );
    assert_eq!(
        (
            &reactions[0].body["message_id"],
            &reactions[0].body["reaction"]
        ),
        (&json!(3), &json!([{"type": "emoji", "emoji": "👍"}]))
    );
    assert_eq!(reactions[1].body["reaction"], json!([]));
    let calls_before = bot.received().await.len();
    send_body(
        &server,
        &seed,
        tg_to(
            json!({"location": {"latitude": 48.8584, "longitude": 2.2945,
        "name": "Eiffel Tower", "address": "Champ de Mars"}}),
        ),
    )
    .await
    .expect(201);
    send_body(&server, &seed, tg_to(json!({"contacts": card})))
        .await
        .expect(201);
    let calls: Vec<_> = bot.received().await[calls_before..].to_vec();
    assert!(calls[0].path.ends_with("/sendVenue"), "{}", calls[0].path);
    assert_eq!(calls[0].body["title"], "Eiffel Tower");
    assert!(calls[1].path.ends_with("/sendContact"), "{}", calls[1].path);
    assert_eq!(
        (
            calls[1].body["phone_number"].as_str(),
            calls[1].body["first_name"].as_str()
        ),
        (Some("+4915123456789"), Some("Ann"))
    );
}

async fn message_kinds_read_receipts(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let bot = Fake::telegram(TG_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let tg_uuid = telegram_channel(&env, &seed, &bot).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(
            PHONE_DIGITS,
            "wamid.READ1",
            now - 5,
            "Anyone there?",
        )],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    tg_update(&server, &tg_uuid, &json!({"update_id": 1, "message": {"message_id": 3, "date": now,
        "chat": {"id": 4242, "type": "private"}, "from": {"id": 4242, "first_name": "Grace"}, "text": "hey"}}))
        .await
        .expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let wa_msg = find(&all, "wamid.READ1")["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let tg_msg = find(&all, "4242:3")["uuid"].as_str().unwrap().to_owned();
    let read = |uuid: &str| format!("{MESSAGES}/{uuid}/read");

    let before = graph.received().await.len();
    let r = server
        .post(&read(&wa_msg), &seed.key, &json!({}))
        .await
        .expect(202);
    assert_eq!(r.body["message_uuid"], wa_msg.as_str());
    let r = server
        .post(&read(&wa_msg), &seed.key, &json!({"typing": true}))
        .await
        .expect(202);
    assert_eq!(r.body["typing"], true);
    let calls: Vec<Value> = graph.received().await[before..]
        .iter()
        .map(|c| c.body.clone())
        .collect();
    assert_eq!(
        calls,
        vec![
            json!({"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.READ1"}),
            json!({"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.READ1",
                "typing_indicator": {"type": "text"}}),
        ]
    );
    // Telegram has no read receipts; an outbound message is not marked; unknown: 404.
    let r = server
        .post(&read(&tg_msg), &seed.key, &json!({}))
        .await
        .expect_error(422, "unsupported_for_channel");
    assert_eq!(r.body["error"]["details"]["channel_type"], "telegram");
    let out = send_text(&server, &seed, "We are here").await;
    server
        .post(&read(out["uuid"].as_str().unwrap()), &seed.key, &json!({}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(
            &read(&uuid::Uuid::new_v4().to_string()),
            &seed.key,
            &json!({}),
        )
        .await
        .expect_error(404, "not_found");
    server
        .post(&read(&wa_msg), &seed.key, &json!({"typing": "yes"}))
        .await
        .expect_error(400, "malformed_json");
    assert_eq!(
        graph.received().await.len(),
        before + 3,
        "only the two receipts and the send"
    );
}

async fn message_kinds_reachability(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let server = env.start(&[]).await;
    let wa_id = env
        .admin(&["channel", "list", "--org", &seed.org_id.to_string()])
        .await;
    let wa_id = wa_id["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["uuid"] == wa_uuid.as_str())
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let now = unix_now();
    // A contact the business knows but who never wrote: no free-form on WhatsApp.
    let created = env
        .admin(&[
            "contact",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--phone",
            "+4915123456711",
        ])
        .await;
    let quiet = created["uuid"].as_str().unwrap().to_owned();
    let reach = |uuid: &str, channel: Option<i64>| {
        let q = channel
            .map(|c| format!("?channel_id={c}"))
            .unwrap_or_default();
        format!("/api/v1/integrations/contacts/{uuid}/reachability{q}")
    };
    let r = server
        .get(&reach(&quiet, Some(wa_id)), &seed.key)
        .await
        .expect(200);
    assert_eq!(r.body["channel"]["id"], wa_id);
    assert_eq!(
        r.body["free_form"],
        json!({"allowed": false, "reason": "conversation_required", "window_closes_at": null})
    );
    assert_eq!(r.body["templates"]["approved"], 0);
    assert!(r.body["next_send_at"].is_string());
    // A customer who just wrote: free-form until 24 hours after their message.
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.R1", now, "Hi")],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let writer = find(&all, "wamid.R1")["contact_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = server
        .get(&reach(&writer, Some(wa_id)), &seed.key)
        .await
        .expect(200);
    assert_eq!(r.body["free_form"]["allowed"], true, "{}", r.text);
    assert_eq!(r.body["free_form"]["reason"], Value::Null);
    let closes = r.body["free_form"]["window_closes_at"].as_str().unwrap();
    let closes = chrono::DateTime::parse_from_rfc3339(closes)
        .unwrap()
        .timestamp();
    assert_eq!(closes, now + 86_400);
    // The sandbox channel (the key's default selection) has no window.
    let r = server
        .get(&reach(&quiet, Some(seed.channel_id)), &seed.key)
        .await
        .expect(200);
    assert_eq!(r.body["free_form"]["allowed"], true);
    // Unknown contact: 404; a bad parameter: 400.
    server
        .get(
            &reach(&uuid::Uuid::new_v4().to_string(), Some(wa_id)),
            &seed.key,
        )
        .await
        .expect_error(404, "not_found");
    server
        .get(
            &format!("/api/v1/integrations/contacts/{quiet}/reachability?channel=1"),
            &seed.key,
        )
        .await
        .expect_error(400, "invalid_request");
}
