//! After an outage (CONVENTIONS "Recovery, replay and the event feed"): recoveries that queue
//! each missed event exactly once (also events from while the endpoint was disabled or before
//! it existed), that survive kill -9 and run once across instances; bulk redelivery; the rules
//! of a recovery's window.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::both_backends;
use crate::receivers::{Behaviour, ReceivedRequest, Receiver};
use crate::support::{Backend, Server, TestEnv};
use crate::webhooks::{Api, with};

crate::async_tests!(2; two_instances_run_one_recovery_once);

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const DELIVERIES: &str = "/api/v1/integrations/webhook-deliveries";
const WAIT: Duration = Duration::from_secs(60);

both_backends!(
    recovery_delivers_each_missed_event_exactly_once,
    recovery_windows_and_endpoints_are_validated,
    recovery_survives_kill_9,
    bulk_retry_redelivers_what_was_not_delivered,
);

async fn two_instances_run_one_recovery_once() {
    if crate::support::postgres_url().is_none() {
        crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
    }
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    // Small pages with a pause: both instances' workers are awake while it runs.
    let config = settings(&[
        ("SWITCHBOARD_RECOVERY_PAGE_SIZE", "2"),
        ("SWITCHBOARD_RECOVERY_PAGE_INTERVAL", "50ms"),
    ]);
    let a = env.start(&config).await;
    let b = env.start(&config).await;
    let rx = Receiver::start().await;
    let since = at(-1000);
    for i in 0..20 {
        let s = if i % 2 == 0 { &a } else { &b };
        send(
            s,
            &seed.key,
            &format!("+49151234503{i:02}"),
            &format!("t{i}"),
        )
        .await;
    }
    let ep = Api::new(&a, &seed.key)
        .create(&rx.url("/ep"), &["message.sent"])
        .await;
    // Started on one instance, polled on the other.
    let started = recover(&a, &seed.key, &ep.uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    let done = wait_recovery(
        &b,
        &seed.key,
        &ep.uuid,
        started["recovery_id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(done["events_matched"], 20, "{done:#}");
    assert_eq!(done["deliveries_queued"], 20, "{done:#}");
    let arrivals = distinct_arrivals(&rx, "/ep", 20).await;
    assert_eq!(arrivals.len(), 20);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.requests("/ep").len(), 20, "each event once");
    assert_eq!(ledger(&a, &seed.key, &ep.uuid).await.len(), 20);
}

/// Settings of these tests: `fast()`, sends unlimited, endpoints disabled after 2 failures.
pub(crate) fn settings(
    extra: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut over = vec![
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
        ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms"),
        ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "2"),
    ];
    over.extend_from_slice(extra);
    with(&over)
}

/// Sends a text to `phone`; its `message.sent` event carries the text.
pub(crate) async fn send(server: &Server, key: &str, phone: &str, text: &str) {
    let idempotency_key = uuid::Uuid::new_v4().to_string();
    server
        .post_with(
            "/api/v1/integrations/messages",
            key,
            &json!({"phone": phone, "message": text}),
            &[("Idempotency-Key", idempotency_key.as_str())],
        )
        .await
        .expect(201);
}

/// `metadata.event_id` of a delivered envelope.
pub(crate) fn event_id(r: &ReceivedRequest) -> String {
    r.json()["metadata"]["event_id"]
        .as_str()
        .expect("metadata.event_id")
        .to_owned()
}

/// RFC 3339 of now plus `offset_ms` (negative: in the past).
pub(crate) fn at(offset_ms: i64) -> String {
    let t = chrono::Utc::now() + chrono::Duration::milliseconds(offset_ms);
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(crate) async fn recover(
    server: &Server,
    key: &str,
    uuid: &str,
    body: Value,
) -> crate::support::Resp {
    server
        .post(&format!("{ENDPOINTS}/{uuid}/recover"), key, &body)
        .await
}

/// Polls a recovery until it is `completed` (panics on `failed` or after the deadline).
pub(crate) async fn wait_recovery(server: &Server, key: &str, uuid: &str, id: &str) -> Value {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = server
            .get(&format!("{ENDPOINTS}/{uuid}/recoveries/{id}"), key)
            .await
            .expect(200)
            .body;
        assert_ne!(r["status"], "failed", "{r:#}");
        if r["status"] == "completed" {
            return r;
        }
        assert!(tokio::time::Instant::now() < end, "never completed: {r:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every delivery of the ledger to an endpoint (all pages).
pub(crate) async fn ledger(server: &Server, key: &str, endpoint: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = format!("{DELIVERIES}?endpoint_uuid={endpoint}&limit=100");
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={c}"));
        }
        let page = server.get(&q, key).await.expect(200).body;
        out.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) if page["has_more"] == true => cursor = Some(c.to_owned()),
            _ => return out,
        }
    }
}

/// Waits until the receiver has `n` requests on `path` whose event ids are distinct and then
/// a moment longer for a duplicate (there must be none); returns them by event id.
async fn distinct_arrivals(
    rx: &Receiver,
    path: &str,
    n: usize,
) -> HashMap<String, Vec<ReceivedRequest>> {
    rx.wait_for(path, n, WAIT).await;
    let mut by_event: HashMap<String, Vec<ReceivedRequest>> = HashMap::new();
    for r in rx.requests(path) {
        by_event.entry(event_id(&r)).or_default().push(r);
    }
    by_event
}

async fn recovery_delivers_each_missed_event_exactly_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&settings(&[])).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let since = at(-1000);

    // The endpoint is down: two exhausted deliveries disable it.
    rx.respond("/down", Behaviour::Status(503));
    let down = api.create(&rx.url("/down"), &["message.sent"]).await;
    send(&server, &seed.key, "+4915123450001", "before 1").await;
    send(&server, &seed.key, "+4915123450002", "before 2").await;
    api.wait_endpoint(&down.uuid, "disabled", |e| e["status"] == "disabled")
        .await;
    // While it is disabled, events happen and are not written for it.
    send(&server, &seed.key, "+4915123450003", "while down 1").await;
    send(&server, &seed.key, "+4915123450004", "while down 2").await;
    let failed_attempts = rx.requests("/down").len();

    // A disabled endpoint must be re-enabled first.
    recover(&server, &seed.key, &down.uuid, json!({"since": since}))
        .await
        .expect_error(422, "endpoint_disabled");

    rx.respond("/down", Behaviour::Status(200));
    api.put(&down.uuid, json!({"status": "active"}))
        .await
        .expect(200);
    let started = recover(&server, &seed.key, &down.uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    assert_eq!(started["status"], "running");
    assert_eq!(started["endpoint_uuid"], down.uuid.as_str());
    let id = started["recovery_id"].as_str().unwrap().to_owned();
    let done = wait_recovery(&server, &seed.key, &down.uuid, &id).await;
    assert_eq!(done["events_matched"], 4, "{done:#}");
    assert_eq!(done["deliveries_queued"], 4, "{done:#}");
    assert!(done["completed_at"].is_string());

    // Each of the four events arrives once (on top of the failed attempts before).
    let arrivals = distinct_arrivals(&rx, "/down", failed_attempts + 4).await;
    let all_down = rx.requests("/down");
    let recovered: Vec<&ReceivedRequest> = all_down[failed_attempts..].iter().collect();
    let ids: HashSet<String> = recovered.iter().map(|r| event_id(r)).collect();
    assert_eq!(ids.len(), 4, "four distinct events: {ids:?}");
    for r in &recovered {
        assert_eq!(r.event(), "message.sent");
    }
    let texts: HashSet<String> = recovered
        .iter()
        .map(|r| {
            r.json()["data"]["message"]["text"]["body"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    for t in ["before 1", "before 2", "while down 1", "while down 2"] {
        assert!(texts.contains(t), "{t} was recovered: {texts:?}");
    }
    let _ = arrivals;

    // The ledger: four deliveries with trigger recovery, all delivered.
    let recovery_rows: Vec<Value> = ledger(&server, &seed.key, &down.uuid)
        .await
        .into_iter()
        .filter(|d| d["trigger"] == "recovery")
        .collect();
    assert_eq!(recovery_rows.len(), 4);
    for d in &recovery_rows {
        let d = api
            .wait_status(d["delivery_id"].as_str().unwrap(), "delivered")
            .await;
        assert!(ids.contains(d["event_id"].as_str().unwrap()));
    }

    // The same window again: everything matched is delivered, nothing is queued.
    let again = recover(&server, &seed.key, &down.uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    let again = wait_recovery(
        &server,
        &seed.key,
        &down.uuid,
        again["recovery_id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(again["events_matched"], 4);
    assert_eq!(again["deliveries_queued"], 0);

    // An endpoint created after the events recovers them too; its subscriptions choose.
    let late = api.create(&rx.url("/late"), &["message.sent"]).await;
    let none = api.create(&rx.url("/none"), &["contact.deleted"]).await;
    for ep in [&late, &none] {
        let r = recover(
            &server,
            &seed.key,
            &ep.uuid,
            json!({"since": since, "until": at(0)}),
        )
        .await
        .expect(202)
        .body;
        wait_recovery(
            &server,
            &seed.key,
            &ep.uuid,
            r["recovery_id"].as_str().unwrap(),
        )
        .await;
    }
    let late_arrivals = distinct_arrivals(&rx, "/late", 4).await;
    assert_eq!(late_arrivals.len(), 4);
    assert!(
        late_arrivals.values().all(|v| v.len() == 1),
        "no event twice"
    );
    assert!(ids.iter().all(|id| late_arrivals.contains_key(id)));
    assert!(rx.requests("/none").is_empty());
    // No duplicate ever reached the first endpoint either.
    let mut seen = HashSet::new();
    for r in &rx.requests("/down")[failed_attempts..] {
        assert!(
            seen.insert(event_id(r)),
            "event {} delivered twice",
            event_id(r)
        );
    }
}

async fn recovery_windows_and_endpoints_are_validated(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&settings(&[("SWITCHBOARD_DELIVERY_RETENTION", "1h")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let bad = |body: Value, field: &'static str| {
        let server = &server;
        let key = seed.key.clone();
        let uuid = ep.uuid.clone();
        async move {
            let r = recover(server, &key, &uuid, body.clone())
                .await
                .expect_error(422, "validation_failed");
            assert!(r.text.contains(field), "{body} names {field}: {}", r.text);
        }
    };
    bad(json!({"since": at(60_000)}), "since").await;
    bad(json!({"since": at(-7_200_000)}), "since").await;
    bad(
        json!({"since": at(-60_000), "until": at(-120_000)}),
        "until",
    )
    .await;
    bad(json!({"since": at(-60_000), "until": at(60_000)}), "until").await;
    bad(json!({"since": "yesterday"}), "since").await;
    let r = recover(&server, &seed.key, &ep.uuid, json!({})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    assert!(r.text.contains("since"), "{}", r.text);

    // Unknown endpoints, another organization's endpoint, unknown recoveries: 404.
    recover(
        &server,
        &seed.key,
        "0192f7a0-0000-7000-8000-000000000000",
        json!({"since": at(-60_000)}),
    )
    .await
    .expect_error(404, "not_found");
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    recover(&server, &other_key, &ep.uuid, json!({"since": at(-60_000)}))
        .await
        .expect_error(404, "not_found");
    let started = recover(&server, &seed.key, &ep.uuid, json!({"since": at(-60_000)}))
        .await
        .expect(202)
        .body;
    let id = started["recovery_id"].as_str().unwrap();
    server
        .get(
            &format!("{ENDPOINTS}/{}/recoveries/{id}", ep.uuid),
            &other_key,
        )
        .await
        .expect_error(404, "not_found");
    server
        .get(
            &format!(
                "{ENDPOINTS}/{}/recoveries/0192f7a0-0000-7000-8000-000000000000",
                ep.uuid
            ),
            &seed.key,
        )
        .await
        .expect_error(404, "not_found");
    // Scopes: reading needs webhooks:read, starting needs webhooks:write.
    let reader = env.key(seed.org_id, "webhooks:read").await;
    recover(&server, &reader, &ep.uuid, json!({"since": at(-60_000)}))
        .await
        .expect_error(403, "insufficient_scope");
    server
        .get(&format!("{ENDPOINTS}/{}/recoveries/{id}", ep.uuid), &reader)
        .await
        .expect(200);
    // Idempotency-Key: the same key and body start one recovery.
    let body = json!({"since": at(-60_000)});
    let a = server
        .post_with(
            &format!("{ENDPOINTS}/{}/recover", ep.uuid),
            &seed.key,
            &body,
            &[("Idempotency-Key", "recover-once")],
        )
        .await
        .expect(202);
    let b = server
        .post_with(
            &format!("{ENDPOINTS}/{}/recover", ep.uuid),
            &seed.key,
            &body,
            &[("Idempotency-Key", "recover-once")],
        )
        .await
        .expect(202);
    assert_eq!(a.body["recovery_id"], b.body["recovery_id"]);
}

/// kill -9 in the middle of a recovery (one event per page, a pause between pages): after a
/// restart it completes, and every event arrives exactly once.
async fn recovery_survives_kill_9(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let config = settings(&[
        ("SWITCHBOARD_RECOVERY_PAGE_SIZE", "1"),
        ("SWITCHBOARD_RECOVERY_PAGE_INTERVAL", "150ms"),
    ]);
    let mut server = env.start(&config).await;
    let rx = Receiver::start().await;
    let since = at(-1000);
    for i in 0..12 {
        send(
            &server,
            &seed.key,
            &format!("+49151234501{i:02}"),
            &format!("m{i}"),
        )
        .await;
    }
    // Created after the events: everything comes from the recovery.
    let ep = Api::new(&server, &seed.key)
        .create(&rx.url("/ep"), &["message.sent"])
        .await;
    let started = recover(&server, &seed.key, &ep.uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    let id = started["recovery_id"].as_str().unwrap().to_owned();
    // Kill it part-way through.
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = server
            .get(
                &format!("{ENDPOINTS}/{}/recoveries/{id}", ep.uuid),
                &seed.key,
            )
            .await
            .expect(200)
            .body;
        if r["deliveries_queued"].as_i64().unwrap() >= 2 {
            assert_eq!(r["status"], "running", "killed before it completed: {r:#}");
            break;
        }
        assert!(tokio::time::Instant::now() < end, "{r:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill().await;
    let server = env.start(&config).await;
    let done = wait_recovery(&server, &seed.key, &ep.uuid, &id).await;
    assert_eq!(done["events_matched"], 12, "{done:#}");
    assert_eq!(done["deliveries_queued"], 12, "{done:#}");
    let arrivals = distinct_arrivals(&rx, "/ep", 12).await;
    assert_eq!(arrivals.len(), 12);
    // One delivery per event, all delivered: after that no attempt can follow, so the
    // receiver's log below is final.
    let rows = ledger(&server, &seed.key, &ep.uuid).await;
    assert_eq!(rows.len(), 12);
    assert!(rows.iter().all(|d| d["trigger"] == "recovery"));
    let api = Api::new(&server, &seed.key);
    let mut delivered = HashMap::new();
    for d in &rows {
        let id = d["delivery_id"].as_str().unwrap();
        delivered.insert(id.to_owned(), api.wait_status(id, "delivered").await);
    }
    // Each event reached the receiver through its one delivery. Delivery is at least once
    // across a crash: an attempt in flight at the kill reached the receiver but its outcome
    // was never recorded, so it is taken over after its lease and made again. Such a repeat
    // is the same delivery (same id, a later attempt number), and its lost attempt is
    // logged as `attempt_interrupted`; nothing else may arrive twice.
    for (event, reqs) in &arrivals {
        let ids: HashSet<String> = reqs.iter().map(ReceivedRequest::delivery).collect();
        assert_eq!(ids.len(), 1, "event {event} came in one delivery: {ids:?}");
        if reqs.len() > 1 {
            let d = &delivered[ids.iter().next().unwrap()];
            let attempts: HashSet<u32> = reqs.iter().map(ReceivedRequest::attempt).collect();
            assert_eq!(
                attempts.len(),
                reqs.len(),
                "a repeat is a later attempt: {d:#}"
            );
            let interrupted = d["attempt_log"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["error_code"] == "attempt_interrupted")
                .count();
            assert_eq!(
                interrupted,
                reqs.len() - 1,
                "repeated only after a kill: {d:#}"
            );
        }
    }
}

async fn bulk_retry_redelivers_what_was_not_delivered(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&settings(&[("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "100")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/ep", Behaviour::Status(400));
    let ep = api.create(&rx.url("/ep"), &["message.sent"]).await;
    let ok = api.create(&rx.url("/ok"), &["message.sent"]).await;
    for i in 0..5 {
        send(
            &server,
            &seed.key,
            &format!("+49151234502{i:02}"),
            &format!("b{i}"),
        )
        .await;
    }
    rx.wait_for("/ep", 5, WAIT).await;
    rx.wait_for("/ok", 5, WAIT).await;
    for d in ledger(&server, &seed.key, &ep.uuid).await {
        api.wait_status(d["delivery_id"].as_str().unwrap(), "failed")
            .await;
    }

    // At least status or endpoint_uuid; bad values are named.
    let retry = |body: Value| {
        let server = &server;
        let key = seed.key.clone();
        async move {
            server
                .post(&format!("{DELIVERIES}/retry"), &key, &body)
                .await
        }
    };
    retry(json!({}))
        .await
        .expect_error(422, "validation_failed");
    retry(json!({"status": "delivered"}))
        .await
        .expect_error(422, "validation_failed");
    retry(json!({"endpoint_uuid": "0192f7a0-0000-7000-8000-000000000000"}))
        .await
        .expect_error(404, "not_found");
    let r = retry(json!({"status": "failed", "colour": "red"})).await;
    assert!(r.status.is_client_error(), "{}", r.text);

    rx.respond("/ep", Behaviour::Status(200));
    let r = retry(json!({"endpoint_uuid": ep.uuid, "status": "failed"}))
        .await
        .expect(202);
    assert_eq!(r.body["retried"], 5);
    let delivered = rx
        .wait_until(WAIT, |rs| {
            rs.iter()
                .filter(|r| r.path == "/ep" && r.attempt() == 2)
                .count()
                >= 5
        })
        .await;
    let second: HashSet<String> = delivered
        .iter()
        .filter(|r| r.path == "/ep" && r.attempt() == 2)
        .map(event_id)
        .collect();
    assert_eq!(second.len(), 5);
    for d in ledger(&server, &seed.key, &ep.uuid).await {
        let d = api
            .wait_status(d["delivery_id"].as_str().unwrap(), "delivered")
            .await;
        assert_eq!(d["trigger"], "manual");
    }
    // Nothing left to retry; the other endpoint's deliveries were never touched.
    let r = retry(json!({"endpoint_uuid": ep.uuid})).await.expect(202);
    assert_eq!(r.body["retried"], 0);
    assert_eq!(rx.requests("/ok").len(), 5);
    let _ = ok;
}
