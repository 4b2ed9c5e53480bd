//! The integrator's loop (issue "Integrator experience"): the v1 contact reads that give a send
//! its `contact_uuid`; `serve --demo` accepting local webhook targets with a warning; an
//! `unsafe_url` that says which setting allows a local target in development.

use serde_json::json;

use crate::both_backends;
use crate::receivers::Receiver;
use crate::recovery::send;
use crate::support::{Backend, TestEnv};
use crate::webhooks::fast;

const CONTACTS: &str = "/api/v1/integrations/contacts";
const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";

both_backends!(
    contacts_are_listed_and_read_through_v1,
    the_demo_accepts_local_webhook_targets,
    unsafe_urls_say_how_to_allow_local_targets,
);

async fn contacts_are_listed_and_read_through_v1(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "1000")]).await;
    for i in 0..3 {
        send(&server, &seed.key, &format!("+49151234950{i:02}"), "hi").await;
    }
    // The contact a send created is found by its phone, in any spelling.
    let r = server
        .get(
            &format!("{CONTACTS}?phone=%2B49%20151%2023495001"),
            &seed.key,
        )
        .await
        .expect(200);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{}", r.text);
    assert_eq!(data[0]["phone"], "+4915123495001");
    let uuid = data[0]["uuid"].as_str().unwrap().to_owned();
    let one = server
        .get(&format!("{CONTACTS}/{uuid}"), &seed.key)
        .await
        .expect(200);
    assert_eq!(one.body["uuid"], uuid.as_str());
    // The uuid is what the message history filters by.
    let history = server
        .get(
            &format!("/api/v1/integrations/messages?contact_uuid={uuid}"),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(history.body["data"].as_array().unwrap().len(), 1);

    // A list like the others: newest first, pages, strict parameters, bound cursors.
    let page = server
        .get(&format!("{CONTACTS}?limit=2"), &seed.key)
        .await
        .expect(200)
        .body;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert_eq!(page["data"][0]["phone"], "+4915123495002");
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = server
        .get(&format!("{CONTACTS}?limit=2&cursor={cursor}"), &seed.key)
        .await
        .expect(200)
        .body;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    assert_eq!(rest["has_more"], false);
    server
        .get(
            &format!("{CONTACTS}?limit=2&phone=%2B4915123495002&cursor={cursor}"),
            &seed.key,
        )
        .await
        .expect_error(400, "invalid_cursor");
    for (q, param) in [
        ("phne=1", "phne"),
        ("limit=0", "limit"),
        ("phone=abc", "phone"),
        ("since=2026-11-23T20:00:00+00:00", "since"),
    ] {
        let r = server
            .get(&format!("{CONTACTS}?{q}"), &seed.key)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(r.body["error"]["details"]["param"], param, "{q}");
    }
    // `+` sent as a space: the message says how to send it.
    let r = server
        .get(
            &format!("{CONTACTS}?since=2026-11-23T20:00:00+00:00"),
            &seed.key,
        )
        .await;
    assert!(r.text.contains("%2B"), "{}", r.text);
    let none = server
        .get(&format!("{CONTACTS}?since=2999-01-01T00:00:00Z"), &seed.key)
        .await
        .expect(200);
    assert!(none.body["data"].as_array().unwrap().is_empty());
    let all = server
        .get(
            &format!("{CONTACTS}?since=2000-01-01T00:00:00%2B00:00"),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(all.body["data"].as_array().unwrap().len(), 3);

    // Scope contacts:read; other organizations' contacts are 404.
    let reader = env.key(seed.org_id, "contacts:read").await;
    server.get(CONTACTS, &reader).await.expect(200);
    let no = env.key(seed.org_id, "messages:read").await;
    server
        .get(CONTACTS, &no)
        .await
        .expect_error(403, "insufficient_scope");
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    server
        .get(&format!("{CONTACTS}/{uuid}"), &other_key)
        .await
        .expect_error(404, "not_found");
    let theirs = server.get(CONTACTS, &other_key).await.expect(200);
    assert!(theirs.body["data"].as_array().unwrap().is_empty());
}

async fn the_demo_accepts_local_webhook_targets(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let server = env.start_with_args(&["serve", "--demo"], &[]).await;
    let out = server.stdout();
    assert!(
        out.contains("local http:// addresses") && out.contains("development only"),
        "the banner warns: {out}"
    );
    let key = out
        .split_whitespace()
        .find(|w| w.starts_with("sbk_"))
        .expect("the demo key is printed")
        .trim_end_matches('\'')
        .to_owned();
    let rx = Receiver::start().await;
    let r = server
        .post(
            ENDPOINTS,
            &key,
            &json!({"name": "local", "url": rx.url("/hooks"), "events": ["message.sent"]}),
        )
        .await
        .expect(201);
    let uuid = r.body["uuid"].as_str().unwrap();
    server
        .post(&format!("{ENDPOINTS}/{uuid}/test"), &key, &json!({}))
        .await
        .expect(202);
    let got = rx
        .wait_for("/hooks", 1, std::time::Duration::from_secs(30))
        .await;
    assert_eq!(got[0].event(), "integration.test");
}

async fn unsafe_urls_say_how_to_allow_local_targets(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": "http://127.0.0.1:9911/hooks", "events": ["message.sent"]}),
        )
        .await
        .expect_error(422, "unsafe_url");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS") && message.contains("--demo"),
        "{message}"
    );
    assert_eq!(r.body["error"]["details"]["field"], "url");
    // Credentials are never allowed: no hint there.
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": "https://user:pw@example.com/hooks", "events": ["message.sent"]}),
        )
        .await
        .expect_error(422, "unsafe_url");
    assert!(!r.text.contains("ALLOW_PRIVATE_TARGETS"), "{}", r.text);
    // With the setting, the same local URL is accepted.
    let dev = env.start(&fast()).await;
    dev.post(
        ENDPOINTS,
        &seed.key,
        &json!({"url": "http://127.0.0.1:9911/hooks", "events": ["message.sent"]}),
    )
    .await
    .expect(201);
}
