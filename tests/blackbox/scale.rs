//! Issue 8: several instances behave as one; faults lose nothing; SIGTERM drains; logs keep
//! no secrets.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::fake_providers::{self, Behaviour as ProviderBehaviour, Fake};
use crate::receivers::{Behaviour, Receiver};
use crate::support::{Backend, Resp, Server, TestEnv};

crate::async_tests!(4; three_instances_on_one_postgres_and_redis_behave_as_one, kill_9_with_sends_and_deliveries_in_flight_loses_nothing);

const SEND: &str = "/api/v1/integrations/messages";
const PHONE: &str = "+4915123456789";

fn ikey() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn send(server: &Server, key: &str, body: &Value, idem: &str) -> Resp {
    server
        .post_with(SEND, key, body, &[("Idempotency-Key", idem)])
        .await
}

async fn messages(server: &Server, key: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{SEND}?limit=200&cursor={c}"),
            None => format!("{SEND}?limit=200"),
        };
        let r = server.get(&path, key).await.expect(200);
        all.extend(r.body["data"].as_array().unwrap().iter().cloned());
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return all,
        }
    }
}

async fn endpoint(server: &Server, key: &str, url: &str, events: &[&str]) -> Value {
    server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            key,
            &json!({"name": "sink", "url": url, "events": events}),
        )
        .await
        .expect(201)
        .body
}

/// Polls until `f` is true or the deadline passes.
async fn eventually<F, Fut>(deadline: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn needs_postgres_and_redis() -> String {
    if crate::support::postgres_url().is_none() {
        crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
    }
    crate::support::redis_url()
        .unwrap_or_else(|| crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set"))
}

async fn three_instances_on_one_postgres_and_redis_behave_as_one() {
    let redis = needs_postgres_and_redis();
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    let limited_key = env.key(seed.org_id, "*").await;
    let receiver = Receiver::start().await;
    let settings = [
        ("SWITCHBOARD_REDIS_URL", redis.as_str()),
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_RATE_LIMIT_READS", "9"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "1000"),
    ];
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let c = env.start(&settings).await;
    let instances = [&a, &b, &c];
    endpoint(&a, &seed.key, &receiver.url("/sink"), &["message.sent"]).await;

    // Idempotency across instances: the same key sent to three instances at once gives one
    // message; every answer is that message (or "still in progress").
    let mut keys = Vec::new();
    for round in 0..5 {
        let idem = ikey();
        keys.push(idem.clone());
        let body = json!({"phone": PHONE, "message": format!("round {round}")});
        let answers =
            futures::future::join_all(instances.iter().map(|s| send(s, &seed.key, &body, &idem)))
                .await;
        let mut ids = HashSet::new();
        for r in &answers {
            match r.status.as_u16() {
                201 => {
                    ids.insert(r.body["message"]["id"].as_i64().unwrap());
                }
                409 => assert_eq!(
                    r.body["error"]["code"], "idempotency_in_progress",
                    "{}",
                    r.text
                ),
                other => panic!("unexpected {other}: {}", r.text),
            }
        }
        assert!(
            ids.len() <= 1,
            "one message per key across instances: {ids:?}"
        );
        // Whoever was told "in progress" gets the stored answer on retry.
        let replay = send(&c, &seed.key, &body, &idem).await.expect(201);
        assert_eq!(replay.header("idempotency-replayed"), Some("true"));
        if let Some(id) = ids.iter().next() {
            assert_eq!(replay.body["message"]["id"].as_i64(), Some(*id));
        }
    }

    // Sends spread over the instances: each event is delivered once, by exactly one instance.
    for i in 0..30 {
        let server = instances[i % 3];
        send(
            server,
            &seed.key,
            &json!({"phone": PHONE, "message": format!("spread {i}")}),
            &ikey(),
        )
        .await
        .expect(201);
    }
    let expected = 35;
    let got = receiver
        .wait_for("/sink", expected, Duration::from_secs(60))
        .await;
    assert_eq!(got.len(), expected, "every message.sent is delivered");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let all = receiver.requests("/sink");
    let deliveries: HashSet<String> = all.iter().map(|r| r.delivery()).collect();
    assert_eq!(all.len(), expected, "no attempt was made twice");
    assert_eq!(deliveries.len(), expected, "one delivery per event");
    assert!(all.iter().all(|r| r.attempt() == 1));
    let stored = messages(&a, &seed.key).await;
    assert_eq!(
        stored.len(),
        expected,
        "one message per idempotency key and per send"
    );

    // Rate limits are shared: 9 reads per minute across all instances.
    let mut statuses = Vec::new();
    for i in 0..18 {
        statuses.push(
            instances[i % 3]
                .get("/api/v1/integrations/channels", &limited_key)
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        9,
        "{statuses:?}"
    );

    // A revocation stops the key on every instance at once.
    let fresh = env
        .admin(&[
            "key",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--scopes",
            "channels:read",
        ])
        .await;
    let token = fresh["key"].as_str().unwrap();
    for s in instances {
        s.get("/api/v1/integrations/channels", token)
            .await
            .expect(200);
    }
    env.admin(&["key", "revoke", &fresh["id"].to_string()])
        .await;
    for s in instances {
        s.get("/api/v1/integrations/channels", token)
            .await
            .expect_error(401, "revoked_api_key");
    }
}

async fn kill_9_with_sends_and_deliveries_in_flight_loses_nothing() {
    if crate::support::postgres_url().is_none() {
        crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
    }
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    let receiver = Receiver::start().await;
    let settings = [
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "2s"),
        ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "200ms,200ms,200ms"),
        ("SWITCHBOARD_IDEMPOTENCY_LEASE", "2s"),
        ("SWITCHBOARD_PROVIDER_TIMEOUT", "1s"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "1000"),
        ("SWITCHBOARD_RATE_LIMIT_READS", "1000"),
    ];
    let mut a = env.start(&settings).await;
    let b = env.start(&settings).await;
    endpoint(&a, &seed.key, &receiver.url("/sink"), &["message.sent"]).await;
    // The receiver is slow at first: attempts are in flight when the instance dies.
    receiver.script(
        "/sink",
        vec![Behaviour::Slow(Duration::from_millis(1500), 200); 20],
    );

    // Sends in flight on A while it is killed: each is retried on B with the same key.
    let keys: Vec<String> = (0..20).map(|_| ikey()).collect();
    let mut in_flight = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let client = a.client.clone();
        let url = a.url(SEND);
        let (key, idem) = (seed.key.clone(), k.clone());
        in_flight.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", idem)
                .json(&json!({"phone": PHONE, "message": format!("in flight {i}")}))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok()
        }));
        if i == 10 {
            receiver.wait_for("/sink", 1, Duration::from_secs(20)).await;
            a.kill().await;
        }
    }
    for t in in_flight {
        let _ = t.await;
    }
    for (i, k) in keys.iter().enumerate() {
        let body = json!({"phone": PHONE, "message": format!("in flight {i}")});
        let ok = eventually(Duration::from_secs(30), || async {
            let r = send(&b, &seed.key, &body, k).await;
            r.status.as_u16() == 201
        })
        .await;
        assert!(ok, "send {i} succeeds on the surviving instance");
    }

    // Every message was recorded once, and every message.sent reaches the receiver.
    let stored = messages(&b, &seed.key).await;
    assert_eq!(stored.len(), keys.len(), "one message per idempotency key");
    let ledger_statuses = || async {
        let ledger = b
            .get(
                "/api/v1/integrations/webhook-deliveries?limit=200",
                &seed.key,
            )
            .await
            .expect(200);
        ledger.body["data"].as_array().unwrap().iter().fold(
            HashMap::new(),
            |mut m: HashMap<String, usize>, d| {
                *m.entry(d["status"].as_str().unwrap().to_owned())
                    .or_default() += 1;
                m
            },
        )
    };
    let delivered = eventually(Duration::from_secs(90), || async {
        ledger_statuses().await.get("delivered") == Some(&keys.len())
    })
    .await;
    let statuses = ledger_statuses().await;
    assert!(
        delivered,
        "every event is delivered after the crash; ledger: {statuses:?}"
    );
    let arrived: HashSet<String> = receiver
        .requests("/sink")
        .iter()
        .map(|r| r.delivery())
        .collect();
    assert_eq!(
        arrived.len(),
        keys.len(),
        "every delivery reached the receiver"
    );
    assert_eq!(statuses.get("delivered"), Some(&keys.len()), "{statuses:?}");
}

both_backends!(
    sigterm_lets_a_send_in_flight_finish,
    logs_never_contain_keys_secrets_tokens_or_bodies
);

async fn sigterm_lets_a_send_in_flight_finish(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph("EAAG-drain-token").await;
    env.admin(&[
        "channel", "create", "--org", &seed.org_id.to_string(), "--type", "whatsapp_cloud", "--name", "WA", "--slug", "wa",
        "--provider-config", &json!({"phone_number_id": "1098765", "access_token": "EAAG-drain-token", "api_base_url": graph.base_url}).to_string(),
    ])
    .await;
    let mut server = env.start(&[("SWITCHBOARD_SHUTDOWN_GRACE", "20s")]).await;
    graph.then(ProviderBehaviour::Hold).await;
    let client = server.client.clone();
    let url = server.url("/api/v1/integrations/messages/template");
    let key = seed.key.clone();
    let in_flight = tokio::spawn(async move {
        let r = client
            .post(url)
            .bearer_auth(key)
            .header("Idempotency-Key", ikey())
            .json(&json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "hello_world", "language": "en_US"}}))
            .send()
            .await
            .unwrap();
        Server::read(r).await
    });
    graph.wait_for_arrivals(1).await;
    let pid = server.child.id().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    // New connections are refused once draining has begun.
    let refused = eventually(Duration::from_secs(10), || async {
        reqwest::Client::new()
            .get(server.url("/healthz"))
            .send()
            .await
            .is_err()
    })
    .await;
    assert!(refused, "no new requests are accepted after SIGTERM");
    graph.release();
    let r = in_flight.await.unwrap().expect(201);
    assert_eq!(r.body["message"]["status"], "sent");
    assert_eq!(server.terminate().await, Some(0));
}

async fn logs_never_contain_keys_secrets_tokens_or_bodies(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph("EAAG-secret-access-token-for-log-scan").await;
    let app_secret = "app-secret-for-log-scan";
    let wa = env
        .admin(&[
            "channel", "create", "--org", &seed.org_id.to_string(), "--type", "whatsapp_cloud", "--name", "WA", "--slug", "wa",
            "--provider-config",
            &json!({"phone_number_id": "1098765", "access_token": "EAAG-secret-access-token-for-log-scan", "app_secret": app_secret, "verify_token": "verify-token-for-log-scan", "api_base_url": graph.base_url}).to_string(),
        ])
        .await;
    let legacy = "legacy-plaintext-key-for-log-scan-123";
    env.admin(&[
        "key",
        "import-legacy",
        "--org",
        &seed.org_id.to_string(),
        "--key",
        legacy,
    ])
    .await;
    let receiver = Receiver::start().await;
    let server = env
        .start(&[
            (
                "SWITCHBOARD_LOG",
                "trace,hyper=info,h2=info,sqlx=info,tower=info,reqwest=info",
            ),
            ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ])
        .await;

    // Every kind of traffic: reads, sends of every kind, an endpoint and its secret rotation,
    // deliveries, inbound messages and statuses, failed authentications.
    let ep = endpoint(&server, &seed.key, &receiver.url("/sink"), &["*"]).await;
    let first_secret = ep["signing_secret"].as_str().unwrap().to_owned();
    let rotated = server
        .post(
            &format!(
                "/api/v1/integrations/webhook-endpoints/{}/rotate-secret",
                ep["uuid"].as_str().unwrap()
            ),
            &seed.key,
            &json!({}),
        )
        .await
        .expect(200);
    let second_secret = rotated.body["signing_secret"].as_str().unwrap().to_owned();
    let body_text = "a very private message body 4c1f";
    send(
        &server,
        &seed.key,
        &json!({"phone": PHONE, "message": body_text}),
        &ikey(),
    )
    .await
    .expect(201);
    server
        .post_with(
            "/api/v1/integrations/messages/template",
            legacy,
            &json!({"channel_slug": "wa", "phone": PHONE, "template": {"name": "secret_template_name_x", "language": "en_US"}}),
            &[("Idempotency-Key", &ikey())],
        )
        .await
        .expect(201);
    let inbound_text = "an inbound private body 9e2a";
    let now = chrono::Utc::now().timestamp();
    let callback = fake_providers::wa_webhook(
        "1098765",
        vec![fake_providers::wa_text(
            "4915123456789",
            "wamid.LOGSCAN",
            now,
            inbound_text,
        )],
        vec![],
    );
    let raw = serde_json::to_vec(&callback).unwrap();
    let r = server
        .client
        .post(server.url(&format!("/inbound/{}", wa["uuid"].as_str().unwrap())))
        .header("content-type", "application/json")
        .header(
            "X-Hub-Signature-256",
            fake_providers::hub_signature(app_secret, &raw),
        )
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    server
        .get(
            "/api/v1/integrations/channels",
            "sbk_this_is_not_a_real_key_0000000000000",
        )
        .await
        .expect(401);
    server
        .call(
            Method::GET,
            "/api/v1/integrations/messages",
            Some(legacy),
            None,
        )
        .await
        .expect(200);
    receiver.wait_for("/sink", 3, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let logs = server.logs();
    assert!(
        logs.lines().count() > 10,
        "the scenario was logged at trace level:\n{logs}"
    );
    for (what, secret) in [
        ("API key", seed.key.as_str()),
        ("legacy key", legacy),
        ("signing secret", &first_secret),
        ("rotated signing secret", &second_secret),
        (
            "provider access token",
            "EAAG-secret-access-token-for-log-scan",
        ),
        ("provider app secret", app_secret),
        ("provider verify token", "verify-token-for-log-scan"),
        ("master key", env.master_key.as_str()),
        ("outbound message body", body_text),
        ("inbound message body", inbound_text),
    ] {
        assert!(!logs.contains(secret), "the logs contain the {what}");
    }
    // Responses never echo secrets except the one-time values.
    let listed = server
        .get("/api/v1/integrations/webhook-endpoints", &seed.key)
        .await
        .expect(200);
    assert!(!listed.text.contains(&second_secret) && !listed.text.contains(&first_secret));
    let channels = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    assert!(!channels.text.contains("EAAG-secret") && !channels.text.contains(app_secret));
}
