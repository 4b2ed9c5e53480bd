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
    listen_forwards_signed_events_and_resumes,
    trigger_emits_typed_samples_to_listen_and_subscribed_endpoints,
    v1_bodies_refuse_unknown_fields_and_name_every_problem,
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
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "url");
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

/// A free port on 127.0.0.1 (bound and released), so a restarted server can take it again.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `switchboard listen`: events forwarded to a local URL, signed with the printed session
/// secret; a server restart loses nothing (it resumes from the last event); Ctrl-C stops it.
async fn listen_forwards_signed_events_and_resumes(backend: Backend) {
    use tokio::io::AsyncBufReadExt;

    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let addr = format!("127.0.0.1:{}", free_port());
    let config = [
        ("SWITCHBOARD_LISTEN", addr.as_str()),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "1000"),
    ];
    let mut server = env.start(&config).await;
    let rx = Receiver::start().await;
    let mut child = tokio::process::Command::new(crate::support::BIN)
        .args([
            "listen",
            "--forward-to",
            &rx.url("/local"),
            "--server",
            &server.base,
            "--events",
            "message.*",
        ])
        .env("SWITCHBOARD_API_KEY", &seed.key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let secret = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("listen prints its secret")
            .unwrap()
            .expect("a line");
        if let Some(at) = line.find("whsec_") {
            break line[at..].trim().to_owned();
        }
    };
    // The stream starts with new events: wait until listen is connected (a first event
    // forwarded) before counting.
    let wait = std::time::Duration::from_secs(30);
    let mut sent = 0;
    loop {
        send(
            &server,
            &seed.key,
            "+4915123496001",
            &format!("hello {sent}"),
        )
        .await;
        sent += 1;
        let got = tokio::time::timeout(std::time::Duration::from_millis(700), async {
            rx.wait_for("/local", 1, wait).await
        })
        .await;
        if got.is_ok() {
            break;
        }
        assert!(sent < 40, "listen never forwarded an event");
    }
    let first = &rx.requests("/local")[0];
    assert_eq!(first.event(), "message.sent");
    assert!(
        crate::webhooks::signed_by(&secret, first),
        "signed with the session secret"
    );
    assert!(
        first
            .header("webhook-signature")
            .unwrap()
            .starts_with("v1,")
    );
    assert_eq!(first.json()["event"], "message.sent");

    // The server goes away (kill -9) and comes back on the same address; events written before
    // listen reconnects are forwarded too, once each.
    let before = rx.requests("/local").len();
    server.kill().await;
    let server = env.start(&config).await;
    send(&server, &seed.key, "+4915123496001", "while reconnecting").await;
    let got = rx
        .wait_until(wait, |rs| {
            rs.iter().any(|r| {
                r.path == "/local"
                    && r.json()["data"]["message"]["text"]["body"] == "while reconnecting"
            })
        })
        .await;
    let after: Vec<_> = got.iter().filter(|r| r.path == "/local").collect();
    assert!(after.len() > before);
    let mut ids: Vec<String> = after
        .iter()
        .map(|r| {
            r.json()["metadata"]["event_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no event forwarded twice");

    // Ctrl-C stops it cleanly.
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(wait, child.wait())
        .await
        .expect("listen exits on Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status:?}");
    drop(server);
}

/// Runs `switchboard ARGS` with `SWITCHBOARD_API_KEY=key`: (exit code, stdout, stderr).
async fn cli(key: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio::process::Command::new(crate::support::BIN)
            .args(args)
            .env("SWITCHBOARD_API_KEY", key)
            .output(),
    )
    .await
    .expect("the command finishes")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `switchboard trigger EVENT` and `listen --trigger EVENT`: a typed sample (`metadata.test:
/// true`) reaches the stream (and so `listen`) and every subscribed endpoint, no other; a key
/// that cannot read the stream is refused before listen prints anything; SIGTERM ends the
/// open stream at once instead of holding the shutdown grace.
async fn trigger_emits_typed_samples_to_listen_and_subscribed_endpoints(backend: Backend) {
    use tokio::io::AsyncBufReadExt;

    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut config = fast();
    config.push(("SWITCHBOARD_SHUTDOWN_GRACE", "30s"));
    let mut server = env.start(&config).await;
    let rx = Receiver::start().await;
    for (path, events) in [
        ("/messages", json!(["message.*"])),
        ("/contacts", json!(["contact.*"])),
    ] {
        server
            .post(
                ENDPOINTS,
                &seed.key,
                &json!({"url": rx.url(path), "events": events}),
            )
            .await
            .expect(201);
    }
    let wait = std::time::Duration::from_secs(30);

    // listen --trigger: the sample is asked for once the stream is open, and comes back on it.
    let mut child = tokio::process::Command::new(crate::support::BIN)
        .args([
            "listen",
            "--forward-to",
            &rx.url("/local"),
            "--server",
            &server.base,
            "--trigger",
            "message.received",
            // The seed's own events (a key created a moment ago) may still arrive on a new
            // stream; only the samples matter here.
            "--events",
            "message.*",
        ])
        .env("SWITCHBOARD_API_KEY", &seed.key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let secret = loop {
        let line = tokio::time::timeout(wait, lines.next_line())
            .await
            .expect("listen prints its secret")
            .unwrap()
            .expect("a line");
        if let Some(at) = line.find("whsec_") {
            break line[at..].trim().to_owned();
        }
    };
    let local = rx.wait_for("/local", 1, wait).await;
    let sample = local[0].json();
    assert_eq!(sample["event"], "message.received");
    assert_eq!(sample["metadata"]["test"], true);
    assert_eq!(sample["data"]["direction"], "inbound", "{sample}");
    assert!(crate::webhooks::signed_by(&secret, &local[0]));
    let delivered = rx.wait_for("/messages", 1, wait).await;
    assert_eq!(
        delivered[0].json()["metadata"]["event_id"],
        sample["metadata"]["event_id"]
    );

    // switchboard trigger: recorded (exit 0), delivered to the subscribed endpoint and listen.
    let (code, stdout, stderr) = cli(
        &seed.key,
        &["trigger", "message.status.update", "--server", &server.base],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("message.status.update recorded"),
        "{stdout}"
    );
    let delivered = rx.wait_for("/messages", 2, wait).await;
    assert_eq!(delivered[1].event(), "message.status.update");
    assert_eq!(delivered[1].json()["metadata"]["test"], true);
    rx.wait_for("/local", 2, wait).await;
    // It is in the feed like any event.
    let feed = server
        .get(
            "/api/v1/integrations/event-feed?events=message.status.update",
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(
        feed.body["data"].as_array().unwrap().len(),
        1,
        "{}",
        feed.text
    );

    // Refusals, with a reason and a non-zero exit.
    for (event, says) in [
        ("integration.test", "one endpoint"),
        ("no.such_event", "catalogue"),
    ] {
        let (code, _, stderr) = cli(&seed.key, &["trigger", event, "--server", &server.base]).await;
        assert_eq!(code, 1, "{event}: {stderr}");
        assert!(stderr.contains(says), "{event}: {stderr}");
    }
    let reader = env.key(seed.org_id, "messages:read").await;
    let (code, _, stderr) = cli(
        &reader,
        &["trigger", "contact.created", "--server", &server.base],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    // listen with a key that cannot read the stream: refused before any banner.
    let (code, stdout, stderr) = cli(
        &reader,
        &[
            "listen",
            "--forward-to",
            &rx.url("/never"),
            "--server",
            &server.base,
        ],
    )
    .await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(!stdout.contains("whsec_"), "{stdout}");
    assert!(stderr.contains("refused the key"), "{stderr}");
    // The contacts endpoint got nothing: no contact event was triggered.
    assert!(rx.requests("/contacts").is_empty());

    // SIGTERM with listen's stream open: the server ends the stream and exits at once, far
    // inside its 30 s grace.
    let started = std::time::Instant::now();
    let code = server.terminate().await;
    assert_eq!(code, Some(0));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "an open event stream held the shutdown for {:?}",
        started.elapsed()
    );
    let _ = child.start_kill();
}

/// The fields of a `validation_failed`, sorted: `(field, issue)`.
fn field_issues(r: &crate::support::Resp) -> Vec<(String, String)> {
    assert_eq!(r.body["error"]["code"], "validation_failed", "{}", r.text);
    let mut out: Vec<(String, String)> = r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("details.fields: {}", r.text))
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().to_owned(),
                f["issue"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// v1 bodies are strict (CONVENTIONS "Errors"): a field the request does not have is a 422
/// `validation_failed` with issue `unknown_field`, named with every other broken field at
/// once, and nothing is sent or created; the legacy `/api` routes stay lenient. Every error
/// that points at fields has one `details.fields` shape.
async fn v1_bodies_refuse_unknown_fields_and_name_every_problem(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "1000")]).await;
    let send = |body: serde_json::Value, key: &'static str| {
        let server = &server;
        let api_key = seed.key.clone();
        async move {
            server
                .post_with(
                    "/api/v1/integrations/messages",
                    &api_key,
                    &body,
                    &[("Idempotency-Key", key)],
                )
                .await
        }
    };
    // Another API's names: each unknown field and each missing one, in one answer.
    let r = send(json!({"to": "+4915123456789", "text": "hi"}), "k1").await;
    assert_eq!(r.status, 422, "{}", r.text);
    let got = field_issues(&r);
    let named: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(named, ["contact_uuid", "message", "text", "to"]);
    for (field, issue) in &got {
        let unknown = issue == "unknown_field";
        assert_eq!(
            unknown,
            field == "text" || field == "to",
            "{field}: {issue}"
        );
    }
    // An empty body names the text and the recipient.
    let r = send(json!({}), "k2").await;
    let named: Vec<String> = field_issues(&r).into_iter().map(|(f, _)| f).collect();
    assert_eq!(named, ["contact_uuid", "message"]);
    // A good send with one extra field is refused as a whole: nothing is sent.
    let r = send(
        json!({"phone": "+4915123456789", "message": "hi", "priority": "high"}),
        "k3",
    )
    .await;
    assert_eq!(
        field_issues(&r),
        [("priority".to_owned(), "unknown_field".to_owned())]
    );
    let history = server
        .get("/api/v1/integrations/messages", &seed.key)
        .await
        .expect(200);
    assert_eq!(history.body["data"].as_array().unwrap().len(), 0);
    // The corrected request may reuse the key (a refusal before execution is not stored).
    send(json!({"phone": "+4915123456789", "message": "hi"}), "k3")
        .await
        .expect(201);
    // The legacy route keeps taking what it does not know.
    server
        .post(
            "/api/send",
            &seed.key,
            &json!({"phone": "+4915123456789", "message": "hi", "priority": "high"}),
        )
        .await
        .expect(201);

    // Endpoints: `enabled` is not a field (`status` is); nothing is created.
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": "https://example.com/hooks", "events": ["message.sent"], "enabled": false}),
        )
        .await;
    assert_eq!(
        field_issues(&r),
        [("enabled".to_owned(), "unknown_field".to_owned())]
    );
    // Missing required fields are all named, beside the unknown one. (`target` is a field
    // since issue 35: a broker endpoint's address.)
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"name": "x", "destination": "y"}),
        )
        .await;
    assert_eq!(
        field_issues(&r),
        [
            ("destination".to_owned(), "unknown_field".to_owned()),
            ("events".to_owned(), "is required".to_owned()),
            ("url".to_owned(), "is required".to_owned()),
        ]
    );
    let list = server.get(ENDPOINTS, &seed.key).await.expect(200);
    assert_eq!(list.body["data"].as_array().unwrap().len(), 0);
    // Nested objects too, and optional bodies once given.
    let r = server
        .post_with(
            "/api/v1/integrations/messages/template",
            &seed.key,
            &json!({"phone": "+4915123456789",
                    "template": {"name": "hello", "language": "en", "lang": "en"}}),
            &[("Idempotency-Key", "k4")],
        )
        .await;
    assert_eq!(
        field_issues(&r),
        [("template.lang".to_owned(), "unknown_field".to_owned())]
    );

    // One details shape for every error that points at fields.
    let r = send(
        json!({"phone": "+4915123456789", "message": "hi", "channel_id": seed.channel_id,
               "channel_slug": "sandbox"}),
        "k5",
    )
    .await
    .expect_error(422, "channel_conflict");
    let fields: Vec<&str> = r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert!(f["issue"].is_string(), "{}", r.text);
            f["field"].as_str().unwrap()
        })
        .collect();
    assert_eq!(fields, ["channel_id", "channel_slug"]);
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": "https://10.0.0.1/hooks", "events": ["message.sent"]}),
        )
        .await
        .expect_error(422, "unsafe_url");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "url");
    assert!(r.body["error"]["details"]["fields"][0]["issue"].is_string());
}
