//! Issue 7 (sends, reads, webhook records, pre-scope keys): the legacy routes under `/api`
//! share the v1 code (request shapes, channel selection, rules, responses, the sends rate
//! limit, idempotency when the header is present), need the matching scope on scoped keys,
//! accept pre-scope keys as wildcard keys, and legacy webhook records are dispatched together
//! with v1 endpoints: one delivery per distinct URL, signed when a v1 endpoint holds the URL,
//! the unsigned legacy payload otherwise.

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::both_backends;
use crate::receivers::{Behaviour, ReceivedRequest, Receiver};
use crate::support::{Backend, Server, TestEnv};

both_backends!(
    legacy_sends_share_the_v1_rules_and_responses,
    legacy_sends_honour_idempotency_when_present,
    legacy_sends_share_the_sends_rate_limit,
    legacy_routes_need_their_scopes_and_pre_scope_keys_are_wildcards,
    legacy_webhook_records_lifecycle_and_validation,
    legacy_webhook_urls_follow_the_url_safety_rules,
    dispatch_is_unified_one_delivery_per_url,
    legacy_deliveries_retry_per_policy,
    master_key_rotation_keeps_endpoints_signing,
);

const SEND: &str = "/api/send";
const SEND_MEDIA: &str = "/api/send/media";
const SEND_TEMPLATE: &str = "/api/send/template";
const MESSAGES: &str = "/api/messages";
const CHANNELS: &str = "/api/channels";
const RECORDS: &str = "/api/webhooks";

const V1_TEXT: &str = "/api/v1/integrations/messages";
const V1_CHANNELS: &str = "/api/v1/integrations/channels";
const V1_ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const V1_DELIVERIES: &str = "/api/v1/integrations/webhook-deliveries";

const PHONE: &str = "+4915123456789";
const WAIT: Duration = Duration::from_secs(30);

/// Every scope of the catalogue.
const ALL_SCOPES: &[&str] = &[
    "channels:read",
    "contacts:read",
    "contacts:write",
    "groups:read",
    "groups:write",
    "messages:read",
    "messages:write",
    "campaigns:write",
    "templates:read",
    "canned_replies:read",
    "canned_replies:write",
    "users:read",
    "permissions:read",
    "events:read",
    "webhooks:read",
    "webhooks:write",
    "flow:read",
    "flow:write",
];

/// Every scope but `missing`, as a `--scopes` list.
fn all_but(missing: &str) -> String {
    ALL_SCOPES
        .iter()
        .filter(|s| **s != missing)
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

fn fast() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,200ms"),
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "2s"),
        ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "100ms"),
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
    ]
}

fn ikey() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The messages of the history (first page of 200), newest first.
async fn history(server: &Server, key: &str, path: &str) -> Vec<Value> {
    server
        .get(&format!("{path}?limit=200"), key)
        .await
        .expect(200)
        .body["data"]
        .as_array()
        .unwrap()
        .clone()
}

/// The response body without the values that differ between two sends.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::String(_) => json!("s"),
        Value::Number(_) => json!(0),
        other => other.clone(),
    }
}

async fn legacy_sends_share_the_v1_rules_and_responses(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;

    // Text by phone, no Idempotency-Key (not required here): the v1 response.
    let r = server
        .post(
            SEND,
            &seed.key,
            &json!({"phone": PHONE, "message": "hello"}),
        )
        .await
        .expect(201);
    assert!(r.header("idempotency-replayed").is_none());
    assert_eq!(r.body["message"]["type"], "text");
    assert_eq!(r.body["message"]["direction"], "outbound");
    assert_eq!(r.body["channel"]["id"], seed.channel_id);
    assert_eq!(r.body["contact"]["phone"], PHONE);
    let contact_uuid = r.body["contact"]["uuid"].as_str().unwrap().to_owned();
    let v1 = server
        .post_with(
            V1_TEXT,
            &seed.key,
            &json!({"phone": PHONE, "message": "hello again"}),
            &[("Idempotency-Key", &ikey())],
        )
        .await
        .expect(201);
    assert_eq!(
        shape(&r.body),
        shape(&v1.body),
        "the same response shape as v1"
    );
    assert_eq!(v1.body["contact"]["uuid"], contact_uuid.as_str());

    // Interactive, media and template sends: the v1 request shapes.
    server
        .post(
            SEND,
            &seed.key,
            &json!({"contact_uuid": contact_uuid, "type": "interactive", "message": "Pick one",
                    "interactive": {"type": "button", "action": {"buttons": [
                        {"type": "reply", "reply": {"id": "y", "title": "Yes"}}]}}}),
        )
        .await
        .expect(201);
    let media = server
        .post(
            SEND_MEDIA,
            &seed.key,
            &json!({"contact_uuid": contact_uuid, "media_type": "document",
                    "media_url": "https://files.example.com/invoice.pdf", "file_name": "invoice.pdf",
                    "caption": "Your invoice", "channel_slug": "sandbox"}),
        )
        .await
        .expect(201);
    assert_eq!(media.body["message"]["type"], "media");
    assert_eq!(media.body["channel"]["slug"], "sandbox");
    let template = server
        .post(
            SEND_TEMPLATE,
            &seed.key,
            &json!({"contact_uuid": contact_uuid, "channel_id": seed.channel_id,
                    "template": {"name": "order_update", "language": "en_US",
                    "components": [{"type": "body", "parameters": [{"type": "text", "text": "42"}]}]}}),
        )
        .await
        .expect(201);
    assert_eq!(template.body["message"]["type"], "template");
    assert_eq!(template.body["message"]["template"]["name"], "order_update");

    // The v1 template path entirely: conversation initiation is refused on a sandbox channel
    // with the v1 reason; campaign and initiation refusals are the v1 ones.
    let r = server
        .post(
            SEND_TEMPLATE,
            &seed.key,
            &json!({"ensure_conversation": true, "channel_id": seed.channel_id, "phone": PHONE,
                    "template": {"name": "x", "language": "en"}}),
        )
        .await
        .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "not_template_capable");
    let campaign = json!({"phone": PHONE, "template_uuid": uuid::Uuid::new_v4(),
        "template": {"name": "x", "language": "en"},
        "consent": {"confirmed": true, "purpose": "utility", "source": "customer_request",
                    "reference": "r-1", "captured_at": "2026-01-01T00:00:00Z"}});
    for body in [
        campaign,
        json!({"ensure_conversation": true, "phone": PHONE, "template": {"name": "x", "language": "en"}}),
    ] {
        let legacy = server.post(SEND_TEMPLATE, &seed.key, &body).await;
        let v1 = server
            .post_with(
                "/api/v1/integrations/messages/template",
                &seed.key,
                &body,
                &[("Idempotency-Key", &ikey())],
            )
            .await;
        assert_eq!(legacy.status.as_u16(), 422, "{}", legacy.text);
        assert_eq!(
            (
                legacy.status,
                &legacy.body["error"]["code"],
                &legacy.body["error"]["details"]
            ),
            (
                v1.status,
                &v1.body["error"]["code"],
                &v1.body["error"]["details"]
            ),
            "the v1 template path: {body}"
        );
    }

    // Bad input: the v1 codes, never a 5xx.
    let bad: Vec<(&str, Value, u16, &str)> = vec![
        (SEND, json!({"phone": PHONE}), 422, "validation_failed"),
        (
            SEND,
            json!({"phone": "not a phone", "message": "x"}),
            422,
            "validation_failed",
        ),
        (
            SEND,
            json!({"phone": PHONE, "message": 5}),
            422,
            "validation_failed",
        ),
        (
            SEND,
            json!({"phone": PHONE, "message": "x", "channel_id": seed.channel_id, "channel_slug": "sandbox"}),
            422,
            "channel_conflict",
        ),
        (
            SEND,
            json!({"phone": PHONE, "message": "x", "channel_id": 999_999}),
            422,
            "invalid_channel",
        ),
        (
            SEND,
            json!({"phone": PHONE, "message": "x", "channel_slug": "nope"}),
            422,
            "invalid_channel",
        ),
        (
            SEND_MEDIA,
            json!({"phone": PHONE, "media_type": "hologram", "media_url": "https://x.example.com/a"}),
            422,
            "validation_failed",
        ),
        (
            SEND_TEMPLATE,
            json!({"phone": PHONE}),
            422,
            "validation_failed",
        ),
        (SEND, json!([1, 2]), 422, "validation_failed"),
    ];
    for (path, body, status, code) in bad {
        let r = server.post(path, &seed.key, &body).await;
        assert_eq!(
            (r.status.as_u16(), r.body["error"]["code"].as_str()),
            (status, Some(code)),
            "{path} {body}: {}",
            r.text
        );
    }
    for path in [SEND, SEND_MEDIA, SEND_TEMPLATE] {
        let r = server
            .client
            .post(server.url(path))
            .bearer_auth(&seed.key)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        Server::read(r).await.expect_error(400, "malformed_json");
    }

    // The history and the channels: the v1 lists.
    let legacy = history(&server, &seed.key, MESSAGES).await;
    let v1 = history(&server, &seed.key, V1_TEXT).await;
    assert_eq!(legacy.len(), 5);
    assert_eq!(legacy, v1);
    assert_eq!(legacy[0]["type"], "template");
    let page = server
        .get(&format!("{MESSAGES}?limit=2&direction=outbound"), &seed.key)
        .await
        .expect(200);
    assert_eq!(page.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(page.body["has_more"], true);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let next = server
        .get(
            &format!("{MESSAGES}?limit=2&direction=outbound&cursor={cursor}"),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(next.body["data"][0], legacy[2]);
    for q in [
        "limit=0",
        "limit=201",
        "cursor=garbage",
        "direction=up",
        "since=yesterday",
    ] {
        server
            .get(&format!("{MESSAGES}?{q}"), &seed.key)
            .await
            .expect_error(
                400,
                if q.contains("cursor=") {
                    "invalid_cursor"
                } else {
                    "invalid_request"
                },
            );
    }
    let channels = server.get(CHANNELS, &seed.key).await.expect(200);
    let v1_channels = server.get(V1_CHANNELS, &seed.key).await.expect(200);
    assert_eq!(channels.body, v1_channels.body);
    assert_eq!(channels.body["data"][0]["id"], seed.channel_id);
    assert_eq!(channels.body["has_more"], false);
}

async fn legacy_sends_honour_idempotency_when_present(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let body = json!({"phone": PHONE, "message": "once"});

    // With the header: the first response is replayed, nothing is sent twice.
    let key = ikey();
    let first = server
        .post_with(SEND, &seed.key, &body, &[("Idempotency-Key", &key)])
        .await
        .expect(201);
    let again = server
        .post_with(SEND, &seed.key, &body, &[("Idempotency-Key", &key)])
        .await
        .expect(201);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(history(&server, &seed.key, MESSAGES).await.len(), 1);

    // The same key with another body, or on another send path: 409.
    server
        .post_with(
            SEND,
            &seed.key,
            &json!({"phone": PHONE, "message": "other"}),
            &[("Idempotency-Key", &key)],
        )
        .await
        .expect_error(409, "idempotency_conflict");
    server
        .post_with(V1_TEXT, &seed.key, &body, &[("Idempotency-Key", &key)])
        .await
        .expect_error(409, "idempotency_conflict");
    // A 4xx refusal (validation) under a key.
    let bad_key = ikey();
    let bad = json!({"phone": PHONE});
    server
        .post_with(
            SEND_MEDIA,
            &seed.key,
            &bad,
            &[("Idempotency-Key", &bad_key)],
        )
        .await
        .expect_error(422, "validation_failed");
    let replayed = server
        .post_with(
            SEND_MEDIA,
            &seed.key,
            &bad,
            &[("Idempotency-Key", &bad_key)],
        )
        .await
        .expect_error(422, "validation_failed");
    // Refused before execution: not stored, evaluated again (CONVENTIONS "Idempotency").
    assert_eq!(replayed.header("idempotency-replayed"), None);
    // Invalid keys: 400 idempotency_key_invalid (as on v1).
    for k in [String::new(), "x".repeat(121), "tab\tinside".to_owned()] {
        server
            .post_with(SEND, &seed.key, &body, &[("Idempotency-Key", &k)])
            .await
            .expect_error(400, "idempotency_key_invalid");
    }
    // Without the header: no 400, and each request is a new send.
    for _ in 0..2 {
        let r = server.post(SEND, &seed.key, &body).await.expect(201);
        assert!(r.header("idempotency-replayed").is_none());
    }
    server
        .post(
            SEND_TEMPLATE,
            &seed.key,
            &json!({"phone": PHONE, "template": {"name": "t", "language": "en"}}),
        )
        .await
        .expect(201);
    assert_eq!(history(&server, &seed.key, MESSAGES).await.len(), 4);
    // Keys are per credential: another key's same Idempotency-Key is a new request.
    let other = env.key(seed.org_id, "messages:write,messages:read").await;
    let r = server
        .post_with(SEND, &other, &body, &[("Idempotency-Key", &key)])
        .await
        .expect(201);
    assert!(r.header("idempotency-replayed").is_none());
    assert_ne!(r.body["message"]["uuid"], first.body["message"]["uuid"]);
}

async fn legacy_sends_share_the_sends_rate_limit(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&[
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "4"),
            ("SWITCHBOARD_RATE_LIMIT_READS", "1000"),
        ])
        .await;
    let body = json!({"phone": PHONE, "message": "hi"});
    // Two v1 sends and two legacy sends use up one budget of four.
    for _ in 0..2 {
        let r = server
            .post_with(V1_TEXT, &seed.key, &body, &[("Idempotency-Key", &ikey())])
            .await
            .expect(201);
        assert_eq!(r.header("ratelimit-limit"), Some("4"));
    }
    let r = server.post(SEND, &seed.key, &body).await.expect(201);
    assert_eq!(r.header("ratelimit-limit"), Some("4"));
    assert_eq!(r.header("ratelimit-remaining"), Some("1"));
    assert!(
        r.header("ratelimit-policy")
            .unwrap()
            .starts_with("\"sends\""),
        "{:?}",
        r.header("ratelimit-policy")
    );
    server
        .post(
            SEND_MEDIA,
            &seed.key,
            &json!({"phone": PHONE, "media_type": "image", "media_url": "https://x.example.com/a.png"}),
        )
        .await
        .expect(201);
    for path in [SEND, SEND_TEMPLATE] {
        let r = server
            .post(path, &seed.key, &body)
            .await
            .expect_error(429, "rate_limited");
        assert!(r.header("retry-after").is_some());
    }
    server
        .post_with(V1_TEXT, &seed.key, &body, &[("Idempotency-Key", &ikey())])
        .await
        .expect_error(429, "rate_limited");
    // Reads are another class: the legacy reads still answer, counted as reads.
    for path in [MESSAGES, CHANNELS, RECORDS] {
        let r = server.get(path, &seed.key).await.expect(200);
        assert!(
            r.header("ratelimit-policy")
                .unwrap()
                .starts_with("\"reads\""),
            "{path}"
        );
    }
    assert_eq!(history(&server, &seed.key, MESSAGES).await.len(), 4);
}

/// A call of every route of this part (with a body good enough to pass the scope check).
fn routes(record_id: &str) -> Vec<(Method, String, Option<Value>, &'static str)> {
    vec![
        (
            Method::POST,
            SEND.into(),
            Some(json!({"phone": PHONE, "message": "hi"})),
            "messages:write",
        ),
        (
            Method::POST,
            SEND_MEDIA.into(),
            Some(
                json!({"phone": PHONE, "media_type": "image", "media_url": "https://x.example.com/a.png"}),
            ),
            "messages:write",
        ),
        (
            Method::POST,
            SEND_TEMPLATE.into(),
            Some(json!({"phone": PHONE, "template": {"name": "t", "language": "en"}})),
            "messages:write",
        ),
        (Method::GET, MESSAGES.into(), None, "messages:read"),
        (Method::GET, CHANNELS.into(), None, "channels:read"),
        (Method::GET, RECORDS.into(), None, "webhooks:read"),
        (
            Method::POST,
            RECORDS.into(),
            Some(json!({"url": "https://hooks.example.com/legacy", "events": ["message.*"]})),
            "webhooks:write",
        ),
        (
            Method::DELETE,
            format!("{RECORDS}/{record_id}"),
            None,
            "webhooks:write",
        ),
    ]
}

async fn legacy_routes_need_their_scopes_and_pre_scope_keys_are_wildcards(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let server = env.start(&fast()).await;

    // A key lacking the route's scope: 403 insufficient_scope naming it; nothing done.
    for (method, path, body, scope) in routes(&uuid::Uuid::new_v4().to_string()) {
        let key = env.key(seed.org_id, &all_but(scope)).await;
        let r = server
            .call(method.clone(), &path, Some(&key), body.as_ref())
            .await
            .expect_error(403, "insufficient_scope");
        assert_eq!(
            r.body["error"]["details"]["required_scope"], scope,
            "{method} {path}"
        );
    }
    assert!(history(&server, &seed.key, MESSAGES).await.is_empty());
    assert!(
        server.get(RECORDS, &seed.key).await.expect(200).body["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A key holding exactly the scope: allowed.
    let mut done = 0;
    for (method, path, body, scope) in routes("") {
        let key = env.key(seed.org_id, scope).await;
        let path = if method == Method::DELETE {
            let id = server
                .post(
                    RECORDS,
                    &seed.key,
                    &json!({"url": "https://hooks.example.com/x", "events": ["*"]}),
                )
                .await
                .expect(201)
                .body["id"]
                .as_str()
                .unwrap()
                .to_owned();
            format!("{RECORDS}/{id}")
        } else {
            path
        };
        let r = server
            .call(method.clone(), &path, Some(&key), body.as_ref())
            .await;
        assert!(
            r.status.is_success(),
            "{method} {path} with {scope}: {}",
            r.text
        );
        done += 1;
    }
    assert_eq!(done, 8);

    // Missing and unknown keys: 401 on legacy routes too.
    let r = server.call(Method::GET, CHANNELS, None, None).await;
    r.expect_error(401, "missing_api_key");
    server
        .get(CHANNELS, "sbk_nope")
        .await
        .expect_error(401, "invalid_api_key");

    // Pre-scope keys: an imported legacy plaintext key, and a key stored without a scope list,
    // are wildcard keys on every route, legacy and v1.
    let legacy = "legacy-plaintext-key-for-issue-7";
    let imported = env
        .admin(&["key", "import-legacy", "--org", &org, "--key", legacy])
        .await;
    let unscoped = env
        .admin(&["key", "create", "--org", &org, "--scopes", "*"])
        .await;
    assert_eq!(unscoped["scopes"], json!(["*"]));
    let unscoped = unscoped["key"].as_str().unwrap().to_owned();
    for key in [legacy, unscoped.as_str()] {
        for (method, path, body, _) in routes("") {
            let path = if method == Method::DELETE {
                let id = server
                    .post(
                        RECORDS,
                        key,
                        &json!({"url": "https://hooks.example.com/y", "events": ["*"]}),
                    )
                    .await
                    .expect(201)
                    .body["id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                format!("{RECORDS}/{id}")
            } else {
                path
            };
            let r = server
                .call(method.clone(), &path, Some(key), body.as_ref())
                .await;
            assert!(r.status.is_success(), "{method} {path}: {}", r.text);
        }
        for path in [
            V1_CHANNELS,
            V1_TEXT,
            V1_ENDPOINTS,
            V1_DELIVERIES,
            "/api/v1/integrations/users",
            "/api/v1/integrations/permissions",
            "/api/v1/integrations/events",
            "/api/v1/integrations/webhook-events",
        ] {
            server.get(path, key).await.expect(200);
        }
        server
            .post_with(
                V1_TEXT,
                key,
                &json!({"phone": PHONE, "message": "v1"}),
                &[("Idempotency-Key", &ikey())],
            )
            .await
            .expect(201);
    }

    // Rotating the legacy key: the old value stops working; the new sbk_ key stays a wildcard
    // key (explicitly `*`).
    let rotated = env
        .admin(&["key", "rotate", &imported["id"].to_string()])
        .await;
    let new_key = rotated["key"].as_str().unwrap();
    assert!(new_key.starts_with("sbk_"), "{new_key}");
    assert_eq!(rotated["scopes"], json!(["*"]));
    server
        .get(CHANNELS, legacy)
        .await
        .expect_error(401, "revoked_api_key");
    server
        .post(SEND, legacy, &json!({"phone": PHONE, "message": "x"}))
        .await
        .expect_error(401, "revoked_api_key");
    server.get(CHANNELS, new_key).await.expect(200);
    server.get(RECORDS, new_key).await.expect(200);
    server
        .post(
            SEND,
            new_key,
            &json!({"phone": PHONE, "message": "after rotation"}),
        )
        .await
        .expect(201);
}

async fn create_record(server: &Server, key: &str, url: &str, events: &[&str]) -> String {
    let r = server
        .post(RECORDS, key, &json!({"url": url, "events": events}))
        .await
        .expect(201);
    r.body["id"].as_str().unwrap().to_owned()
}

async fn create_endpoint(
    server: &Server,
    key: &str,
    url: &str,
    events: &[&str],
) -> (String, String) {
    let r = server
        .post(
            V1_ENDPOINTS,
            key,
            &json!({"name": "modern", "url": url, "events": events}),
        )
        .await
        .expect(201);
    (
        r.body["uuid"].as_str().unwrap().to_owned(),
        r.body["signing_secret"].as_str().unwrap().to_owned(),
    )
}

async fn legacy_webhook_records_lifecycle_and_validation(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let other = env.seed().await;
    let server = env.start(&fast()).await;

    let r = server
        .post(
            RECORDS,
            &seed.key,
            &json!({"url": "https://hooks.example.com/a", "events": ["message.sent", "contact.*"]}),
        )
        .await
        .expect(201);
    let a = r.body["id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&a).is_ok(), "{a}");
    assert_eq!(r.body["url"], "https://hooks.example.com/a");
    assert_eq!(r.body["events"], json!(["message.sent", "contact.*"]));
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["consecutive_failures"], 0);
    assert!(r.body.get("signing_secret").is_none());
    assert!(r.body["created_at"].as_str().unwrap().ends_with('Z'));
    let b = create_record(&server, &seed.key, "https://hooks.example.com/b", &["*"]).await;
    let c = create_record(
        &server,
        &seed.key,
        "https://hooks.example.com/a",
        &["crm.*"],
    )
    .await;

    // The list: newest first, the v1 envelope and pagination.
    let list = server.get(RECORDS, &seed.key).await.expect(200);
    let ids: Vec<&str> = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![c.as_str(), b.as_str(), a.as_str()]);
    assert_eq!(list.body["has_more"], false);
    assert!(list.body["next_cursor"].is_null());
    let p1 = server
        .get(&format!("{RECORDS}?limit=2"), &seed.key)
        .await
        .expect(200);
    assert_eq!(p1.body["has_more"], true);
    let p2 = server
        .get(
            &format!(
                "{RECORDS}?limit=2&cursor={}",
                p1.body["next_cursor"].as_str().unwrap()
            ),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(p2.body["data"][0]["id"], a.as_str());
    for q in ["limit=0", "limit=500", "cursor=%%%"] {
        server
            .get(&format!("{RECORDS}?{q}"), &seed.key)
            .await
            .expect_error(
                400,
                if q.contains("cursor=") {
                    "invalid_cursor"
                } else {
                    "invalid_request"
                },
            );
    }

    // Records and v1 endpoints are separate: each surface sees only its kind (404 across).
    let (modern, _) =
        create_endpoint(&server, &seed.key, "https://hooks.example.com/a", &["*"]).await;
    let v1_list = server.get(V1_ENDPOINTS, &seed.key).await.expect(200);
    assert_eq!(v1_list.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(v1_list.body["data"][0]["uuid"], modern.as_str());
    assert_eq!(
        server.get(RECORDS, &seed.key).await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let on_record = format!("{V1_ENDPOINTS}/{a}");
    server
        .get(&on_record, &seed.key)
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::PUT,
            &on_record,
            Some(&seed.key),
            Some(&json!({"events": ["*"]})),
        )
        .await
        .expect_error(404, "not_found");
    server
        .post(&format!("{on_record}/rotate-secret"), &seed.key, &json!({}))
        .await
        .expect_error(404, "not_found");
    server
        .post(&format!("{on_record}/test"), &seed.key, &json!({}))
        .await
        .expect_error(404, "not_found");
    server
        .call(Method::DELETE, &on_record, Some(&seed.key), None)
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/{modern}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(404, "not_found");
    server
        .get(&format!("{V1_ENDPOINTS}/{modern}"), &seed.key)
        .await
        .expect(200);

    // Another organization sees none of them.
    assert!(
        server.get(RECORDS, &other.key).await.expect(200).body["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/{a}"),
            Some(&other.key),
            None,
        )
        .await
        .expect_error(404, "not_found");

    // Bad input: 4xx with stable codes, nothing stored.
    let bad: Vec<(Value, &str)> = vec![
        (
            json!({"url": "https://hooks.example.com/x", "events": ["message.nope"]}),
            "events[0]",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "events": ["nope.*"]}),
            "events[0]",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "events": []}),
            "events",
        ),
        (json!({"url": "https://hooks.example.com/x"}), "events"),
        (json!({"events": ["*"]}), "url"),
        (json!({"url": "not a url", "events": ["*"]}), "url"),
        (
            json!({"url": "ftp://hooks.example.com/x", "events": ["*"]}),
            "url",
        ),
        (json!({"url": 5, "events": ["*"]}), "url"),
        (
            json!({"url": "https://hooks.example.com/x", "events": "message.sent"}),
            "events",
        ),
    ];
    for (body, field) in bad {
        let r = server.post(RECORDS, &seed.key, &body).await;
        assert_eq!(r.status.as_u16(), 422, "{body}: {}", r.text);
        let code = r.body["error"]["code"].as_str().unwrap();
        assert!(
            code == "validation_failed" || code == "unsafe_url",
            "{body}: {}",
            r.text
        );
        if code == "validation_failed" {
            let fields: Vec<&str> = r.body["error"]["details"]["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["field"].as_str().unwrap())
                .collect();
            assert!(fields.contains(&field), "{body}: {}", r.text);
        }
    }
    let r = server
        .client
        .post(server.url(RECORDS))
        .bearer_auth(&seed.key)
        .header("content-type", "application/json")
        .body("{\"url\":")
        .send()
        .await
        .unwrap();
    Server::read(r).await.expect_error(400, "malformed_json");
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/not-a-uuid"),
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::PUT,
            &format!("{RECORDS}/{a}"),
            Some(&seed.key),
            Some(&json!({})),
        )
        .await
        .expect_error(405, "method_not_allowed");
    assert_eq!(
        server.get(RECORDS, &seed.key).await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Delete: 204, then gone (404 on a second delete), the others stay.
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/{a}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/{a}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(404, "not_found");
    let left: Vec<String> = server.get(RECORDS, &seed.key).await.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, vec![c.clone(), b.clone()]);

    // Changes are in the organization's admin log, as for v1 endpoints.
    let log = server
        .get(
            "/api/v1/integrations/events?limit=200&type=webhook_endpoint.*",
            &seed.key,
        )
        .await
        .expect(200);
    let entries = log.body["data"].as_array().unwrap();
    let about = |id: &str, t: &str| {
        entries
            .iter()
            .filter(|e| e["type"] == t && e.to_string().contains(id))
            .count()
    };
    assert_eq!(about(&a, "webhook_endpoint.created"), 1, "{entries:#?}");
    assert_eq!(about(&a, "webhook_endpoint.deleted"), 1, "{entries:#?}");
    assert_eq!(about(&b, "webhook_endpoint.created"), 1);
}

async fn legacy_webhook_urls_follow_the_url_safety_rules(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    // Without the development flag: the v1 URL rules.
    let server = env
        .start(&[("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "100ms")])
        .await;
    for url in [
        "http://hooks.example.com/x",
        "https://127.0.0.1/x",
        "https://localhost/x",
        "https://10.1.2.3/x",
        "https://user:pw@hooks.example.com/x",
        "https://hooks.example.com:8443/x",
        "https://[::1]/x",
    ] {
        let r = server
            .post(RECORDS, &seed.key, &json!({"url": url, "events": ["*"]}))
            .await;
        assert_eq!(r.status.as_u16(), 422, "{url}: {}", r.text);
        assert!(
            r.body["error"]["code"] == "unsafe_url"
                || r.body["error"]["code"] == "validation_failed",
            "{url}: {}",
            r.text
        );
        // The same answer as v1 for the same URL.
        let v1 = server
            .post(
                V1_ENDPOINTS,
                &seed.key,
                &json!({"url": url, "events": ["*"]}),
            )
            .await;
        assert_eq!(
            (v1.status, &v1.body["error"]["code"]),
            (r.status, &r.body["error"]["code"]),
            "{url}"
        );
    }
    server
        .post(
            RECORDS,
            &seed.key,
            &json!({"url": "https://127.0.0.1/x", "events": ["*"]}),
        )
        .await
        .expect_error(422, "unsafe_url");
    create_record(&server, &seed.key, "https://hooks.example.com/ok", &["*"]).await;
    drop(server);

    // SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS lifts them.
    let server = env.start(&fast()).await;
    create_record(&server, &seed.key, "http://127.0.0.1:9/x", &["*"]).await;
}

/// Whether `r` carries a valid v1 signature by `secret`.
fn signed_by(secret: &str, r: &ReceivedRequest) -> bool {
    let (Some(ts), Some(sig)) = (
        r.header("x-switchboard-timestamp"),
        r.header("x-switchboard-signature"),
    ) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes())) == sig
}

/// The ledger's deliveries of one event.
async fn deliveries_of(server: &Server, key: &str, event_id: &str) -> Vec<Value> {
    let r = server
        .get(&format!("{V1_DELIVERIES}?limit=200"), key)
        .await
        .expect(200);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["event_id"] == event_id)
        .cloned()
        .collect()
}

/// Polls the ledger until every delivery of `event_id` is final; returns them.
async fn settled(server: &Server, key: &str, event_id: &str, n: usize) -> Vec<Value> {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let ds = deliveries_of(server, key, event_id).await;
        if ds.len() == n
            && ds.iter().all(|d| {
                ["delivered", "failed", "retries_exhausted"]
                    .contains(&d["status"].as_str().unwrap())
            })
        {
            return ds;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "deliveries of {event_id} never settled: {ds:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids of the `message.sent` events the ledger has deliveries of.
async fn sent_events(server: &Server, key: &str) -> std::collections::HashSet<String> {
    let r = server
        .get(
            &format!("{V1_DELIVERIES}?limit=200&event=message.sent"),
            key,
        )
        .await
        .expect(200);
    r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Sends a text through `/api/send` and returns the id of its `message.sent` event, from the
/// ledger (the fan-out is written in the send's transaction, so it is there at once).
async fn send_and_find_event(server: &Server, key: &str, text: &str) -> String {
    let before = sent_events(server, key).await;
    server
        .post(SEND, key, &json!({"phone": PHONE, "message": text}))
        .await
        .expect(201);
    let new: Vec<String> = sent_events(server, key)
        .await
        .difference(&before)
        .cloned()
        .collect();
    assert_eq!(new.len(), 1, "one new message.sent event: {new:?}");
    new.into_iter().next().unwrap()
}

fn for_event<'a>(rs: &'a [ReceivedRequest], event_id: &str) -> Vec<&'a ReceivedRequest> {
    rs.iter()
        .filter(|r| r.json()["metadata"]["event_id"] == event_id)
        .collect()
}

async fn dispatch_is_unified_one_delivery_per_url(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let rx = Receiver::start().await;

    // /both: a v1 endpoint and a legacy record (registered first);
    // /legacy: one legacy record; /twins: two legacy records.
    let both_record = create_record(&server, &seed.key, &rx.url("/both"), &["message.*"]).await;
    let (both_endpoint, secret) =
        create_endpoint(&server, &seed.key, &rx.url("/both"), &["message.sent"]).await;
    let legacy_only = create_record(&server, &seed.key, &rx.url("/legacy"), &["*"]).await;
    let twin1 = create_record(&server, &seed.key, &rx.url("/twins"), &["message.sent"]).await;
    let twin2 = create_record(&server, &seed.key, &rx.url("/twins"), &["message.*"]).await;
    let elsewhere = create_record(
        &server,
        &seed.key,
        &rx.url("/contacts"),
        &["contact.updated"],
    )
    .await;

    let event_id = send_and_find_event(&server, &seed.key, "unified").await;
    let ds = settled(&server, &seed.key, &event_id, 3).await;
    let mut targets: Vec<&str> = ds
        .iter()
        .map(|d| d["endpoint_uuid"].as_str().unwrap())
        .collect();
    targets.sort();
    let mut expected = vec![both_endpoint.as_str(), legacy_only.as_str(), twin1.as_str()];
    expected.sort();
    assert_eq!(targets, expected, "one delivery per URL: {ds:#?}");
    assert!(
        ds.iter()
            .all(|d| d["status"] == "delivered" && d["attempts"] == 1)
    );
    for unused in [&both_record, &twin2, &elsewhere] {
        assert!(ds.iter().all(|d| d["endpoint_uuid"] != unused.as_str()));
    }

    // Exactly one request per URL for the event (the ledger says each was delivered once).
    let both = rx.requests("/both");
    let both = for_event(&both, &event_id);
    assert_eq!(both.len(), 1);
    assert!(
        signed_by(&secret, both[0]),
        "the shared URL gets the signed delivery"
    );
    let legacy = rx.requests("/legacy");
    let legacy = for_event(&legacy, &event_id);
    assert_eq!(legacy.len(), 1);
    let twins = rx.requests("/twins");
    assert_eq!(for_event(&twins, &event_id).len(), 1);
    assert!(for_event(&rx.requests("/contacts"), &event_id).is_empty());

    // The unsigned legacy payload: the same envelope, the event, delivery and attempt headers,
    // no timestamp or signature.
    let l = legacy[0];
    assert_eq!(l.header("content-type"), Some("application/json"));
    assert_eq!(l.header("x-switchboard-event"), Some("message.sent"));
    assert_eq!(l.header("x-switchboard-attempt"), Some("1"));
    let legacy_delivery = ds
        .iter()
        .find(|d| d["endpoint_uuid"] == legacy_only.as_str())
        .unwrap();
    assert_eq!(
        l.header("x-switchboard-delivery"),
        legacy_delivery["delivery_id"].as_str()
    );
    assert!(l.header("x-switchboard-timestamp").is_none());
    assert!(l.header("x-switchboard-signature").is_none());
    assert_eq!(l.json(), both[0].json(), "the same JSON envelope");
    assert_eq!(l.json()["event"], "message.sent");
    assert_eq!(l.json()["metadata"]["api_version"], "v1");
    assert_eq!(l.json()["channel"]["id"], seed.channel_id);

    // The ledger filters by a record's id like an endpoint's.
    let by_record = server
        .get(
            &format!("{V1_DELIVERIES}?endpoint_uuid={legacy_only}"),
            &seed.key,
        )
        .await
        .expect(200);
    assert!(
        by_record.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["endpoint_uuid"] == legacy_only.as_str())
    );

    // Deleting the v1 endpoint: the shared URL falls back to its legacy record (unsigned);
    // deleting one twin: the other takes over the URL.
    server
        .call(
            Method::DELETE,
            &format!("{V1_ENDPOINTS}/{both_endpoint}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    server
        .call(
            Method::DELETE,
            &format!("{RECORDS}/{twin1}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    let second = send_and_find_event(&server, &seed.key, "after deletes").await;
    let ds = settled(&server, &seed.key, &second, 3).await;
    let mut targets: Vec<&str> = ds
        .iter()
        .map(|d| d["endpoint_uuid"].as_str().unwrap())
        .collect();
    targets.sort();
    let mut expected = vec![both_record.as_str(), legacy_only.as_str(), twin2.as_str()];
    expected.sort();
    assert_eq!(targets, expected);
    let both = rx.requests("/both");
    let both = for_event(&both, &second);
    assert_eq!(both.len(), 1);
    assert!(both[0].header("x-switchboard-signature").is_none());
    assert_eq!(for_event(&rx.requests("/twins"), &second).len(), 1);
}

async fn legacy_deliveries_retry_per_policy(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let rx = Receiver::start().await;
    // Retried until delivered: 500 and 503, then the default 200 (three attempts allowed).
    rx.script(
        "/flaky",
        vec![Behaviour::Status(500), Behaviour::Status(503)],
    );
    let flaky = create_record(&server, &seed.key, &rx.url("/flaky"), &["message.sent"]).await;
    // Always failing: retries exhausted after three attempts.
    rx.respond("/down", Behaviour::Status(502));
    let down = create_record(&server, &seed.key, &rx.url("/down"), &["message.sent"]).await;
    // A permanent rejection: not retried.
    rx.respond("/gone", Behaviour::Status(410));
    let gone = create_record(&server, &seed.key, &rx.url("/gone"), &["message.sent"]).await;

    let event_id = send_and_find_event(&server, &seed.key, "retry me").await;
    let ds = settled(&server, &seed.key, &event_id, 3).await;
    let of = |id: &str| {
        ds.iter()
            .find(|d| d["endpoint_uuid"] == id)
            .unwrap()
            .clone()
    };
    let (f, d, g) = (of(&flaky), of(&down), of(&gone));
    assert_eq!(
        (f["status"].as_str(), f["attempts"].as_i64()),
        (Some("delivered"), Some(3))
    );
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64()),
        (Some("retries_exhausted"), Some(3))
    );
    assert_eq!(
        (g["status"].as_str(), g["attempts"].as_i64()),
        (Some("failed"), Some(1))
    );

    let got = rx.requests("/flaky");
    let got = for_event(&got, &event_id);
    assert_eq!(
        got.iter().map(|r| r.attempt()).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(
        got.iter()
            .all(|r| r.delivery() == f["delivery_id"].as_str().unwrap())
    );
    assert!(
        got.iter()
            .all(|r| r.header("x-switchboard-signature").is_none())
    );
    // The attempt log of the ledger, as for v1 endpoints.
    let detail = server
        .get(
            &format!("{V1_DELIVERIES}/{}", f["delivery_id"].as_str().unwrap()),
            &seed.key,
        )
        .await
        .expect(200);
    let log = detail.body["attempt_log"].as_array().unwrap();
    assert_eq!(
        log.iter()
            .map(|a| a["response_status"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![500, 503, 200]
    );
    // Health counts for records too.
    let records = server.get(RECORDS, &seed.key).await.expect(200);
    let down_record = records.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == down.as_str())
        .unwrap()
        .clone();
    assert!(down_record["consecutive_failures"].as_i64().unwrap() >= 1);
}

async fn master_key_rotation_keeps_endpoints_signing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let rx = Receiver::start().await;
    let mut server = env.start(&fast()).await;
    let (endpoint, secret) =
        create_endpoint(&server, &seed.key, &rx.url("/modern"), &["message.sent"]).await;
    let record = create_record(&server, &seed.key, &rx.url("/legacy"), &["message.sent"]).await;
    server.terminate().await;

    // One sealed secret: the endpoint's (the record has none; the sandbox channel no provider
    // configuration).
    let new_key = crate::support::hex_key();
    let out = env
        .admin(&["master-key", "rotate", "--new-key", &new_key])
        .await;
    assert_eq!(out["rotated"], 1, "{out}");

    let server = env
        .start(
            &fast()
                .into_iter()
                .chain([("SWITCHBOARD_MASTER_KEY", new_key.as_str())])
                .collect::<Vec<_>>(),
        )
        .await;
    let event_id = send_and_find_event(&server, &seed.key, "after rotation").await;
    let ds = settled(&server, &seed.key, &event_id, 2).await;
    assert!(
        ds.iter().all(|d| d["status"] == "delivered"),
        "the endpoint's secret survived the rotation: {ds:#?}"
    );
    let modern = rx.requests("/modern");
    let modern = for_event(&modern, &event_id);
    assert_eq!(modern.len(), 1);
    assert!(
        signed_by(&secret, modern[0]),
        "still signed with the same secret"
    );
    let legacy = rx.requests("/legacy");
    let legacy = for_event(&legacy, &event_id);
    assert_eq!(legacy.len(), 1);
    assert!(legacy[0].header("x-switchboard-signature").is_none());
    assert!(ds.iter().any(|d| d["endpoint_uuid"] == endpoint.as_str()));
    assert!(ds.iter().any(|d| d["endpoint_uuid"] == record.as_str()));
}
