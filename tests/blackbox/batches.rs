//! Issue 19: batch sends, pacing and throttling on WhatsApp Cloud channels, against a fake
//! Graph API that enforces the real limits (throughput per number: 130429; pair rate to one
//! recipient: 131056).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::both_backends;
use crate::fake_providers::{Behaviour, Fake};
use crate::support::{Backend, Resp, Server, TestEnv};

both_backends!(
    a_batch_of_1000_is_paced_and_sent_once,
    a_batch_is_validated_all_or_nothing,
    a_batch_reports_progress_and_emits_each_items_events,
    a_batch_survives_kill_9_and_sends_each_item_at_most_once,
    throttled_sends_are_retried_later_and_131049_fails,
    a_recipient_gets_one_message_per_interval,
    two_instances_share_one_pace_through_redis,
    batch_items_have_their_own_budget,
);

const BATCH: &str = "/api/v1/integrations/messages/batch";
const TEXT: &str = "/api/v1/integrations/messages";
const TEMPLATE: &str = "/api/v1/integrations/messages/template";
const WA_TOKEN: &str = "EAAG-fake-access-token";

fn ikey() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn post(server: &Server, key: &str, path: &str, body: &Value) -> Resp {
    server
        .post_with(path, key, body, &[("Idempotency-Key", &ikey())])
        .await
}

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake, max_per_second: u32) -> i64 {
    let ch = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "WhatsApp",
            "--provider-config",
            &json!({
                "phone_number_id": "1098765",
                "access_token": WA_TOKEN,
                "api_base_url": graph.base_url,
                "max_per_second": max_per_second,
            })
            .to_string(),
        ])
        .await;
    ch["id"].as_i64().unwrap()
}

fn phone(i: usize) -> String {
    format!("+49151{:08}", 10_000_000 + i)
}

fn template_item(channel_id: i64, to: &str, n: usize) -> Value {
    json!({"path": "template", "channel_id": channel_id, "phone": to,
           "template": {"name": "order_update", "language": "en_US",
                        "components": [{"type": "body", "parameters": [{"type": "text", "text": n.to_string()}]}]}})
}

/// Polls the batch until it is completed (or `deadline` passes); returns its last state.
async fn wait_for_batch(server: &Server, key: &str, id: &str, deadline: Duration) -> Value {
    let end = Instant::now() + deadline;
    loop {
        let b = server
            .get(&format!("/api/v1/integrations/messages/batches/{id}"), key)
            .await
            .expect(200)
            .body;
        if b["status"] == "completed" || Instant::now() > end {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn all_messages(server: &Server, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{TEXT}?limit=200&cursor={c}"),
            None => format!("{TEXT}?limit=200"),
        };
        let page = server.get(&path, key).await.expect(200).body;
        out.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

// ---------------------------------------------------------------------------------------------

async fn a_batch_of_1000_is_paced_and_sent_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    // The fake refuses more than 50 sends in any second (130429) and two messages to one
    // recipient within 2 s (131056), as the Graph API does.
    graph.set_limits(Some(50), Some(Duration::from_secs(2)));
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 50).await;
    let server = env
        .start(&[
            ("SWITCHBOARD_RECIPIENT_INTERVAL", "2s"),
            ("SWITCHBOARD_RATE_LIMIT_BATCH_ITEMS", "6000"),
            ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
        ])
        .await;
    // 1 000 items to 200 recipients (5 each).
    let items: Vec<Value> = (0..1000)
        .map(|n| template_item(channel, &phone(n % 200), n))
        .collect();
    let started = Instant::now();
    // Accepting 1 000 items (each checked, all written in one transaction) takes a debug build
    // on a busy two-core machine longer than the client's usual 30 s; how long is the
    // benchmark's business (bench --scenario batch), not this test's.
    let r = server
        .client
        .post(server.url(BATCH))
        .bearer_auth(&seed.key)
        .header("Idempotency-Key", ikey())
        .timeout(Duration::from_secs(120))
        .json(&json!({ "messages": items }))
        .send()
        .await
        .expect("request");
    let r = Server::read(r).await.expect(202);
    assert_eq!(r.body["status"], "queued");
    assert_eq!(r.body["total"], 1000);
    let id = r.body["batch_id"].as_str().unwrap().to_owned();
    // About 25 s alone; the whole suite on two cores has made it take several times that.
    let b = wait_for_batch(&server, &seed.key, &id, Duration::from_secs(240)).await;
    let elapsed = started.elapsed();
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["counts"], json!({"sent": 1000}), "{b}");
    assert!(b["completed_at"].is_string());
    // Paced: no throttling error from the provider, every item sent exactly once, and no
    // faster than the rate allows (1000 / 50 = 20 s; how much longer it takes on a loaded
    // machine is for the benchmark, not this test).
    // The sends leave at evenly spaced slots (a send woken late takes a new slot); the fake
    // timestamps arrivals in its own process, which a loaded two-core machine can stall for
    // a moment, so a send or two may still be seen in the wrong second: those are throttled,
    // retried later and sent once like the rest (checked below).
    let throttled = graph.throttled();
    assert!(
        throttled <= 5,
        "the provider throttled {throttled} sends ({} for the pair rate)",
        graph.pair_throttled()
    );
    eprintln!("throttled by the fake: {throttled}");
    assert_eq!(graph.accepted(), 1000);
    let secs = elapsed.as_secs_f64();
    assert!(secs >= 19.0, "took {secs:.1} s: faster than 50/s");
    eprintln!("1000 batch items at max_per_second 50 ({backend:?}): {secs:.1} s");
    let messages = all_messages(&server, &seed.key).await;
    assert_eq!(messages.len(), 1000);
    let mut ids: Vec<&str> = messages
        .iter()
        .map(|m| m["provider_message_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1000, "each message has its own provider id");
    // Every recipient got its five messages (the fake refused any closer than the interval).
    let received = graph.received().await;
    let mut per_recipient: std::collections::HashMap<String, usize> = Default::default();
    for rec in received.iter().filter(|r| r.path.ends_with("/messages")) {
        *per_recipient
            .entry(rec.body["to"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_recipient.len(), 200);
    assert!(per_recipient.values().all(|n| *n >= 5));
}

async fn a_batch_is_validated_all_or_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let ok = json!({"phone": "+4915123456789", "message": "hi"});
    // Items 1 and 3 are invalid: nothing is queued, each is reported.
    let key = ikey();
    let body = json!({"messages": [
        ok,
        {"phone": "+4915123456789"},
        {"path": "media", "phone": "+4915123456789", "media_type": "image", "media_url": "https://example.com/a.png"},
        {"path": "fax", "phone": "+4915123456789", "message": "x"},
        {"channel_id": 999_999, "phone": "+4915123456789", "message": "x"},
    ]});
    let r = server
        .post_with(BATCH, &seed.key, &body, &[("Idempotency-Key", &key)])
        .await
        .expect_error(422, "validation_failed");
    let items = r.body["error"]["details"]["items"].as_array().unwrap();
    let indexes: Vec<i64> = items.iter().map(|i| i["index"].as_i64().unwrap()).collect();
    assert_eq!(indexes, vec![1, 3, 4], "{}", r.text);
    assert_eq!(items[0]["code"], "validation_failed");
    assert_eq!(items[0]["fields"][0]["field"], "message");
    assert_eq!(items[1]["fields"][0]["field"], "path");
    assert_eq!(items[2]["code"], "invalid_channel");
    assert!(all_messages(&server, &seed.key).await.is_empty());
    // The refusal is not stored: the corrected batch may reuse the key.
    let fixed = json!({"messages": [ok, ok]});
    let r = server
        .post_with(BATCH, &seed.key, &fixed, &[("Idempotency-Key", &key)])
        .await
        .expect(202);
    assert_eq!(r.body["total"], 2);
    // A replay answers the same batch.
    let again = server
        .post_with(BATCH, &seed.key, &fixed, &[("Idempotency-Key", &key)])
        .await
        .expect(202);
    assert_eq!(again.body["batch_id"], r.body["batch_id"]);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    // Sizes, shapes and the key.
    post(&server, &seed.key, BATCH, &json!({"messages": []}))
        .await
        .expect_error(422, "validation_failed");
    let many: Vec<Value> = (0..1001).map(|_| ok.clone()).collect();
    post(&server, &seed.key, BATCH, &json!({ "messages": many }))
        .await
        .expect_error(422, "validation_failed");
    post(&server, &seed.key, BATCH, &json!({"messages": "x"}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(BATCH, &seed.key, &fixed)
        .await
        .expect_error(400, "idempotency_key_missing");
    let reader = env.key(seed.org_id, "messages:read").await;
    post(&server, &reader, BATCH, &fixed)
        .await
        .expect_error(403, "insufficient_scope");
    // Unknown and foreign batches are 404.
    server
        .get(
            &format!(
                "/api/v1/integrations/messages/batches/{}",
                uuid::Uuid::new_v4()
            ),
            &seed.key,
        )
        .await
        .expect_error(404, "not_found");
    server
        .get("/api/v1/integrations/messages/batches/nope", &seed.key)
        .await
        .expect_error(404, "not_found");
    let other = env.seed().await;
    server
        .get(
            &format!(
                "/api/v1/integrations/messages/batches/{}",
                r.body["batch_id"].as_str().unwrap()
            ),
            &other.key,
        )
        .await
        .expect_error(404, "not_found");
}

async fn a_batch_reports_progress_and_emits_each_items_events(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let items: Vec<Value> = (0..5)
        .map(|i| json!({"phone": phone(i), "message": format!("hello {i}")}))
        .collect();
    let r = post(&server, &seed.key, BATCH, &json!({ "messages": items }))
        .await
        .expect(202);
    let id = r.body["batch_id"].as_str().unwrap().to_owned();
    let b = wait_for_batch(&server, &seed.key, &id, Duration::from_secs(30)).await;
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["total"], 5);
    assert_eq!(b["counts"], json!({"sent": 5}));
    assert_eq!(b["batch_id"], id.as_str());
    assert!(b["created_at"].as_str().unwrap().ends_with('Z'));
    // Each item is a message with its usual events: contact.created and message.sent.
    let messages = all_messages(&server, &seed.key).await;
    assert_eq!(messages.len(), 5);
    assert!(messages.iter().all(|m| m["status"] == "sent"));
    // The feed shows an event once every transaction that could come before it has committed:
    // wait for the five.
    let end = Instant::now() + Duration::from_secs(20);
    let names: Vec<String> = loop {
        let events = server
            .get("/api/v1/integrations/event-feed?limit=200", &seed.key)
            .await
            .expect(200)
            .body;
        let names: Vec<String> = events["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_owned())
            .collect();
        let sent = names.iter().filter(|n| *n == "message.sent").count();
        if sent >= 5 || Instant::now() > end {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let count = |n: &str| names.iter().filter(|x| **x == n).count();
    assert_eq!(count("message.sent"), 5, "{names:?}");
    assert_eq!(count("contact.created"), 5, "{names:?}");
    // The journey of an item: accepted, queued, then the provider's answer and sent.
    let uuid = messages[0]["uuid"].as_str().unwrap();
    let j = server
        .get(&format!("{TEXT}/{uuid}"), &seed.key)
        .await
        .expect(200)
        .body;
    let kinds: Vec<String> = j["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| match s["kind"].as_str().unwrap() {
            "status" => format!("status:{}", s["status"].as_str().unwrap()),
            k => k.to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "accepted",
            "status:queued",
            "provider_request",
            "provider_response",
            "status:sent"
        ],
        "{j}"
    );
}

async fn a_batch_survives_kill_9_and_sends_each_item_at_most_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    graph.set_limits(Some(20), None);
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 20).await;
    // Short provider and media time limits: a dead instance's leases expire sooner. The fake
    // reports no statuses here, so a message in flight is not waited for.
    let reads = [
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
        ("SWITCHBOARD_PROVIDER_TIMEOUT", "2s"),
        ("SWITCHBOARD_MEDIA_TIMEOUT", "2s"),
        ("SWITCHBOARD_SEND_OUTCOME_WAIT", "0s"),
    ];
    let mut server = env.start(&reads).await;
    let items: Vec<Value> = (0..100)
        .map(|n| template_item(channel, &phone(n), n))
        .collect();
    let r = post(&server, &seed.key, BATCH, &json!({ "messages": items }))
        .await
        .expect(202);
    let id = r.body["batch_id"].as_str().unwrap().to_owned();
    // Mid-batch (100 items at 20/s take 5 s), the instance dies.
    graph.wait_for_arrivals(30).await;
    server.kill().await;
    let sent_before = graph.accepted();
    assert!(sent_before < 100, "the batch was not interrupted");
    let server = env.start(&reads).await;
    let b = wait_for_batch(&server, &seed.key, &id, Duration::from_secs(120)).await;
    assert_eq!(b["status"], "completed", "{b}");
    let sent = b["counts"]["sent"].as_i64().unwrap_or(0);
    let failed = b["counts"]["failed"].as_i64().unwrap_or(0);
    assert_eq!(sent + failed, 100, "{b}");
    // No item reached the provider twice: every accepted send is one sent message, except
    // those in flight when the instance died, which are failed, not sent again. (The new
    // instance's pace starts afresh without Redis, so the provider may throttle a send or two
    // in the first second: those are retried, not lost.)
    let accepted = graph.accepted() as i64;
    let messages = all_messages(&server, &seed.key).await;
    let unknown = messages
        .iter()
        .filter(|m| m["error"]["code"] == "provider_outcome_unknown")
        .count() as i64;
    assert_eq!(unknown, failed, "only an interrupted call fails");
    assert!(unknown <= 16, "at most one claim's worth was in flight");
    eprintln!("kill -9 mid-batch ({backend:?}): {sent_before} sent before, {unknown} in flight");
    // Each sent message has its own provider id, one per accepted send: no accepted send
    // beyond them but the interrupted calls means no item was sent twice.
    assert!(
        accepted >= sent && accepted <= sent + unknown,
        "accepted {accepted}, sent {sent}, unknown {unknown}"
    );
}

async fn throttled_sends_are_retried_later_and_131049_fails(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 80).await;
    let server = env.start(&[]).await;
    // The provider throttles the first call: the message is kept queued and sent later.
    graph
        .then(Behaviour::Reject {
            status: 400,
            code: 130429,
            message: "(#130429) Rate limit hit".into(),
            details: None,
        })
        .await;
    let r = post(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_id": channel, "phone": "+4915123456789",
                "template": {"name": "order_update", "language": "en_US"}}),
    )
    .await
    .expect(201);
    assert_eq!(r.body["message"]["status"], "queued");
    let uuid = r.body["message"]["uuid"].as_str().unwrap().to_owned();
    let end = Instant::now() + Duration::from_secs(30);
    let message = loop {
        let m = server
            .get(&format!("{TEXT}/{uuid}"), &seed.key)
            .await
            .expect(200)
            .body;
        if m["status"] != "queued" || Instant::now() > end {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(message["status"], "sent", "{message}");
    assert_eq!(graph.arrivals(), 2, "one throttled attempt, one accepted");
    // The journey shows the throttled answer.
    let throttled = message["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "provider_response" && s["code"] == "provider_throttled");
    assert!(throttled, "{message}");
    // 131049 (a marketing message over the user's cap) is not retried: the message fails with
    // the provider's code.
    graph
        .then(Behaviour::Reject {
            status: 400,
            code: 131049,
            message: "This message was not delivered to maintain healthy ecosystem engagement."
                .into(),
            details: None,
        })
        .await;
    let r = post(
        &server,
        &seed.key,
        TEMPLATE,
        &json!({"channel_id": channel, "phone": "+4915123456780",
                "template": {"name": "promo", "language": "en_US"}}),
    )
    .await
    .expect_error(422, "provider_rejected");
    assert_eq!(
        r.body["error"]["details"]["provider_code"], 131049,
        "{}",
        r.text
    );
    assert_eq!(graph.arrivals(), 3);
}

async fn a_recipient_gets_one_message_per_interval(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    graph.set_limits(None, Some(Duration::from_secs(1)));
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 80).await;
    let server = env.start(&[("SWITCHBOARD_RECIPIENT_INTERVAL", "1s")]).await;
    let body = |n: &str| {
        json!({"channel_id": channel, "phone": "+4915123456789",
               "template": {"name": "order_update", "language": "en_US",
                            "components": [{"type": "body", "parameters": [{"type": "text", "text": n}]}]}})
    };
    // The second send to the same recipient waits its interval, then goes: both are sent.
    let started = Instant::now();
    let a = post(&server, &seed.key, TEMPLATE, &body("1"))
        .await
        .expect(201);
    let b = post(&server, &seed.key, TEMPLATE, &body("2"))
        .await
        .expect(201);
    assert_eq!(a.body["message"]["status"], "sent");
    assert_eq!(b.body["message"]["status"], "sent");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(graph.throttled(), 0);
    // Beyond the 10 s bound a send is queued, not refused: 30 s apart.
    drop(server);
    let server = env
        .start(&[("SWITCHBOARD_RECIPIENT_INTERVAL", "30s")])
        .await;
    post(&server, &seed.key, TEMPLATE, &body("3"))
        .await
        .expect(201);
    let started = Instant::now();
    let r = post(&server, &seed.key, TEMPLATE, &body("4"))
        .await
        .expect(201);
    assert_eq!(r.body["message"]["status"], "queued");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a queued send answers at once"
    );
    // Unpaced channel types are not held back: the sandbox sends at once.
    let s1 = post(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": "+4915123456789", "message": "a"}),
    )
    .await
    .expect(201);
    let s2 = post(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": "+4915123456789", "message": "b"}),
    )
    .await
    .expect(201);
    assert_eq!(s1.body["message"]["status"], "sent");
    assert_eq!(s2.body["message"]["status"], "sent");
}

async fn two_instances_share_one_pace_through_redis(backend: Backend) {
    let Some(redis) = crate::support::redis_url() else {
        crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
    };
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    // The provider allows 10 sends a second from the number; so does the channel.
    graph.set_limits(Some(10), None);
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 10).await;
    let settings = [
        ("SWITCHBOARD_REDIS_URL", redis.as_str()),
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
    ];
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    // Two batches at once, one through each instance: both send workers send from the one
    // channel, and their one pace (in Redis) keeps the channel at 10/s.
    let batch = |from: usize| {
        let items: Vec<Value> = (from..from + 30)
            .map(|n| template_item(channel, &phone(n), n))
            .collect();
        json!({ "messages": items })
    };
    let (first, second) = (batch(0), batch(30));
    let started = Instant::now();
    let (ra, rb) = tokio::join!(
        post(&a, &seed.key, BATCH, &first),
        post(&b, &seed.key, BATCH, &second)
    );
    let ids = [
        ra.expect(202).body["batch_id"].as_str().unwrap().to_owned(),
        rb.expect(202).body["batch_id"].as_str().unwrap().to_owned(),
    ];
    for id in &ids {
        let done = wait_for_batch(&a, &seed.key, id, Duration::from_secs(60)).await;
        assert_eq!(done["counts"], json!({"sent": 30}), "{done}");
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(graph.accepted(), 60);
    let throttled = graph.throttled();
    // As in the single-instance test, a send the fake sees in the wrong second is retried;
    // two paces of 10/s each would have been throttled by the dozen.
    assert!(throttled <= 2, "the provider throttled {throttled} sends");
    assert!(secs >= 5.5, "60 sends at 10/s took {secs:.1} s");
    eprintln!(
        "two instances, one pace ({backend:?}): 60 sends in {secs:.1} s, {throttled} throttled"
    );
}

async fn batch_items_have_their_own_budget(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&[("SWITCHBOARD_RATE_LIMIT_BATCH_ITEMS", "5")])
        .await;
    let three = |from: usize| {
        let items: Vec<Value> = (from..from + 3)
            .map(|i| json!({"phone": phone(i), "message": "hi"}))
            .collect();
        json!({ "messages": items })
    };
    post(&server, &seed.key, BATCH, &three(0)).await.expect(202);
    // Three more would make six items within the minute: refused as a whole, nothing queued,
    // and the key is not spent.
    let key = ikey();
    let r = server
        .post_with(BATCH, &seed.key, &three(3), &[("Idempotency-Key", &key)])
        .await
        .expect_error(429, "rate_limited");
    assert_eq!(r.body["error"]["details"]["policy"], "batch_items");
    assert!(r.header("retry-after").is_some());
    // A batch is one request against the sends budget: a single send still goes.
    post(
        &server,
        &seed.key,
        TEXT,
        &json!({"phone": phone(9), "message": "single"}),
    )
    .await
    .expect(201);
    let messages = all_messages(&server, &seed.key).await;
    assert_eq!(messages.len(), 4, "three batch items and one single send");
}
