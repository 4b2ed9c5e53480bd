//! The developer console in a real browser (Debian's headless Chromium, driven by
//! playwright-core from tests/verifiers): sign in, create an endpoint, send a message, see
//! its delivery with its attempt, retry it. Screenshots are kept in
//! `target/console-screenshots/<backend>/`. Also: the console's security headers.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;

use crate::both_backends;
use crate::receivers::Receiver;
use crate::support::{Backend, TestEnv, need_path, need_program};
use crate::webhooks::fast;

both_backends!(the_console_works_in_a_real_browser);

async fn the_console_works_in_a_real_browser(backend: Backend) {
    let verifiers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/verifiers");
    need_path(
        std::path::Path::new("/usr/bin/chromium"),
        "Debian's chromium: apt-get install chromium; .ci/run does",
    );
    need_program("node", "Node.js; .ci/run's machine has it");
    need_path(
        &verifiers.join("node_modules/playwright-core"),
        "npm ci --prefix tests/verifiers; .ci/run does",
    );
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut config = fast();
    config.push(("SWITCHBOARD_RATE_LIMIT_SENDS", "1000"));
    let server = env.start(&config).await;

    // Loads without a key, with strict headers.
    let page = server
        .call(Method::GET, "/console", None, None)
        .await
        .expect(200);
    let csp = page.header("content-security-policy").unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page.text.contains("/console/app.js"));

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = root.join(format!(
        "target/console-screenshots/{}",
        match backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    ));
    std::fs::create_dir_all(&out).unwrap();
    // Messages of several kinds, for the message list's summaries: a text, a reply to it, a
    // reaction to it, a location and contacts (the sandbox sends every kind).
    let send = |body: serde_json::Value| {
        let (server, key) = (&server, &seed.key);
        async move {
            let mut b = serde_json::json!({"phone": "+4915123450001"});
            b.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            let id = uuid::Uuid::new_v4().to_string();
            server
                .post_with(
                    "/api/v1/integrations/messages",
                    key,
                    &b,
                    &[("Idempotency-Key", &id)],
                )
                .await
                .expect(201)
                .body["message"]["uuid"]
                .clone()
        }
    };
    let first = send(serde_json::json!({"message": "Your order is packed"})).await;
    send(serde_json::json!({"message": "It left the warehouse", "reply_to": first})).await;
    send(serde_json::json!({"reaction": {"message_uuid": first, "emoji": "👍"}})).await;
    send(
        serde_json::json!({"location": {"latitude": 52.52, "longitude": 13.405,
        "name": "Pick-up point", "address": "Main St 1"}}),
    )
    .await;
    send(
        serde_json::json!({"contacts": [{"name": {"formatted_name": "Ann Lee"},
        "phones": [{"phone": "+4915123456789", "type": "CELL"}]}]}),
    )
    .await;

    let rx = Receiver::start().await;
    let run = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new("node")
            .arg(verifiers.join("console.js"))
            .arg(&server.base)
            .arg(&seed.key)
            .arg(rx.url("/from-console"))
            .arg(&out)
            .current_dir(&verifiers)
            .output(),
    )
    .await
    .expect("the browser test finishes")
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "console.js failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap()).expect("one JSON line");
    eprintln!("console ({backend:?}): {report}");
    let summaries: Vec<&str> = report["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for expected in [
        "↩ It left the warehouse",
        &format!("👍 to {}", first.as_str().unwrap()),
        "Pick-up point · Main St 1 · 52.52, 13.405",
        "Ann Lee",
    ] {
        assert!(
            summaries.iter().any(|s| s.contains(expected)),
            "no summary {expected:?} in {summaries:?}"
        );
    }
    assert!(report["attempts"].as_u64().unwrap() >= 1, "{report}");
    assert!(
        report["first_attempt"].as_str().unwrap().contains("200"),
        "{report}"
    );
    // The journey of the message sent from the console, in order, with both attempts (the
    // delivery and its retry) once the retry has been made.
    let journey: Vec<&str> = report["journey"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(
        journey[..4],
        [
            "accepted",
            "provider_request",
            "provider_response",
            "status"
        ],
        "{report}"
    );
    assert!(journey[4..].contains(&"webhook_attempt"), "{report}");
    assert_eq!(report["key_in_url"], false, "the key is never in a URL");
    assert_eq!(
        report["nav_visible_signed_out"], false,
        "signed out, the navigation is hidden"
    );
    // The ledger names the endpoint and filters by event, endpoint and time.
    let row = report["ledger_row"].as_str().unwrap();
    assert!(row.contains("Browser test"), "{row}");
    assert_eq!(report["rows_other_event"], 0, "{report}");
    assert!(
        report["rows_of_endpoint"].as_u64().unwrap() >= 1,
        "{report}"
    );
    assert_eq!(report["rows_in_future"], 0, "{report}");
    // The delivery shows the envelope it sent and its headers, signatures masked.
    assert_eq!(report["payload"]["event"], "message.sent", "{report}");
    assert_eq!(
        report["payload"]["data"]["message"]["text"]["body"], "Sent from the console test",
        "{report}"
    );
    let headers = report["headers"].as_str().unwrap();
    for name in ["X-Switchboard-Delivery", "webhook-id", "webhook-signature"] {
        assert!(headers.contains(name), "{headers}");
    }
    assert!(
        headers.contains("v1,••••") && headers.contains("signed with sec_"),
        "{headers}"
    );
    // The endpoint card shows the type, the filter and the endpoint's own limits.
    assert_eq!(report["card"]["type"], "https", "{report}");
    let filter = report["card"]["filter"].as_str().unwrap();
    assert!(
        filter.contains(r#"{"channel.type":{"$in":["sandbox"]}}"#),
        "{filter}"
    );
    let limits = report["card"]["limits"].as_str().unwrap();
    assert!(
        limits.contains("timeout 5s") && limits.contains("at most 50/s"),
        "{limits}"
    );
    // Its health: everything settled in the last hour was delivered.
    let health = report["health"].as_str().unwrap();
    assert!(
        health.starts_with("100% delivered in the last hour"),
        "{health}"
    );
    assert_eq!(
        report["other_origins"],
        serde_json::json!([]),
        "no external resource"
    );
    assert_eq!(report["console_errors"], serde_json::json!([]), "{report}");
    for shot in [
        "1-sign-in",
        "2-channels",
        "3-endpoint-created",
        "4-sent",
        "5a-ledger-filtered",
        "5-delivery",
        "5b-endpoint-health",
        "6-retried",
        "6b-journey",
        "7-narrow-messages",
    ] {
        let f = out.join(format!("{shot}.png"));
        assert!(
            std::fs::metadata(&f)
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{}",
            f.display()
        );
    }
    // The message was delivered, then redelivered by the retry.
    let got = rx
        .wait_for("/from-console", 2, Duration::from_secs(30))
        .await;
    assert!(got.iter().all(|r| r.event() == "message.sent"));
    assert!(
        !server.logs().contains(&seed.key),
        "the key is never logged"
    );
}
