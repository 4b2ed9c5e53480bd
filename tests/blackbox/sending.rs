//! Issue 3: channel-aware messaging. Sends (text, interactive, media, templates) with channel
//! selection, validation and idempotency; the WhatsApp Cloud API and Telegram Bot API adapters
//! against fake provider servers; the customer-service window; provider callbacks; message
//! history; the send rate limit; the admin contact and sandbox tools.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::db_peek;
use crate::fake_providers::{Behaviour, Fake, hub_signature, wa_status, wa_text, wa_webhook};
use crate::support::{Backend, Resp, Seed, Server, TestEnv};

both_backends!(
    sandbox_sends_every_kind_and_records_events,
    channel_selection_follows_the_rules,
    validation_reports_every_field,
    hostile_bodies_are_client_errors,
    idempotency_replays_conflicts_and_isolation,
    idempotency_in_progress_and_lease_takeover,
    provider_failures_are_not_stored_and_can_be_retried,
    concurrent_identical_requests_send_once,
    concurrent_sends_are_group_committed,
    a_crash_mid_send_never_yields_two_messages,
    idempotency_records_expire_and_are_purged,
    whatsapp_sends_speak_the_graph_api,
    whatsapp_service_window,
    whatsapp_callbacks_are_verified_and_applied,
    telegram_sends_and_updates,
    admin_contact_and_sandbox_tools,
    history_pages_and_filters,
    send_rate_limit_counts_every_send,
    a_slow_provider_blocks_nothing_else,
);

const TEXT: &str = "/api/v1/integrations/messages";
const MEDIA: &str = "/api/v1/integrations/messages/media";
const TEMPLATE: &str = "/api/v1/integrations/messages/template";

const PHONE: &str = "+4915123456789";
const PHONE_DIGITS: &str = "4915123456789";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const APP_SECRET: &str = "app-secret-for-tests";
const VERIFY_TOKEN: &str = "verify-me-please";
const PHONE_NUMBER_ID: &str = "1098765";

fn ikey() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn send(server: &Server, key: &str, path: &str, body: &Value) -> Resp {
    server
        .post_with(path, key, body, &[("Idempotency-Key", &ikey())])
        .await
}

async fn send_with(server: &Server, key: &str, path: &str, body: &Value, idem: &str) -> Resp {
    server
        .post_with(path, key, body, &[("Idempotency-Key", idem)])
        .await
}

async fn history(server: &Server, key: &str, query: &str) -> Vec<Value> {
    let r = server
        .get(&format!("{TEXT}?limit=200{query}"), key)
        .await
        .expect(200);
    r.body["data"].as_array().unwrap().clone()
}

fn field_names(r: &Resp) -> Vec<String> {
    r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no field details in {}", r.text))
        .iter()
        .map(|f| f["field"].as_str().unwrap().to_owned())
        .collect()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake, slug: &str) -> Value {
    env.admin(&[
        "channel",
        "create",
        "--org",
        &org_id.to_string(),
        "--type",
        "whatsapp_cloud",
        "--name",
        &format!("WhatsApp {slug}"),
        "--slug",
        slug,
        "--provider-config",
        &json!({
            "phone_number_id": PHONE_NUMBER_ID,
            "access_token": WA_TOKEN,
            "app_secret": APP_SECRET,
            "verify_token": VERIFY_TOKEN,
            "api_base_url": graph.base_url,
        })
        .to_string(),
    ])
    .await
}

async fn post_raw(server: &Server, path: &str, body: Vec<u8>, headers: &[(&str, String)]) -> Resp {
    let mut req = server
        .client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    Server::read(req.send().await.unwrap()).await
}

/// Posts a WhatsApp webhook signed with the app secret.
async fn wa_callback(server: &Server, channel_uuid: &str, body: &Value) -> Resp {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = hub_signature(APP_SECRET, &raw);
    post_raw(
        server,
        &format!("/inbound/{channel_uuid}"),
        raw,
        &[("x-hub-signature-256", sig)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------

async fn sandbox_sends_every_kind_and_records_events(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;

    // Text to a new phone: the contact and the conversation are created.
    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": "+49 151 2345 6789", "message": "Hello!"}),
    )
    .await
    .expect(201);
    let b = &r.body;
    assert!(r.header("idempotency-replayed").is_none());
    let message = &b["message"];
    assert!(message["id"].as_i64().unwrap() > 0);
    assert!(message["uuid"].is_string());
    assert_eq!(message["direction"], "outbound");
    assert_eq!(message["type"], "text");
    assert_eq!(message["status"], "sent");
    assert_eq!(message["text"]["body"], "Hello!");
    assert!(
        message["provider_message_id"]
            .as_str()
            .unwrap()
            .starts_with("sandbox-")
    );
    assert_eq!(message["error"], Value::Null);
    assert!(message["created_at"].as_str().unwrap().ends_with('Z'));
    for field in ["id", "uuid", "slug", "type", "name", "identifier"] {
        assert!(!b["channel"][field].is_null(), "channel.{field}");
    }
    assert_eq!(b["channel"]["id"], seed.channel_id);
    assert_eq!(message["channel"], b["channel"]);
    assert_eq!(b["contact"]["phone"], PHONE);
    assert_eq!(message["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(b["conversation"]["status"], "open");
    assert_eq!(b["conversation"]["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(b["conversation"]["channel_id"], seed.channel_id);
    assert_eq!(message["conversation_uuid"], b["conversation"]["uuid"]);
    let contact_uuid = b["contact"]["uuid"].as_str().unwrap().to_owned();
    let conversation_uuid = b["conversation"]["uuid"].clone();

    // By contact_uuid: the same contact and conversation.
    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"contact_uuid": contact_uuid, "type": "interactive", "interactive": {
            "type": "button", "body": {"text": "Confirm your order?"},
            "action": {"buttons": [
                {"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
                {"type": "reply", "reply": {"id": "no", "title": "No"}}]}}}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["type"], "interactive");
    assert_eq!(
        r.body["message"]["interactive"]["action"]["buttons"][0]["reply"]["id"],
        "yes"
    );
    assert_eq!(r.body["conversation"]["uuid"], conversation_uuid);
    // The legacy phone resolves to the same contact.
    let r = send(
        &server,
        &seed.key,
        MEDIA,
        &json!({"phone": PHONE, "media_type": "document", "media_url": "https://cdn.example.com/invoice.pdf",
                "file_name": "invoice.pdf", "caption": "Your invoice"}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["contact"]["uuid"], contact_uuid.as_str());
    assert_eq!(r.body["message"]["type"], "media");
    assert_eq!(
        r.body["message"]["media"],
        json!({"media_type": "document", "media_url": "https://cdn.example.com/invoice.pdf",
               "file_name": "invoice.pdf", "caption": "Your invoice"})
    );
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"contact_uuid": contact_uuid, "template": {"name": "order_update", "language": "en_US",
                "components": [{"type": "body", "parameters": [{"type": "text", "text": "42"}]}]}}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["type"], "template");
    assert_eq!(r.body["message"]["template"]["name"], "order_update");
    assert_eq!(r.body["message"]["template"]["language"], "en_US");
    // Conversation initiation needs a whatsapp_cloud channel (tests/blackbox/initiation.rs):
    // refused clearly, nothing sent.
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"ensure_conversation": true, "channel_id": seed.channel_id, "phone": PHONE,
                "template": {"name": "x", "language": "en"}}),
    )
    .await
    .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "not_template_capable");

    // Everything is in the history, newest first, each with its channel identity.
    let all = history(&server, &seed.key, "").await;
    assert_eq!(all.len(), 4);
    assert_eq!(
        all.iter()
            .map(|m| m["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["template", "media", "interactive", "text"]
    );
    assert!(all.iter().all(|m| m["channel"]["id"] == seed.channel_id));

    // The outbox: contact.created and conversation.created once, message.sent per send, each
    // with the channel identity.
    let events = db_peek::events(&env, seed.org_id).await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !n.starts_with("security."))
        .collect();
    assert_eq!(
        names,
        vec![
            "contact.created",
            "conversation.created",
            "message.sent",
            "message.sent",
            "message.sent",
            "message.sent"
        ]
    );
    let sent = db_peek::events_named(&env, seed.org_id, "message.sent").await;
    let first = &sent[0];
    assert_eq!(first.data["message_id"], all[3]["id"]);
    assert!(first.data["message_id"].is_i64());
    assert_eq!(first.data["contact_uuid"], contact_uuid.as_str());
    assert_eq!(first.data["status"], "sent");
    assert_eq!(first.data["conversation_uuid"], conversation_uuid);
    assert_eq!(first.channel["id"], seed.channel_id);
    assert_eq!(first.channel["type"], "sandbox");
    let created = db_peek::events_named(&env, seed.org_id, "contact.created").await;
    assert_eq!(created[0].data["contact_uuid"], contact_uuid.as_str());
    assert_eq!(created[0].channel["id"], seed.channel_id);
}

async fn channel_selection_follows_the_rules(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let other = env.seed().await;
    let create = |args: Vec<String>| {
        let env = &env;
        async move {
            let mut full: Vec<&str> = vec!["channel", "create", "--org"];
            full.extend(args.iter().map(String::as_str));
            env.admin(&full).await
        }
    };
    let second = create(vec![
        org.clone(),
        "--type".into(),
        "sandbox".into(),
        "--name".into(),
        "Support Line".into(),
        "--slug".into(),
        "support".into(),
        "--identifier".into(),
        "support-777".into(),
    ])
    .await;
    let inactive = create(vec![
        org.clone(),
        "--type".into(),
        "sandbox".into(),
        "--name".into(),
        "Old".into(),
        "--inactive".into(),
    ])
    .await;
    let leads = create(vec![
        org.clone(),
        "--type".into(),
        "lead_ingestion".into(),
        "--name".into(),
        "Leads".into(),
    ])
    .await;
    for name in ["Twin Line", "twin_line"] {
        create(vec![
            org.clone(),
            "--type".into(),
            "sandbox".into(),
            "--name".into(),
            name.into(),
        ])
        .await;
    }
    let server = env.start(&[]).await;
    let body = |extra: Value| {
        let mut b = json!({"phone": PHONE, "message": "hi"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let used = |r: &Resp| r.body["channel"]["id"].as_i64().unwrap();

    // No selector: the organization's default.
    let r = send(&server, &seed.key, TEXT, &body(json!({})))
        .await
        .expect(201);
    assert_eq!(used(&r), seed.channel_id);
    let second_id = second["id"].as_i64().unwrap();
    // By id; by slug, UUID, provider identifier and normalized name.
    for selector in [
        json!({"channel_id": second_id}),
        json!({"channel_slug": "support"}),
        json!({"channel_slug": second["uuid"]}),
        json!({"channel_slug": "support-777"}),
        json!({"channel_slug": "  SUPPORT_line "}),
    ] {
        let r = send(&server, &seed.key, TEXT, &body(selector.clone()))
            .await
            .expect(201);
        assert_eq!(used(&r), second_id, "{selector}");
        assert_eq!(r.body["channel"]["slug"], "support");
    }
    // Both selectors.
    send(
        &server,
        &seed.key,
        TEXT,
        &body(json!({"channel_id": second_id, "channel_slug": "support"})),
    )
    .await
    .expect_error(422, "channel_conflict");
    // Unknown, another organization's, inactive, cannot send, ambiguous.
    for (selector, reason) in [
        (json!({"channel_id": 999_999}), "not_found"),
        (json!({"channel_id": other.channel_id}), "not_found"),
        (json!({"channel_slug": "nope"}), "not_found"),
        (json!({"channel_id": inactive["id"]}), "inactive"),
        (json!({"channel_slug": inactive["slug"]}), "inactive"),
        (json!({"channel_id": leads["id"]}), "cannot_send"),
        (json!({"channel_slug": "TWIN LINE"}), "ambiguous"),
    ] {
        let r = send(&server, &seed.key, TEXT, &body(selector.clone()))
            .await
            .expect_error(422, "invalid_channel");
        assert_eq!(r.body["error"]["details"]["reason"], reason, "{selector}");
    }
    // The key's default channel wins over the organization's.
    let keyed = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "messages:write",
            "--default-channel",
            &second_id.to_string(),
        ])
        .await;
    let keyed = keyed["key"].as_str().unwrap();
    let r = send(&server, keyed, TEXT, &body(json!({})))
        .await
        .expect(201);
    assert_eq!(used(&r), second_id);
    // An inactive key default is an error, not a fall-through.
    env.admin(&["channel", "update", &second_id.to_string(), "--inactive"])
        .await;
    let r = send(&server, keyed, TEXT, &body(json!({})))
        .await
        .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "inactive");
    // No default anywhere.
    let lonely = env.admin(&["org", "create", "--name", "Lonely"]).await;
    let lonely_id = lonely["id"].as_i64().unwrap().to_string();
    env.admin(&[
        "channel",
        "create",
        "--org",
        &lonely_id,
        "--type",
        "sandbox",
        "--name",
        "Not default",
    ])
    .await;
    let lonely_key = env.key(lonely["id"].as_i64().unwrap(), "*").await;
    send(&server, &lonely_key, TEXT, &body(json!({})))
        .await
        .expect_error(422, "no_default_channel");
    // Nothing was recorded for any refused send.
    assert_eq!(history(&server, &seed.key, "").await.len(), 7);
}

async fn validation_reports_every_field(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let other = env.seed().await;
    let server = env.start(&[]).await;
    let foreign = env
        .admin(&[
            "contact",
            "create",
            "--org",
            &other.org_id.to_string(),
            "--phone",
            "+14155552671",
        ])
        .await;
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (TEXT, json!({"phone": PHONE}), vec!["message"]),
        (
            TEXT,
            json!({"phone": PHONE, "message": "   "}),
            vec!["message"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "message": "a".repeat(4097)}),
            vec!["message"],
        ),
        (TEXT, json!({"message": "hi"}), vec!["contact_uuid"]),
        (
            TEXT,
            json!({"contact_uuid": "not-a-uuid", "message": "hi"}),
            vec!["contact_uuid"],
        ),
        (
            TEXT,
            json!({"contact_uuid": uuid::Uuid::new_v4(), "message": "hi"}),
            vec!["contact_uuid"],
        ),
        (
            TEXT,
            json!({"contact_uuid": foreign["uuid"], "message": "hi"}),
            vec!["contact_uuid"],
        ),
        (
            TEXT,
            json!({"phone": "+49 CALL ME", "message": ""}),
            vec!["phone", "message"],
        ),
        (TEXT, json!({"phone": "12", "message": "hi"}), vec!["phone"]),
        (
            TEXT,
            json!({"phone": "+1234567890123456", "message": "hi"}),
            vec!["phone"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "message": "hi", "type": "video"}),
            vec!["type"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "message": "hi", "channel_slug": ""}),
            vec!["channel_slug"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "type": "interactive"}),
            vec!["interactive"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "type": "interactive", "interactive": {"type": "button", "body": {"text": "x"},
                "action": {"buttons": [
                    {"type": "reply", "reply": {"id": "1", "title": "one"}},
                    {"type": "reply", "reply": {"id": "2", "title": "two"}},
                    {"type": "reply", "reply": {"id": "3", "title": "three"}},
                    {"type": "reply", "reply": {"id": "4", "title": "four"}}]}}}),
            vec!["interactive.action.buttons"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "type": "interactive", "interactive": {"type": "button", "body": {"text": "x"},
                "action": {"buttons": [
                    {"type": "reply", "reply": {"id": "1", "title": "This title is far too long"}},
                    {"type": "reply", "reply": {"id": "1", "title": "b"}}]}}}),
            vec![
                "interactive.action.buttons[0].reply.title",
                "interactive.action.buttons[1].reply.id",
            ],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "type": "interactive", "interactive": {"type": "list", "body": {"text": "x"},
                "action": {"button": "Menu", "sections": [{"title": "All", "rows":
                    (0..11).map(|i| json!({"id": format!("r{i}"), "title": format!("Row {i}")})).collect::<Vec<_>>()}]}}}),
            vec!["interactive.action.sections"],
        ),
        (
            TEXT,
            json!({"phone": PHONE, "type": "interactive", "interactive": {"type": "list", "action": {"button": "Menu",
                "sections": [{"rows": [{"id": "a", "title": "A row title over 24 chars"}]}]}}}),
            vec![
                "interactive.body.text",
                "interactive.action.sections[0].rows[0].title",
            ],
        ),
        (
            MEDIA,
            json!({"phone": PHONE}),
            vec!["media_type", "media_url"],
        ),
        (
            MEDIA,
            json!({"phone": PHONE, "media_type": "pdf", "media_url": "ftp://example.com/a.pdf"}),
            vec!["media_type", "media_url"],
        ),
        (
            MEDIA,
            json!({"phone": PHONE, "media_type": "image", "media_url": "/relative.png"}),
            vec!["media_url"],
        ),
        (
            MEDIA,
            json!({"phone": PHONE, "media_type": "audio", "media_url": "https://x.test/a.mp3", "caption": "no"}),
            vec!["caption"],
        ),
        (TEMPLATE, json!({"phone": PHONE}), vec!["template"]),
        (
            TEMPLATE,
            json!({"phone": PHONE, "template": {}}),
            vec!["template.name", "template.language"],
        ),
        (
            TEMPLATE,
            json!({"phone": PHONE, "template": {"name": "x", "language": "en", "components": {"type": "body"}}}),
            vec!["template.components"],
        ),
        // Wrong JSON types are field errors too.
        (TEXT, json!({"phone": PHONE, "message": 5}), vec!["message"]),
        (
            TEXT,
            json!({"phone": PHONE, "message": "hi", "channel_id": "1"}),
            vec!["channel_id"],
        ),
        (
            TEMPLATE,
            json!({"phone": PHONE, "template": "order_update"}),
            vec!["template"],
        ),
    ];
    for (path, body, fields) in cases {
        let r = send(&server, &seed.key, path, &body)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(field_names(&r), fields, "{path} {body}");
    }
    // A phone and a contact that disagree.
    let mine = env
        .admin(&[
            "contact",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--phone",
            PHONE,
        ])
        .await;
    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"contact_uuid": mine["uuid"], "phone": "+14155552671", "message": "x"}),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(field_names(&r), vec!["phone"]);
    // ... and that agree.
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"contact_uuid": mine["uuid"], "phone": PHONE, "message": "x"}),
    )
    .await
    .expect(201);
    // Exactly 4096 characters (not bytes) is fine.
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": PHONE, "message": "é".repeat(4096)}),
    )
    .await
    .expect(201);
    assert_eq!(history(&server, &seed.key, "").await.len(), 2);
}

async fn hostile_bodies_are_client_errors(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "10000")])
        .await;
    let raw = |path: &'static str, body: Vec<u8>| {
        let server = &server;
        let key = seed.key.clone();
        async move {
            let r = server
                .client
                .post(server.url(path))
                .bearer_auth(key)
                .header("content-type", "application/json")
                .header("Idempotency-Key", ikey())
                .body(body)
                .send()
                .await
                .unwrap();
            Server::read(r).await
        }
    };
    let deep = format!(
        "{{\"phone\": \"{PHONE}\", \"message\": \"x\", \"interactive\": {}{}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    // (body, the status every path gives, when it is the same for all three)
    let bodies: Vec<(Vec<u8>, Option<u16>)> = vec![
        (b"not json".to_vec(), Some(400)),
        (b"".to_vec(), Some(400)),
        (b"{\"message\": \"\xff\xfe\"}".to_vec(), Some(400)),
        (
            b"{\"phone\": \"+4915123456789\", \"message\": \"x\"} trailing".to_vec(),
            Some(400),
        ),
        (
            b"{\"phone\": \"+4915123456789\", \"message\": \"\\ud800\"}".to_vec(),
            None,
        ),
        (deep.into_bytes(), None),
        (b"[1, 2, 3]".to_vec(), Some(422)),
        (b"\"a string\"".to_vec(), Some(422)),
        (
            b"{\"channel_id\": 1e400, \"message\": \"x\"}".to_vec(),
            None,
        ),
        (
            b"{\"channel_id\": 99999999999999999999999, \"message\": \"x\"}".to_vec(),
            Some(422),
        ),
        (
            b"{\"channel_id\": -1, \"phone\": \"+4915123456789\", \"message\": \"x\"}".to_vec(),
            Some(422),
        ),
        (
            b"{\"channel_id\": 1.5, \"message\": \"x\"}".to_vec(),
            Some(422),
        ),
        (
            b"{\"phone\": [\"+4915123456789\"], \"message\": \"x\"}".to_vec(),
            Some(422),
        ),
        (
            b"{\"phone\": \"+4915123456789\", \"message\": \"nul \\u0000 inside\"}".to_vec(),
            Some(422),
        ),
        (
            format!(
                "{{\"phone\": \"{}\", \"message\": \"x\"}}",
                "9".repeat(100_000)
            )
            .into_bytes(),
            Some(422),
        ),
    ];
    for path in [TEXT, MEDIA, TEMPLATE] {
        for (body, status) in &bodies {
            let r = raw(path, body.clone()).await;
            let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
            match status {
                Some(s) => assert_eq!(r.status.as_u16(), *s, "{path} {shown}: {}", r.text),
                None => assert!(r.status.is_client_error(), "{path} {shown}: {}", r.text),
            }
            assert!(r.body["error"]["code"].is_string(), "{}", r.text);
        }
    }
    // An oversized body: 413 (the server may answer before the client finished writing, so a
    // client that cannot read the answer tries again).
    for path in [TEXT, MEDIA, TEMPLATE] {
        let mut answered = None;
        for _ in 0..5 {
            let r = server
                .client
                .post(server.url(path))
                .bearer_auth(&seed.key)
                .header("content-type", "application/json")
                .header("Idempotency-Key", ikey())
                .body(vec![b' '; 1024 * 1024 + 16])
                .send()
                .await;
            if let Ok(r) = r {
                answered = Some(Server::read(r).await);
                break;
            }
        }
        answered
            .expect("an answer to an oversized body")
            .expect_error(413, "payload_too_large");
    }
    // Nesting deeper than 128 where the body is read: malformed.
    raw(
        TEXT,
        format!(
            "{{\"phone\": \"{PHONE}\", \"type\": \"interactive\", \"interactive\": {}{}}}",
            "[".repeat(300),
            "]".repeat(300)
        )
        .into_bytes(),
    )
    .await
    .expect_error(400, "malformed_json");
    let nul = json!({"phone": PHONE, "template": {"name": "x", "language": "en", "components": [{"type": "body", "parameters": [{"type": "text", "text": "a\u{0}b"}]}]}});
    send(&server, &seed.key, TEMPLATE, &nul)
        .await
        .expect_error(422, "validation_failed");
    let nul = json!({"phone": PHONE, "type": "interactive", "interactive": {"type": "button", "body": {"text": "x"},
        "action": {"buttons": [{"type": "reply", "reply": {"id": "a\u{0}", "title": "b"}}]}}});
    send(&server, &seed.key, TEXT, &nul)
        .await
        .expect_error(422, "validation_failed");
    // A wrong content type.
    let r = server
        .client
        .post(server.url(TEXT))
        .bearer_auth(&seed.key)
        .header("content-type", "text/plain")
        .header("Idempotency-Key", ikey())
        .body("{}")
        .send()
        .await
        .unwrap();
    Server::read(r)
        .await
        .expect_error(415, "unsupported_media_type");
    // The server is healthy and nothing was sent.
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);
    assert!(history(&server, &seed.key, "").await.is_empty());
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

async fn idempotency_replays_conflicts_and_isolation(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let other_key = env.key(seed.org_id, "*").await;
    let server = env.start(&[]).await;
    let body = json!({"phone": PHONE, "message": "once"});

    // The header is required on the three paths, and checked.
    for path in [TEXT, MEDIA, TEMPLATE] {
        server
            .post(path, &seed.key, &body)
            .await
            .expect_error(400, "idempotency_key_missing");
        for bad in ["", &"k".repeat(121), "has space", "tab\tkey"] {
            server
                .post_with(path, &seed.key, &body, &[("Idempotency-Key", bad)])
                .await
                .expect_error(400, "idempotency_key_invalid");
        }
    }
    send_with(&server, &seed.key, TEXT, &body, &"k".repeat(120))
        .await
        .expect(201);

    // Same key, same body: the stored response, replayed.
    let first = send_with(&server, &seed.key, TEXT, &body, "order-1001")
        .await
        .expect(201);
    let again = send_with(&server, &seed.key, TEXT, &body, "order-1001")
        .await
        .expect(201);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(again.text, first.text, "byte for byte");
    // Same key, another body or another path: a conflict.
    send_with(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": PHONE, "message": "twice"}),
        "order-1001",
    )
    .await
    .expect_error(409, "idempotency_conflict");
    send_with(&server, &seed.key, TEMPLATE, &body, "order-1001")
        .await
        .expect_error(409, "idempotency_conflict");
    // Keys are per credential: another key may use the same value.
    let other = send_with(&server, &other_key, TEXT, &body, "order-1001")
        .await
        .expect(201);
    assert!(other.header("idempotency-replayed").is_none());
    assert_ne!(other.body["message"]["id"], first.body["message"]["id"]);

    // A 4xx decided before execution is not stored (CONVENTIONS "Idempotency", as at Stripe):
    // the same request is evaluated again, and the corrected one may reuse the key.
    let invalid = json!({"phone": PHONE});
    let r1 = send_with(&server, &seed.key, TEXT, &invalid, "bad-1")
        .await
        .expect_error(422, "validation_failed");
    let r2 = send_with(&server, &seed.key, TEXT, &invalid, "bad-1")
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r2.header("idempotency-replayed"), None);
    assert_ne!(
        r1.body["error"]["request_id"],
        r2.body["error"]["request_id"]
    );
    // A malformed body under a key: not stored either.
    let raw = |key: &'static str| {
        let server = &server;
        let api_key = seed.key.clone();
        async move {
            let r = server
                .client
                .post(server.url(TEXT))
                .bearer_auth(api_key)
                .header("content-type", "application/json")
                .header("Idempotency-Key", key)
                .body("{oops")
                .send()
                .await
                .unwrap();
            Server::read(r).await
        }
    };
    raw("broken-1").await.expect_error(400, "malformed_json");
    let r = raw("broken-1").await.expect_error(400, "malformed_json");
    assert_eq!(r.header("idempotency-replayed"), None);

    // Exactly the three successful sends exist.
    assert_eq!(history(&server, &seed.key, "").await.len(), 3);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        3
    );
}

async fn idempotency_in_progress_and_lease_takeover(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    // A generous lease first: the in-progress answer must not depend on the machine's speed.
    let mut server = env
        .start(&[
            ("SWITCHBOARD_IDEMPOTENCY_LEASE", "60s"),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "10000"),
        ])
        .await;
    let body = json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "hello_world", "language": "en_US"}});

    // A slow provider holds the first request.
    graph.then(Behaviour::Hold).await;
    let first = {
        let client = server.client.clone();
        let url = server.url(TEMPLATE);
        let key = seed.key.clone();
        let body = body.clone();
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "slow-1")
                .json(&body)
                .send()
                .await
                .unwrap();
            Server::read(r).await
        })
    };
    graph.wait_for_arrivals(1).await;
    let r = send_with(&server, &seed.key, TEMPLATE, &body, "slow-1")
        .await
        .expect_error(409, "idempotency_in_progress");
    assert!(r.header("retry-after").is_some());
    // A different body with the key is still a conflict.
    send_with(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": PHONE, "message": "x"}),
        "slow-1",
    )
    .await
    .expect_error(409, "idempotency_conflict");
    graph.release();
    let first = first.await.unwrap().expect(201);
    let replay = send_with(&server, &seed.key, TEMPLATE, &body, "slow-1")
        .await
        .expect(201);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(replay.body["message"]["id"], first.body["message"]["id"]);

    // The lease runs out while the provider holds a request: the next request takes the key
    // over and completes; the first one then answers with that result and writes nothing.
    assert_eq!(server.terminate().await, Some(0));
    let server = env
        .start(&[
            ("SWITCHBOARD_IDEMPOTENCY_LEASE", "1s"),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "10000"),
        ])
        .await;
    graph.then(Behaviour::Hold).await;
    let stuck = {
        let client = server.client.clone();
        let url = server.url(TEMPLATE);
        let key = seed.key.clone();
        let body = body.clone();
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "slow-2")
                .json(&body)
                .send()
                .await
                .unwrap();
            Server::read(r).await
        })
    };
    graph.wait_for_arrivals(2).await;
    let mut taken_over = None;
    for _ in 0..200 {
        let r = send_with(&server, &seed.key, TEMPLATE, &body, "slow-2").await;
        if r.status.as_u16() == 201 {
            taken_over = Some(r);
            break;
        }
        r.expect_error(409, "idempotency_in_progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let taken_over = taken_over.expect("the key is taken over once the lease ran out");
    assert!(taken_over.header("idempotency-replayed").is_none());
    graph.release();
    let stuck = stuck.await.unwrap().expect(201);
    assert_eq!(
        stuck.body["message"]["id"],
        taken_over.body["message"]["id"]
    );
    let messages = history(&server, &seed.key, &format!("&channel_id={}", wa["id"])).await;
    assert_eq!(messages.len(), 2, "one message per key");
    assert_eq!(
        graph.arrivals(),
        3,
        "the provider was called by the taking-over request too"
    );
}

async fn provider_failures_are_not_stored_and_can_be_retried(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let server = env
        .start(&[("SWITCHBOARD_PROVIDER_TIMEOUT", "500ms")])
        .await;
    let body = json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "hello_world", "language": "en_US"}});

    // 503 once: a 503 for the client, nothing stored; the retry with the same key succeeds.
    graph.then(Behaviour::Unavailable).await;
    let r = send_with(&server, &seed.key, TEMPLATE, &body, "retry-me")
        .await
        .expect_error(503, "provider_unavailable");
    assert!(r.header("idempotency-replayed").is_none());
    assert!(history(&server, &seed.key, "").await.is_empty());
    let ok = send_with(&server, &seed.key, TEMPLATE, &body, "retry-me")
        .await
        .expect(201);
    assert!(
        ok.header("idempotency-replayed").is_none(),
        "the 503 was not stored"
    );
    assert!(
        ok.body["message"]["provider_message_id"]
            .as_str()
            .unwrap()
            .starts_with("wamid.")
    );

    // A malformed answer and a timeout are 503s that leave nothing half-written.
    graph.then(Behaviour::Malformed).await;
    send_with(&server, &seed.key, TEMPLATE, &body, "malformed")
        .await
        .expect_error(503, "provider_unavailable");
    graph.then(Behaviour::Hold).await;
    send_with(&server, &seed.key, TEMPLATE, &body, "timeout")
        .await
        .expect_error(503, "provider_unavailable");
    graph.release();
    assert_eq!(history(&server, &seed.key, "").await.len(), 1);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        1
    );
    // Both keys are free again.
    send_with(&server, &seed.key, TEMPLATE, &body, "malformed")
        .await
        .expect(201);
    send_with(&server, &seed.key, TEMPLATE, &body, "timeout")
        .await
        .expect(201);
    assert_eq!(history(&server, &seed.key, "").await.len(), 3);
    // No token or secret in the logs.
    assert!(
        !server.logs().contains(WA_TOKEN),
        "the access token is never logged"
    );
}

async fn concurrent_identical_requests_send_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "1000")]).await;
    let body = json!({"phone": PHONE, "message": "exactly once"});
    for round in 0..3 {
        let key = format!("burst-{round}");
        let mut tasks = Vec::new();
        for _ in 0..24 {
            let client = server.client.clone();
            let url = server.url(TEXT);
            let api_key = seed.key.clone();
            let body = body.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let r = client
                    .post(url)
                    .bearer_auth(api_key)
                    .header("Idempotency-Key", key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                Server::read(r).await
            }));
        }
        let mut ids = std::collections::HashSet::new();
        let mut fresh = 0;
        for t in tasks {
            let r = t.await.unwrap();
            match r.status.as_u16() {
                201 => {
                    ids.insert(r.body["message"]["id"].as_i64().unwrap());
                    if r.header("idempotency-replayed").is_none() {
                        fresh += 1;
                    }
                }
                409 => {
                    r.expect_error(409, "idempotency_in_progress");
                }
                other => panic!("unexpected {other}: {}", r.text),
            }
        }
        assert_eq!(fresh, 1, "one request ran the send");
        assert_eq!(ids.len(), 1, "every 201 shows the same message");
    }
    assert_eq!(history(&server, &seed.key, "").await.len(), 3);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        3
    );
}

/// A counter's value in the Prometheus text (0 when absent).
pub(crate) fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Sends made at the same moment are recorded by group commit (several records in one
/// transaction, which the group counters show), and each is still exactly what it would be
/// alone: its own 201, its completed idempotency record, its message in the history and one
/// `message.sent` delivery.
async fn concurrent_sends_are_group_committed(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&crate::webhooks::with(&[(
            "SWITCHBOARD_RATE_LIMIT_SENDS",
            "100000",
        )]))
        .await;
    let rx = crate::receivers::Receiver::start().await;
    crate::webhooks::Api::new(&server, &seed.key)
        .create(&rx.url("/sent"), &["message.sent"])
        .await;
    let mut sent: Vec<(String, Value, Value)> = Vec::new();
    // One send first, as on a server that has been running: the bursts below then find the
    // key cached and the connection pool open (a cold pool under a burst of 32 on a loaded
    // machine can time out connecting, which is not what this test is about).
    let warm = json!({"phone": "+4915123456700", "message": "warm-up"});
    let r = server
        .client
        .post(server.url(TEXT))
        .bearer_auth(&seed.key)
        .header("Idempotency-Key", "group-warm-up")
        .json(&warm)
        .send()
        .await
        .unwrap();
    let r = Server::read(r).await.expect(201);
    sent.push(("group-warm-up".into(), warm, r.body));
    let (mut records, mut commits) = (0.0, 0.0);
    // Rounds of 32 sends at once until one round has shown a group of several records (the
    // first round nearly always does; the loop only guards against a machine so idle that
    // every send was written before the next arrived).
    for round in 0..5 {
        let mut tasks = Vec::new();
        for i in 0..32 {
            let (client, url, key) = (server.client.clone(), server.url(TEXT), seed.key.clone());
            let idem = format!("group-{round}-{i}");
            let body = json!({"phone": format!("+49151234567{:02}", i % 8), "message": format!("group {i}")});
            tasks.push(tokio::spawn(async move {
                let r = client
                    .post(url)
                    .bearer_auth(key)
                    .header("Idempotency-Key", &idem)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                (idem, body, Server::read(r).await)
            }));
        }
        for t in tasks {
            let (idem, body, r) = t.await.unwrap();
            assert_eq!(r.status.as_u16(), 201, "{}\n{}", r.text, server.logs());
            assert_eq!(r.body["message"]["text"]["body"], body["message"]);
            sent.push((idem, body, r.body));
        }
        let m = server
            .call(Method::GET, "/metrics", None, None)
            .await
            .expect(200);
        records = counter(&m.text, "switchboard_send_group_records_total");
        commits = counter(&m.text, "switchboard_send_group_commits_total");
        assert_eq!(
            records as usize,
            sent.len(),
            "every send went through the group commit"
        );
        if commits < records {
            break;
        }
    }
    assert!(
        commits < records,
        "{records} records in {commits} transactions: never grouped"
    );
    // Each send's idempotency record holds its own response.
    for (idem, request, response) in sent.iter().step_by(7) {
        let again = server
            .client
            .post(server.url(TEXT))
            .bearer_auth(&seed.key)
            .header("Idempotency-Key", idem)
            .json(request)
            .send()
            .await
            .unwrap();
        let again = Server::read(again).await.expect(201);
        assert_eq!(again.header("idempotency-replayed"), Some("true"));
        assert_eq!(again.body, *response);
    }
    // Every message is in the history once, and its message.sent is delivered once.
    let ids: std::collections::HashSet<i64> = sent
        .iter()
        .map(|(_, _, b)| b["message"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), sent.len());
    assert_eq!(
        history(&server, &seed.key, "").await.len(),
        sent.len().min(200)
    );
    let delivered = rx
        .wait_for("/sent", sent.len(), Duration::from_secs(30))
        .await;
    assert_eq!(delivered.len(), sent.len(), "one delivery per message");
    let delivered: std::collections::HashSet<i64> = delivered
        .iter()
        .map(|r| r.json()["data"]["message_id"].as_i64().unwrap())
        .collect();
    assert_eq!(delivered, ids);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        sent.len()
    );
}

async fn a_crash_mid_send_never_yields_two_messages(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let lease = [
        ("SWITCHBOARD_IDEMPOTENCY_LEASE", "200ms"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "10000"),
    ];
    let mut server = env.start(&lease).await;
    let body = json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "hello_world", "language": "en_US"}});
    graph.then(Behaviour::Hold).await;
    let pending = {
        let client = server.client.clone();
        let url = server.url(TEMPLATE);
        let key = seed.key.clone();
        let body = body.clone();
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "crash-1")
                .json(&body)
                .send()
                .await
        })
    };
    graph.wait_for_arrivals(1).await;
    // The process dies while the provider call is in flight.
    server.kill().await;
    assert!(
        pending.await.unwrap().is_err(),
        "the client saw the connection drop"
    );
    graph.release();
    let server = env.start(&lease).await;
    // The client retries with the same key until the crashed claim's lease has run out.
    let mut done = None;
    for _ in 0..200 {
        let r = send_with(&server, &seed.key, TEMPLATE, &body, "crash-1").await;
        if r.status.as_u16() == 201 {
            done = Some(r);
            break;
        }
        r.expect_error(409, "idempotency_in_progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = done.expect("the retry succeeds");
    let again = send_with(&server, &seed.key, TEMPLATE, &body, "crash-1")
        .await
        .expect(201);
    assert_eq!(again.body["message"]["id"], done.body["message"]["id"]);
    assert_eq!(history(&server, &seed.key, "").await.len(), 1);
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        1
    );
}

async fn idempotency_records_expire_and_are_purged(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&[
            ("SWITCHBOARD_IDEMPOTENCY_RETENTION", "1ms"),
            ("SWITCHBOARD_IDEMPOTENCY_LEASE", "10s"),
            ("SWITCHBOARD_PURGE_INTERVAL", "50ms"),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "10000"),
        ])
        .await;
    let body = json!({"phone": PHONE, "message": "again and again"});
    // A first send loads the phone-number metadata (seconds in a debug build on a busy
    // machine), so that the timed requests below run well within the lease.
    send(&server, &seed.key, TEXT, &body).await.expect(201);
    let first = send_with(&server, &seed.key, TEXT, &body, "short-lived")
        .await
        .expect(201);
    // Once the record has expired (never before the lease ends), the key is as good as new.
    let mut second = None;
    for _ in 0..600 {
        let r = send_with(&server, &seed.key, TEXT, &body, "short-lived")
            .await
            .expect(201);
        if r.header("idempotency-replayed").is_none() {
            second = Some(r);
            break;
        }
        assert_eq!(r.body["message"]["id"], first.body["message"]["id"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let second = second.expect("the record expires");
    assert_ne!(second.body["message"]["id"], first.body["message"]["id"]);
    // The periodic purge deletes the expired records.
    let mut left = -1;
    for _ in 0..200 {
        left = db_peek::idempotency_records(&env).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, 0);
}

async fn whatsapp_sends_speak_the_graph_api(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let wa_uuid = wa["uuid"].as_str().unwrap();
    // Media is fetched by the service (here from a loopback server) and uploaded.
    let files = crate::media_server::MediaServer::start().await;
    files.file(
        "/invoice.pdf",
        crate::media_server::pdf(2048),
        "application/pdf",
    );
    files.file("/s.webp", crate::media_server::webp(1024), "image/webp");
    let server = env
        .start(&[("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")])
        .await;
    // The contact writes first: the window opens.
    wa_callback(
        &server,
        wa_uuid,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![wa_text(PHONE_DIGITS, "wamid.IN1", unix_now(), "Hi!")],
            vec![],
        ),
    )
    .await
    .expect(200);

    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "Hello from the shop"}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["provider_message_id"], "wamid.FAKE000001");
    assert_eq!(r.body["channel"]["type"], "whatsapp_cloud");
    assert_eq!(r.body["channel"]["identifier"], PHONE_NUMBER_ID);
    assert!(r.body["conversation"]["last_inbound_at"].is_string());
    let received = graph.received().await;
    let call = received.last().unwrap();
    assert_eq!(call.path, format!("/v21.0/{PHONE_NUMBER_ID}/messages"));
    assert_eq!(
        call.authorization.as_deref(),
        Some(format!("Bearer {WA_TOKEN}").as_str())
    );
    assert_eq!(
        call.body,
        json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": PHONE_DIGITS,
               "type": "text", "text": {"body": "Hello from the shop", "preview_url": false}})
    );

    send(&server, &seed.key, TEXT, &json!({"channel_slug": "wa", "phone": PHONE, "type": "interactive", "interactive": {
        "type": "list", "header": {"type": "text", "text": "Menu"}, "body": {"text": "Pick a size"},
        "action": {"button": "Sizes", "sections": [{"title": "All", "rows": [{"id": "s", "title": "Small"}, {"id": "l", "title": "Large"}]}]}}}))
        .await
        .expect(201);
    let call = graph.received().await.pop().unwrap();
    assert_eq!(call.body["type"], "interactive");
    assert_eq!(call.body["interactive"]["type"], "list");
    assert_eq!(
        call.body["interactive"]["action"]["sections"][0]["rows"][1]["id"],
        "l"
    );

    send(
        &server,
        &seed.key,
        MEDIA,
        &json!({"channel_slug": "wa", "phone": PHONE, "media_type": "document",
        "media_url": files.url("/invoice.pdf"), "file_name": "invoice.pdf", "caption": "Invoice"}),
    )
    .await
    .expect(201);
    let call = graph.received().await.pop().unwrap();
    let upload = graph.uploads().await.pop().unwrap();
    assert_eq!(call.body["type"], "document");
    assert_eq!(
        call.body["document"],
        json!({"id": upload.id, "filename": "invoice.pdf", "caption": "Invoice"})
    );
    send(
        &server,
        &seed.key,
        MEDIA,
        &json!({"channel_slug": "wa", "phone": PHONE, "media_type": "sticker",
        "media_url": files.url("/s.webp")}),
    )
    .await
    .expect(201);
    let call = graph.received().await.pop().unwrap();
    let upload = graph.uploads().await.pop().unwrap();
    assert_eq!(upload.mime, "image/webp");
    assert_eq!(call.body["sticker"], json!({"id": upload.id}));

    // A template to a number that never wrote: allowed, no conversation.
    let r = send(&server, &seed.key, TEMPLATE, &json!({"channel_slug": "wa", "phone": "+14155552671",
        "template": {"name": "order_update", "language": {"code": "en_US"},
                     "components": [{"type": "body", "parameters": [{"type": "text", "text": "4711"}]}]}}))
        .await
        .expect(201);
    assert_eq!(r.body["conversation"], Value::Null);
    assert_eq!(r.body["message"]["conversation_uuid"], Value::Null);
    assert_eq!(r.body["contact"]["phone"], "+14155552671");
    let call = graph.received().await.pop().unwrap();
    assert_eq!(call.body["to"], "14155552671");
    assert_eq!(call.body["template"]["name"], "order_update");
    assert_eq!(call.body["template"]["language"]["code"], "en_US");
    assert_eq!(
        call.body["template"]["components"][0]["parameters"][0]["text"],
        "4711"
    );

    // A rejection: 422 provider_rejected with the provider's code; the message is kept as failed.
    graph
        .then(Behaviour::Reject {
            status: 400,
            code: 131026,
            message: "(#131026) Message undeliverable".into(),
            details: Some("Receiver is incapable of receiving this message".into()),
        })
        .await;
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_slug": "wa", "phone": PHONE,
        "template": {"name": "order_update", "language": "en_US"}}),
    )
    .await
    .expect_error(422, "provider_rejected");
    let d = &r.body["error"]["details"];
    assert_eq!(d["provider"], "whatsapp_cloud");
    assert_eq!(d["provider_code"], 131026);
    assert_eq!(d["provider_status"], 400);
    assert_eq!(
        d["provider_details"]["details"],
        "Receiver is incapable of receiving this message"
    );
    let failed_id = d["message_id"].as_i64().unwrap();
    let failed = history(&server, &seed.key, "&status=failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["id"], failed_id);
    assert_eq!(failed[0]["error"]["code"], "provider_rejected");
    assert_eq!(failed[0]["error"]["provider_code"], 131026);
    let sent_events = db_peek::events_named(&env, seed.org_id, "message.sent").await;
    assert_eq!(sent_events.last().unwrap().data["status"], "failed");
    assert_eq!(sent_events.last().unwrap().channel["id"], wa["id"]);

    // A wrong access token is the provider's 401: a rejection too.
    env.admin(&["channel", "update", &wa["id"].to_string(), "--provider-config",
        &json!({"phone_number_id": PHONE_NUMBER_ID, "access_token": "wrong", "app_secret": APP_SECRET,
                "api_base_url": graph.base_url}).to_string()])
        .await;
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_slug": "wa", "phone": PHONE,
        "template": {"name": "order_update", "language": "en_US"}}),
    )
    .await
    .expect_error(422, "provider_rejected");
    assert_eq!(r.body["error"]["details"]["provider_code"], 190);
    // A channel without provider settings cannot send.
    let bare = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "Bare",
        ])
        .await;
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_id": bare["id"], "phone": PHONE,
        "template": {"name": "order_update", "language": "en_US"}}),
    )
    .await
    .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "not_configured");
}

async fn whatsapp_service_window(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let wa_uuid = wa["uuid"].as_str().unwrap();
    // Media on WhatsApp is fetched by the service: from a loopback server here.
    let files = crate::media_server::MediaServer::start().await;
    files.file("/a.png", crate::media_server::PNG.to_vec(), "image/png");
    let server = env
        .start(&[("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")])
        .await;
    let text = |phone: &str| json!({"channel_slug": "wa", "phone": phone, "message": "Hello"});
    let media = |phone: &str| json!({"channel_slug": "wa", "phone": phone, "media_type": "image", "media_url": files.url("/a.png")});
    let template = |phone: &str| json!({"channel_slug": "wa", "phone": phone, "template": {"name": "hello_world", "language": "en_US"}});

    // No conversation: free-form messages are refused before the provider is called.
    send(&server, &seed.key, TEXT, &text(PHONE))
        .await
        .expect_error(422, "conversation_required");
    send(&server, &seed.key, MEDIA, &media(PHONE))
        .await
        .expect_error(422, "conversation_required");
    // A contact that exists but has no conversation on this channel.
    let known = env
        .admin(&[
            "contact",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--phone",
            "+14155552671",
        ])
        .await;
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "wa", "contact_uuid": known["uuid"], "message": "x"}),
    )
    .await
    .expect_error(422, "conversation_required");
    assert_eq!(graph.arrivals(), 0);
    // Templates are always allowed.
    send(&server, &seed.key, TEMPLATE, &template(PHONE))
        .await
        .expect(201);

    // The contact's last message is 25 hours old: the window is closed.
    wa_callback(
        &server,
        wa_uuid,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![wa_text(
                PHONE_DIGITS,
                "wamid.OLD",
                unix_now() - 25 * 3600,
                "old",
            )],
            vec![],
        ),
    )
    .await
    .expect(200);
    let r = send(&server, &seed.key, TEXT, &text(PHONE))
        .await
        .expect_error(422, "outside_service_window");
    assert!(r.body["error"]["details"]["last_inbound_at"].is_string());
    send(&server, &seed.key, MEDIA, &media(PHONE))
        .await
        .expect_error(422, "outside_service_window");
    send(&server, &seed.key, TEMPLATE, &template(PHONE))
        .await
        .expect(201);
    assert_eq!(
        graph.arrivals(),
        2,
        "only the templates reached the provider"
    );

    // A fresh message reopens the window; an older one arriving late does not close it.
    wa_callback(
        &server,
        wa_uuid,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![
                wa_text(PHONE_DIGITS, "wamid.NEW", unix_now() - 60, "new"),
                wa_text(PHONE_DIGITS, "wamid.OLDER", unix_now() - 30 * 3600, "older"),
            ],
            vec![],
        ),
    )
    .await
    .expect(200);
    let r = send(&server, &seed.key, TEXT, &text(PHONE))
        .await
        .expect(201);
    assert_eq!(r.body["conversation"]["status"], "open");
    let expires = r.body["conversation"]["window_expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    send(&server, &seed.key, MEDIA, &media(PHONE))
        .await
        .expect(201);
    // A provider timestamp in the future counts as now.
    wa_callback(
        &server,
        wa_uuid,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![wa_text(
                PHONE_DIGITS,
                "wamid.FUTURE",
                unix_now() + 86_400 * 30,
                "?",
            )],
            vec![],
        ),
    )
    .await
    .expect(200);
    let r = send(&server, &seed.key, TEXT, &text(PHONE))
        .await
        .expect(201);
    let later = r.body["conversation"]["window_expires_at"]
        .as_str()
        .unwrap();
    assert!(later >= expires.as_str());
    assert!(later < "2100", "not moved into the future: {later}");
}

async fn whatsapp_callbacks_are_verified_and_applied(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let wa_uuid = wa["uuid"].as_str().unwrap().to_owned();
    let path = format!("/inbound/{wa_uuid}");
    let server = env.start(&[]).await;

    // The subscription handshake: the raw challenge, or 403. No API key is needed.
    let ok = server
        .client
        .get(server.url(&format!(
            "{path}?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=1158201444"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(ok.text().await.unwrap(), "1158201444");
    for query in [
        "hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1",
        "hub.mode=unsubscribe&hub.verify_token=verify-me-please&hub.challenge=1",
        "",
    ] {
        let r = server
            .call(Method::GET, &format!("{path}?{query}"), None, None)
            .await;
        r.expect_error(403, "forbidden");
    }
    // Unknown channels and channel types without callbacks: 404.
    server
        .call(
            Method::GET,
            &format!("/inbound/{}", uuid::Uuid::new_v4()),
            None,
            None,
        )
        .await
        .expect_error(404, "not_found");
    server
        .call(Method::POST, "/inbound/not-a-uuid", None, Some(&json!({})))
        .await
        .expect_error(404, "not_found");
    let sandbox = env
        .admin(&["channel", "list", "--org", &seed.org_id.to_string()])
        .await;
    let sandbox_uuid = sandbox["data"][0]["uuid"].as_str().unwrap();
    server
        .call(
            Method::POST,
            &format!("/inbound/{sandbox_uuid}"),
            None,
            Some(&json!({})),
        )
        .await
        .expect_error(404, "not_found");

    // Even odd requests get the API's JSON errors.
    server
        .call(Method::GET, "/inbound/%FF%FE", None, None)
        .await
        .expect_error(404, "not_found");
    server
        .call(Method::GET, &format!("{path}?hub.mode=%FF"), None, None)
        .await
        .expect_error(403, "forbidden");
    let huge = post_raw(&server, &path, vec![b' '; 1024 * 1024 + 16], &[]).await;
    huge.expect_error(413, "payload_too_large");

    // Unsigned or wrongly signed: 401, nothing changes.
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.IN1", unix_now(), "Hello shop")],
        vec![],
    );
    let raw = serde_json::to_vec(&hook).unwrap();
    post_raw(&server, &path, raw.clone(), &[])
        .await
        .expect_error(401, "invalid_signature");
    post_raw(
        &server,
        &path,
        raw.clone(),
        &[("x-hub-signature-256", hub_signature("not-the-secret", &raw))],
    )
    .await
    .expect_error(401, "invalid_signature");
    let mut tampered = raw.clone();
    let at = tampered.len() - 10;
    tampered[at] ^= 1;
    post_raw(
        &server,
        &path,
        tampered,
        &[("x-hub-signature-256", hub_signature(APP_SECRET, &raw))],
    )
    .await
    .expect_error(401, "invalid_signature");
    assert!(history(&server, &seed.key, "").await.is_empty());

    // Signed: stored as inbound/received with contact and conversation; a retry is a duplicate.
    let r = wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    assert_eq!(
        (r.body["received"].as_i64(), r.body["duplicates"].as_i64()),
        (Some(1), Some(0))
    );
    let r = wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    assert_eq!(
        (r.body["received"].as_i64(), r.body["duplicates"].as_i64()),
        (Some(0), Some(1))
    );
    let inbound = history(&server, &seed.key, "&direction=inbound").await;
    assert_eq!(inbound.len(), 1);
    let m = &inbound[0];
    assert_eq!(
        (m["direction"].as_str(), m["status"].as_str()),
        (Some("inbound"), Some("received"))
    );
    assert_eq!(m["text"]["body"], "Hello shop");
    assert_eq!(m["provider_message_id"], "wamid.IN1");
    assert_eq!(m["channel"]["id"], wa["id"]);
    assert!(m["conversation_uuid"].is_string());
    let received = db_peek::events_named(&env, seed.org_id, "message.received").await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].data["message_id"], m["id"]);
    assert_eq!(received[0].channel["id"], wa["id"]);
    let contact = db_peek::events_named(&env, seed.org_id, "contact.created").await;
    assert_eq!(contact.len(), 1);
    assert_eq!(contact[0].data["contact"]["phone"], PHONE);
    assert_eq!(contact[0].data["contact"]["name"], "Ada Lovelace");
    assert_eq!(
        db_peek::events_named(&env, seed.org_id, "conversation.created")
            .await
            .len(),
        1
    );
    // A malformed body with a valid signature: 400.
    let junk = b"{not json".to_vec();
    post_raw(
        &server,
        &path,
        junk.clone(),
        &[("x-hub-signature-256", hub_signature(APP_SECRET, &junk))],
    )
    .await
    .expect_error(400, "malformed_json");

    // Status updates move an outbound message forward only.
    let sent = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "Thanks!"}),
    )
    .await
    .expect(201);
    let wamid = sent.body["message"]["provider_message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let message_id = sent.body["message"]["id"].clone();
    let status_of = |list: Vec<Value>| {
        list.into_iter()
            .find(|m| m["id"] == message_id)
            .map(|m| m["status"].as_str().unwrap().to_owned())
            .unwrap()
    };
    for (reported, expected, applied) in [
        ("delivered", "delivered", 1),
        ("delivered", "delivered", 0),
        ("sent", "delivered", 0),
        ("read", "read", 1),
        ("failed", "read", 0),
    ] {
        let r = wa_callback(
            &server,
            &wa_uuid,
            &wa_webhook(
                PHONE_NUMBER_ID,
                vec![],
                vec![wa_status(&wamid, reported, PHONE_DIGITS)],
            ),
        )
        .await
        .expect(200);
        assert_eq!(r.body["statuses_applied"], applied, "{reported}");
        assert_eq!(
            status_of(history(&server, &seed.key, "").await),
            expected,
            "{reported}"
        );
    }
    let updates = db_peek::events_named(&env, seed.org_id, "message.status.update").await;
    assert_eq!(
        updates
            .iter()
            .map(|e| e.data["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["delivered", "read"]
    );
    assert_eq!(updates[1].data["previous_status"], "delivered");
    assert_eq!(updates[1].data["message_id"], message_id);
    assert_eq!(updates[1].channel["id"], wa["id"]);
    // Failed, with the provider's error, for another message; unknown ids are ignored.
    let second = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "More"}),
    )
    .await
    .expect(201);
    let second_wamid = second.body["message"]["provider_message_id"]
        .as_str()
        .unwrap();
    let r = wa_callback(
        &server,
        &wa_uuid,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![],
            vec![
                wa_status(second_wamid, "failed", PHONE_DIGITS),
                wa_status("wamid.UNKNOWN", "read", PHONE_DIGITS),
            ],
        ),
    )
    .await
    .expect(200);
    assert_eq!(
        (
            r.body["statuses_applied"].as_i64(),
            r.body["statuses_ignored"].as_i64()
        ),
        (Some(1), Some(1))
    );
    let failed = history(&server, &seed.key, "&status=failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["error"]["provider_code"], 131026);
    // Changes for another phone number of the same app are not this channel's.
    let r = wa_callback(
        &server,
        &wa_uuid,
        &wa_webhook(
            "999999",
            vec![wa_text(PHONE_DIGITS, "wamid.ELSEWHERE", unix_now(), "x")],
            vec![],
        ),
    )
    .await
    .expect(200);
    assert_eq!(
        (r.body["received"].as_i64(), r.body["skipped"].as_i64()),
        (Some(0), Some(1))
    );
}

async fn telegram_sends_and_updates(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let token = "123456789:AAFakeBotTokenForTests_xyz";
    let secret = "tg-secret_token-1";
    let bot = Fake::telegram(token).await;
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
            &json!({"bot_token": token, "secret_token": secret, "api_base_url": bot.base_url})
                .to_string(),
        ])
        .await;
    assert_eq!(tg["identifier"], "123456789");
    let path = format!("/inbound/{}", tg["uuid"].as_str().unwrap());
    let server = env.start(&[]).await;
    let update = json!({"update_id": 1, "message": {"message_id": 5, "date": unix_now(),
        "chat": {"id": 4242, "type": "private"}, "from": {"id": 4242, "first_name": "Grace", "last_name": "Hopper"},
        "text": "Hello bot"}});
    let raw = serde_json::to_vec(&update).unwrap();
    post_raw(&server, &path, raw.clone(), &[])
        .await
        .expect_error(401, "invalid_signature");
    post_raw(
        &server,
        &path,
        raw.clone(),
        &[("x-telegram-bot-api-secret-token", "wrong".into())],
    )
    .await
    .expect_error(401, "invalid_signature");
    let r = post_raw(
        &server,
        &path,
        raw.clone(),
        &[("x-telegram-bot-api-secret-token", secret.into())],
    )
    .await
    .expect(200);
    assert_eq!(r.body["received"], 1);
    let r = post_raw(
        &server,
        &path,
        raw,
        &[("x-telegram-bot-api-secret-token", secret.into())],
    )
    .await
    .expect(200);
    assert_eq!(r.body["duplicates"], 1);
    let inbound = history(&server, &seed.key, "&channel_slug=bot").await;
    assert_eq!(inbound.len(), 1);
    assert_eq!(inbound[0]["provider_message_id"], "4242:5");
    let contact_uuid = inbound[0]["contact_uuid"].clone();

    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid, "message": "Hi Grace"}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["contact"]["name"], "Grace Hopper");
    assert_eq!(r.body["contact"]["phone"], Value::Null);
    assert_eq!(r.body["message"]["provider_message_id"], "4242:1");
    let call = bot.received().await.pop().unwrap();
    assert_eq!(call.path, format!("/bot{token}/sendMessage"));
    assert_eq!(call.body["chat_id"], 4242);
    assert_eq!(call.body["text"], "Hi Grace");
    send(
        &server,
        &seed.key,
        MEDIA,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid,
        "media_type": "image", "media_url": "https://cdn.example.com/p.png", "caption": "Look"}),
    )
    .await
    .expect(201);
    let call = bot.received().await.pop().unwrap();
    assert_eq!(call.path, format!("/bot{token}/sendPhoto"));
    assert_eq!(
        call.body,
        json!({"chat_id": 4242, "photo": "https://cdn.example.com/p.png", "caption": "Look"})
    );
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid, "type": "interactive",
        "interactive": {"type": "button", "body": {"text": "Rate us"}, "action": {"buttons": [
            {"type": "reply", "reply": {"id": "good", "title": "Good"}}]}}}),
    )
    .await
    .expect(201);
    let call = bot.received().await.pop().unwrap();
    assert_eq!(
        call.body["reply_markup"]["inline_keyboard"][0][0],
        json!({"text": "Good", "callback_data": "good"})
    );
    // No templates on Telegram; no phone-only contacts either.
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid,
        "template": {"name": "x", "language": "en"}}),
    )
    .await
    .expect_error(422, "unsupported_for_channel");
    assert_eq!(r.body["error"]["details"]["channel_type"], "telegram");
    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "phone": PHONE, "message": "x"}),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(field_names(&r), vec!["phone"]);
    // Provider errors.
    bot.then(Behaviour::Reject {
        status: 403,
        code: 403,
        message: "Forbidden: bot was blocked by the user".into(),
        details: None,
    })
    .await;
    let r = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid, "message": "x"}),
    )
    .await
    .expect_error(422, "provider_rejected");
    assert_eq!(r.body["error"]["details"]["provider_code"], 403);
    assert_eq!(
        r.body["error"]["details"]["provider_message"],
        "Forbidden: bot was blocked by the user"
    );
    bot.then(Behaviour::Unavailable).await;
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid, "message": "x"}),
    )
    .await
    .expect_error(503, "provider_unavailable");
    bot.then(Behaviour::Malformed).await;
    send(
        &server,
        &seed.key,
        TEXT,
        &json!({"channel_slug": "bot", "contact_uuid": contact_uuid, "message": "x"}),
    )
    .await
    .expect_error(503, "provider_unavailable");
    // A button press comes back as an interactive inbound message.
    let press = json!({"update_id": 2, "callback_query": {"id": "777", "from": {"id": 4242, "first_name": "Grace"},
        "message": {"message_id": 9, "chat": {"id": 4242}}, "data": "good"}});
    post_raw(
        &server,
        &path,
        serde_json::to_vec(&press).unwrap(),
        &[("x-telegram-bot-api-secret-token", secret.into())],
    )
    .await
    .expect(200);
    let inbound = history(&server, &seed.key, "&direction=inbound").await;
    assert_eq!(inbound[0]["type"], "interactive");
    assert_eq!(inbound[0]["interactive"]["button_reply"]["id"], "good");
    assert!(
        !server.logs().contains(token),
        "the bot token is never logged"
    );
}

async fn admin_contact_and_sandbox_tools(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let contact = env
        .admin(&[
            "contact",
            "create",
            "--org",
            &org,
            "--phone",
            "0049 151 23456789",
            "--name",
            "Ada",
        ])
        .await;
    assert_eq!(contact["phone"], PHONE);
    assert_eq!(contact["name"], "Ada");
    assert!(contact["uuid"].is_string());
    assert!(contact["created_at"].is_string());
    for bad in [
        vec!["contact", "create", "--org", &org, "--phone", PHONE],
        vec!["contact", "create", "--org", &org, "--phone", "not a phone"],
        vec![
            "contact",
            "create",
            "--org",
            "424242",
            "--phone",
            "+14155552671",
        ],
        vec![
            "contact",
            "create",
            "--org",
            &org,
            "--phone",
            "+14155552671",
            "--name",
            " ",
        ],
    ] {
        let out = env.admin_raw(&bad).await;
        assert!(!out.success, "{bad:?} must fail");
        assert_eq!(out.stdout.trim(), "", "{bad:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    }
    let channel = seed.channel_id.to_string();
    let inbound = env
        .admin(&[
            "sandbox",
            "inbound",
            "--channel",
            &channel,
            "--from",
            PHONE,
            "--text",
            "Where is my order?",
        ])
        .await;
    assert_eq!(inbound["direction"], "inbound");
    assert_eq!(inbound["status"], "received");
    assert_eq!(inbound["type"], "text");
    assert_eq!(inbound["text"]["body"], "Where is my order?");
    assert_eq!(inbound["contact_uuid"], contact["uuid"]);
    assert_eq!(inbound["channel"]["id"], seed.channel_id);
    assert!(inbound["conversation_uuid"].is_string());
    let old = env
        .admin(&[
            "sandbox",
            "inbound",
            "--channel",
            &channel,
            "--from",
            "+14155552671",
            "--text",
            "old",
            "--at",
            "2020-01-01T00:00:00Z",
        ])
        .await;
    assert_eq!(old["created_at"], "2020-01-01T00:00:00.000Z");

    let server = env.start(&[]).await;
    let sent = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"contact_uuid": contact["uuid"], "message": "On its way"}),
    )
    .await
    .expect(201);
    assert_eq!(
        sent.body["conversation"]["uuid"],
        inbound["conversation_uuid"]
    );
    let id = sent.body["message"]["id"].to_string();
    let delivered = env
        .admin(&[
            "sandbox",
            "status",
            "--message",
            &id,
            "--status",
            "delivered",
        ])
        .await;
    assert_eq!(delivered["status"], "delivered");
    assert_eq!(delivered["id"], sent.body["message"]["id"]);
    let read = env
        .admin(&["sandbox", "status", "--message", &id, "--status", "read"])
        .await;
    assert_eq!(read["status"], "read");
    for bad in [
        vec![
            "sandbox",
            "status",
            "--message",
            &id,
            "--status",
            "delivered",
        ],
        vec!["sandbox", "status", "--message", &id, "--status", "failed"],
        vec!["sandbox", "status", "--message", &id, "--status", "sent"],
        vec![
            "sandbox",
            "status",
            "--message",
            "424242",
            "--status",
            "read",
        ],
        vec![
            "sandbox",
            "inbound",
            "--channel",
            "424242",
            "--from",
            PHONE,
            "--text",
            "x",
        ],
        vec![
            "sandbox",
            "inbound",
            "--channel",
            &channel,
            "--from",
            "nope",
            "--text",
            "x",
        ],
        vec![
            "sandbox",
            "inbound",
            "--channel",
            &channel,
            "--from",
            PHONE,
            "--text",
            "",
        ],
        vec![
            "sandbox",
            "inbound",
            "--channel",
            &channel,
            "--from",
            PHONE,
            "--text",
            "x",
            "--at",
            "yesterday",
        ],
    ] {
        let out = env.admin_raw(&bad).await;
        assert!(!out.success, "{bad:?} must fail");
        assert_eq!(out.stdout.trim(), "", "{bad:?}");
    }
    // Inbound messages have no status to change.
    let out = env
        .admin_raw(&[
            "sandbox",
            "status",
            "--message",
            &inbound["id"].to_string(),
            "--status",
            "read",
        ])
        .await;
    assert!(!out.success);
    // Failed, with a reason, from sent.
    let another = send(
        &server,
        &seed.key,
        TEXT,
        &json!({"contact_uuid": contact["uuid"], "message": "x"}),
    )
    .await
    .expect(201);
    let failed = env
        .admin(&[
            "sandbox",
            "status",
            "--message",
            &another.body["message"]["id"].to_string(),
            "--status",
            "failed",
            "--error",
            "handset off",
        ])
        .await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["message"], "handset off");
    // Sandbox tools refuse other channel types.
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let out = env
        .admin_raw(&[
            "sandbox",
            "inbound",
            "--channel",
            &wa["id"].to_string(),
            "--from",
            PHONE,
            "--text",
            "x",
        ])
        .await;
    assert!(!out.success);
    // The events of the tools.
    let names: Vec<String> = db_peek::events(&env, seed.org_id)
        .await
        .into_iter()
        .map(|e| e.name)
        .filter(|n| {
            n.starts_with("message.") || n.starts_with("contact.") || n.starts_with("conversation.")
        })
        .collect();
    assert_eq!(
        names,
        vec![
            "contact.created",
            "conversation.created",
            "message.received",
            "contact.created",
            "conversation.created",
            "message.received",
            "message.sent",
            "message.status.update",
            "message.status.update",
            "message.sent",
            "message.status.update",
        ]
    );
}

async fn history_pages_and_filters(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let other = env.seed().await;
    let second = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "sandbox",
            "--name",
            "Second",
            "--slug",
            "second",
        ])
        .await;
    let channel = seed.channel_id.to_string();
    env.admin(&[
        "sandbox",
        "inbound",
        "--channel",
        &channel,
        "--from",
        PHONE,
        "--text",
        "early",
        "--at",
        "2026-01-01T10:00:00Z",
    ])
    .await;
    env.admin(&[
        "sandbox",
        "inbound",
        "--channel",
        &channel,
        "--from",
        PHONE,
        "--text",
        "later",
        "--at",
        "2026-01-02T10:00:00Z",
    ])
    .await;
    let server = env.start(&[]).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let body = if i == 4 {
            json!({"channel_slug": "second", "phone": "+14155552671", "message": format!("m{i}")})
        } else {
            json!({"phone": PHONE, "message": format!("m{i}")})
        };
        let r = send(&server, &seed.key, TEXT, &body).await.expect(201);
        ids.push(r.body["message"]["id"].as_i64().unwrap());
    }
    send(
        &server,
        &other.key,
        TEXT,
        &json!({"phone": PHONE, "message": "other org"}),
    )
    .await
    .expect(201);

    // Pages of 3, newest first, no overlaps, no gaps.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("{TEXT}?limit=3&cursor={c}"),
            None => format!("{TEXT}?limit=3"),
        };
        let r = server.get(&q, &seed.key).await.expect(200);
        let data = r.body["data"].as_array().unwrap();
        assert!(data.len() <= 3);
        seen.extend(data.iter().map(|m| m["id"].as_i64().unwrap()));
        if r.body["has_more"] == false {
            assert_eq!(r.body["next_cursor"], Value::Null);
            break;
        }
        cursor = Some(r.body["next_cursor"].as_str().unwrap().to_owned());
    }
    assert_eq!(seen.len(), 7);
    let times: Vec<String> = history(&server, &seed.key, "")
        .await
        .iter()
        .map(|m| m["created_at"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
    assert_eq!(history(&server, &seed.key, "").await.len(), 7);
    assert_eq!(
        history(&server, &other.key, "").await.len(),
        1,
        "organizations are isolated"
    );

    let count = |q: &'static str| {
        let server = &server;
        let key = seed.key.clone();
        async move { history(server, &key, q).await.len() }
    };
    assert_eq!(count("&direction=inbound").await, 2);
    assert_eq!(count("&direction=outbound").await, 5);
    assert_eq!(count("&status=sent").await, 5);
    assert_eq!(count("&status=received").await, 2);
    assert_eq!(count("&status=read").await, 0);
    assert_eq!(count("&channel_slug=second").await, 1);
    assert_eq!(
        history(&server, &seed.key, &format!("&channel_id={}", second["id"]))
            .await
            .len(),
        1
    );
    assert_eq!(
        history(
            &server,
            &seed.key,
            &format!("&channel_slug={}", second["uuid"].as_str().unwrap())
        )
        .await
        .len(),
        1
    );
    assert_eq!(
        count("&since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z").await,
        1
    );
    assert_eq!(
        count("&until=2026-01-02T10:00:00Z").await,
        1,
        "until is exclusive"
    );
    assert_eq!(
        count("&since=2026-01-02T10:00:00Z&until=2026-01-03T00:00:00Z").await,
        1,
        "since is inclusive"
    );
    let all = history(&server, &seed.key, "").await;
    let one = all.iter().find(|m| m["id"] == ids[0]).unwrap();
    let by_contact = history(
        &server,
        &seed.key,
        &format!("&contact_uuid={}", one["contact_uuid"].as_str().unwrap()),
    )
    .await;
    assert_eq!(by_contact.len(), 6);
    let by_conversation = history(
        &server,
        &seed.key,
        &format!(
            "&conversation_uuid={}",
            one["conversation_uuid"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(by_conversation.len(), 6);
    assert_eq!(
        history(
            &server,
            &seed.key,
            &format!("&contact_uuid={}", uuid::Uuid::new_v4())
        )
        .await
        .len(),
        0
    );
    // Another organization's filters find nothing.
    assert_eq!(
        history(
            &server,
            &other.key,
            &format!("&contact_uuid={}", one["contact_uuid"].as_str().unwrap())
        )
        .await
        .len(),
        0
    );
    assert_eq!(
        history(
            &server,
            &other.key,
            &format!("&channel_id={}", seed.channel_id)
        )
        .await
        .len(),
        0
    );

    for (q, param) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=ten", "limit"),
        ("cursor=garbage!", "cursor"),
        ("direction=sideways", "direction"),
        ("status=lost", "status"),
        ("since=yesterday", "since"),
        ("until=2026-13-01", "until"),
        ("channel_id=abc", "channel_id"),
        ("contact_uuid=nope", "contact_uuid"),
        ("conversation_uuid=nope", "conversation_uuid"),
        ("channel_id=1&channel_slug=x", "channel_slug"),
    ] {
        let code = if q.contains("cursor=") {
            "invalid_cursor"
        } else {
            "invalid_request"
        };
        let r = server
            .get(&format!("{TEXT}?{q}"), &seed.key)
            .await
            .expect_error(400, code);
        assert_eq!(r.body["error"]["details"]["param"], param, "{q}");
    }
    // Scopes: reading needs messages:read, sending messages:write.
    let writer = env.key(seed.org_id, "messages:write").await;
    let reader = env.key(seed.org_id, "messages:read").await;
    server
        .get(TEXT, &writer)
        .await
        .expect_error(403, "insufficient_scope");
    server.get(TEXT, &reader).await.expect(200);
    for path in [TEXT, MEDIA, TEMPLATE] {
        let r = send(&server, &reader, path, &json!({}))
            .await
            .expect_error(403, "insufficient_scope");
        assert_eq!(
            r.body["error"]["details"]["required_scope"],
            "messages:write"
        );
    }
    // The OpenAPI document describes the messaging endpoints.
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200);
    for (path, method) in [
        (TEXT, "get"),
        (TEXT, "post"),
        (MEDIA, "post"),
        (TEMPLATE, "post"),
        ("/inbound/{channel_uuid}", "get"),
        ("/inbound/{channel_uuid}", "post"),
    ] {
        assert!(
            doc.body["paths"][path][method].is_object(),
            "{method} {path}"
        );
    }
    assert!(doc.body["components"]["schemas"]["SendResponse"].is_object());
}

async fn send_rate_limit_counts_every_send(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "3")]).await;
    // A success, a validation failure and a replay all spend the budget, on all three paths.
    let r = send_with(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": PHONE, "message": "1"}),
        "a",
    )
    .await
    .expect(201);
    assert_eq!(r.header("ratelimit-policy"), Some("\"sends\";q=3;w=60"));
    assert_eq!(r.header("ratelimit-remaining"), Some("2"));
    send(&server, &seed.key, MEDIA, &json!({"phone": PHONE}))
        .await
        .expect_error(422, "validation_failed");
    send_with(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": PHONE, "message": "1"}),
        "a",
    )
    .await
    .expect(201);
    let r = send(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"phone": PHONE, "template": {"name": "x", "language": "en"}}),
    )
    .await
    .expect_error(429, "rate_limited");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    // Reads have their own budget.
    server.get(TEXT, &seed.key).await.expect(200);
    assert_eq!(history(&server, &seed.key, "").await.len(), 1);
}

async fn a_slow_provider_blocks_nothing_else(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed: Seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let server = env.start(&[]).await;
    graph.then(Behaviour::Hold).await;
    graph.then(Behaviour::Hold).await;
    let body = json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "hello_world", "language": "en_US"}});
    let mut slow = Vec::new();
    for _ in 0..2 {
        let client = server.client.clone();
        let url = server.url(TEMPLATE);
        let key = seed.key.clone();
        let body = body.clone();
        slow.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", ikey())
                .json(&body)
                .send()
                .await
                .unwrap();
            Server::read(r).await
        }));
    }
    graph.wait_for_arrivals(2).await;
    // While two sends wait on the provider, sandbox sends, reads and callbacks go through.
    for i in 0..5 {
        tokio::time::timeout(
            Duration::from_secs(10),
            send(
                &server,
                &seed.key,
                TEXT,
                &json!({"phone": PHONE, "message": format!("fast {i}")}),
            ),
        )
        .await
        .expect("not blocked by the slow provider")
        .expect(201);
    }
    tokio::time::timeout(Duration::from_secs(10), history(&server, &seed.key, ""))
        .await
        .expect("not blocked");
    graph.release();
    graph.release();
    for t in slow {
        t.await.unwrap().expect(201);
    }
    assert_eq!(history(&server, &seed.key, "").await.len(), 7);
}
