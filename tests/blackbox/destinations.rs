//! Issue 35: endpoint controls and destinations (CONVENTIONS "Destinations, filters,
//! throttles, endpoint authentication"): filters on the envelope, against real local
//! receivers, on both backends.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::receivers::{Behaviour, ReceivedRequest, Receiver};
use crate::recovery::{ledger as ledger_of, send};
use crate::support::{Backend, Resp, Server, TestEnv};
use crate::webhooks::{Api, fast, signed_by};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const WAIT: Duration = Duration::from_secs(30);

both_backends!(
    filters_choose_the_events_an_endpoint_receives,
    recoveries_apply_the_endpoint_filter,
    malformed_filters_are_refused_naming_filter,
    overrides_are_validated_answered_and_changed_by_put,
    retry_delays_and_timeout_override_the_deployments,
    max_per_second_spreads_deliveries,
    max_per_second_holds_across_two_instances_through_redis,
    redis_stream_endpoints_receive_signed_envelopes,
    broker_targets_are_validated_and_credentials_sealed,
    an_unreachable_broker_is_retried_like_an_https_endpoint,
    nats_jetstream_endpoints_receive_acknowledged_signed_envelopes,
    rabbitmq_endpoints_receive_confirmed_signed_envelopes,
    oauth2_client_credentials_tokens_are_cached_and_refreshed_once_after_a_401,
);

/// Creates an endpoint from a whole body; returns the answer (201 expected).
async fn create(server: &Server, key: &str, body: Value) -> Resp {
    server.post(ENDPOINTS, key, &body).await
}

/// The text bodies of the `message.sent` envelopes received on `path`, sorted.
fn texts(rx: &Receiver, path: &str) -> Vec<String> {
    let mut t: Vec<String> = rx
        .requests(path)
        .iter()
        .map(|r| {
            r.json()["data"]["message"]["text"]["body"]
                .as_str()
                .expect("a text message.sent")
                .to_owned()
        })
        .collect();
    t.sort();
    t
}

fn field_issues(r: &Resp) -> Vec<(String, String)> {
    r.body["error"]["details"]["fields"]
        .as_array()
        .expect("details.fields")
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().to_owned(),
                f["issue"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
async fn filters_choose_the_events_an_endpoint_receives(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;

    // Every message.sent, unfiltered: the witness that every event was written.
    let all = api.create(&rx.url("/all"), &["message.sent"]).await;
    let in_list = json!({
        "data.message.text.body": {"$in": ["alpha", "gamma"]},
        "channel.type": "sandbox",
        "metadata.occurred_at": {"$gte": "2020-01-01T00:00:00Z"},
    });
    let listed = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/listed"), "events": ["message.sent"], "filter": in_list}),
    )
    .await
    .expect(201);
    assert_eq!(listed.body["filter"], in_list, "the filter is answered");
    let listed_secret = listed.body["signing_secret"].as_str().unwrap().to_owned();
    let listed = listed.body["uuid"].as_str().unwrap().to_owned();
    let either = json!({"$or": [
        {"data.message.text.body": "beta"},
        {"metadata.occurred_at": {"$lt": "2000-01-01T00:00:00Z"}},
    ]});
    let or = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/or"), "events": ["message.sent"], "filter": either}),
    )
    .await
    .expect(201);
    let or = or.body["uuid"].as_str().unwrap().to_owned();
    // A filter nothing matches: the endpoint receives nothing at all.
    let none = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/none"), "events": ["message.sent"],
               "filter": {"channel.type": {"$nin": ["sandbox"]}}}),
    )
    .await
    .expect(201);
    let none = none.body["uuid"].as_str().unwrap().to_owned();
    assert_eq!(api.get_endpoint(&or).await["filter"], either);
    assert_eq!(api.get_endpoint(&all.uuid).await["filter"], Value::Null);

    for text in ["alpha", "beta", "gamma"] {
        send(&server, &seed.key, "+4915123400001", text).await;
    }
    rx.wait_for("/all", 3, WAIT).await;
    rx.wait_for("/listed", 2, WAIT).await;
    rx.wait_for("/or", 1, WAIT).await;
    // Deliveries are written with their event: once `/all` has all three, the ledger of every
    // endpoint is complete.
    let ledger = |e: String| {
        let server = &server;
        let key = &seed.key;
        async move { ledger_of(server, key, &e).await }
    };
    assert_eq!(ledger(all.uuid.clone()).await.len(), 3);
    assert_eq!(
        ledger(listed.clone()).await.len(),
        2,
        "no delivery for the event that does not match"
    );
    assert_eq!(ledger(or.clone()).await.len(), 1);
    assert!(ledger(none.clone()).await.is_empty());
    assert_eq!(texts(&rx, "/listed"), vec!["alpha", "gamma"]);
    assert_eq!(texts(&rx, "/or"), vec!["beta"]);
    assert!(rx.requests("/none").is_empty());
    for r in rx.requests("/listed") {
        assert!(
            signed_by(&listed_secret, &r),
            "a filtered delivery is signed"
        );
    }

    // PUT replaces the filter; `null` removes it.
    let beta_only = json!({"data.message.text.body": {"$eq": "beta"}});
    let r = api
        .put(&listed, json!({"filter": beta_only}))
        .await
        .expect(200);
    assert_eq!(r.body["filter"], beta_only);
    let r = api.put(&none, json!({"filter": null})).await.expect(200);
    assert_eq!(r.body["filter"], Value::Null);
    for text in ["alpha", "beta"] {
        send(&server, &seed.key, "+4915123400001", text).await;
    }
    rx.wait_for("/all", 5, WAIT).await;
    rx.wait_for("/listed", 3, WAIT).await;
    rx.wait_for("/none", 2, WAIT).await;
    assert_eq!(ledger(listed.clone()).await.len(), 3);
    assert_eq!(texts(&rx, "/listed"), vec!["alpha", "beta", "gamma"]);
    assert_eq!(texts(&rx, "/none"), vec!["alpha", "beta"]);
    assert_eq!(ledger(none).await.len(), 2);
    // The other filters are untouched by the PUTs.
    assert_eq!(api.get_endpoint(&or).await["filter"], either);
    assert_eq!(ledger(or).await.len(), 2);
}

async fn recoveries_apply_the_endpoint_filter(backend: Backend) {
    use crate::recovery::{at, recover, wait_recovery};
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let since = at(-1000);
    // Disabled from the start: the events below are not written for it.
    let e = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/later"), "events": ["message.sent"], "status": "disabled",
               "filter": {"data.message.text.body": {"$in": ["keep 1", "keep 2"]}}}),
    )
    .await
    .expect(201)
    .body;
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    for text in ["keep 1", "drop 1", "keep 2", "drop 2"] {
        send(&server, &seed.key, "+4915123400005", text).await;
    }
    assert!(ledger_of(&server, &seed.key, &uuid).await.is_empty());
    api.put(&uuid, json!({"status": "active"}))
        .await
        .expect(200);
    let started = recover(&server, &seed.key, &uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    let id = started["recovery_id"].as_str().unwrap().to_owned();
    let done = wait_recovery(&server, &seed.key, &uuid, &id).await;
    assert_eq!(done["events_matched"], 2, "{done:#}");
    assert_eq!(done["deliveries_queued"], 2, "{done:#}");
    rx.wait_for("/later", 2, WAIT).await;
    assert_eq!(texts(&rx, "/later"), vec!["keep 1", "keep 2"]);
    let ledger = ledger_of(&server, &seed.key, &uuid).await;
    assert_eq!(
        ledger.len(),
        2,
        "no delivery for the events the filter refuses"
    );
    for d in &ledger {
        assert_eq!(d["trigger"], "recovery");
    }
}

async fn malformed_filters_are_refused_naming_filter(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let url = "https://hooks.example.com/x";

    for (filter, says) in [
        (json!({"data.x": {"$regex": "a"}}), "$regex"),
        (json!({"$nor": [{"a": 1}]}), "$nor"),
        (json!({"$and": {"a": 1}}), "list"),
        (json!({"a": {"$gt": "yesterday"}}), "RFC 3339"),
        (json!({"a": {"b": 1}}), "not an operator"),
        (json!(["a"]), "object"),
        (json!("channel.type"), "object"),
    ] {
        let r = create(
            &server,
            &seed.key,
            json!({"url": url, "events": ["message.sent"], "filter": filter}),
        )
        .await
        .expect_error(422, "validation_failed");
        let issues = field_issues(&r);
        assert_eq!(issues.len(), 1, "{filter}: {issues:?}");
        assert_eq!(issues[0].0, "filter", "{filter}");
        assert!(issues[0].1.contains(says), "{filter}: {}", issues[0].1);
    }
    // Every broken field at once.
    let r = create(
        &server,
        &seed.key,
        json!({"url": url, "events": ["nope.x"], "filter": {"a": {"$like": 1}}}),
    )
    .await
    .expect_error(422, "validation_failed");
    let fields: Vec<String> = field_issues(&r).into_iter().map(|f| f.0).collect();
    assert!(fields.contains(&"filter".to_owned()), "{fields:?}");
    assert!(fields.contains(&"events[0]".to_owned()), "{fields:?}");

    // PUT is checked the same way and changes nothing when refused.
    let good = json!({"event": "message.sent"});
    let e = create(
        &server,
        &seed.key,
        json!({"url": url, "events": ["message.sent"], "filter": good}),
    )
    .await
    .expect(201);
    let uuid = e.body["uuid"].as_str().unwrap();
    let r = api
        .put(uuid, json!({"filter": {"a": {"$exists": "yes"}}}))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(field_issues(&r)[0].0, "filter");
    assert_eq!(api.get_endpoint(uuid).await["filter"], good);

    // The OpenAPI document describes the field on create, update and the endpoint view.
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    for schema in ["CreateEndpointBody", "UpdateEndpointBody", "EndpointOut"] {
        let p = &doc["components"]["schemas"][schema]["properties"]["filter"];
        assert!(p.is_object(), "{schema} documents filter: {p}");
    }
    let described =
        doc["components"]["schemas"]["CreateEndpointBody"]["properties"]["filter"]["description"]
            .as_str()
            .unwrap_or_default();
    assert!(described.contains("$in"), "{described}");
}

// ---------------------------------------------------------------------------------------------
// Overrides and throttle.

async fn overrides_are_validated_answered_and_changed_by_put(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let url = "https://hooks.example.com/x";

    // Every field out of range at once, each named.
    let r = create(
        &server,
        &seed.key,
        json!({"url": url, "events": ["*"], "timeout": "31s",
               "retry_delays": ["1s", "500ms", "73h"], "max_per_second": 0}),
    )
    .await
    .expect_error(422, "validation_failed");
    let mut fields: Vec<String> = field_issues(&r).into_iter().map(|f| f.0).collect();
    fields.sort();
    assert_eq!(
        fields,
        vec![
            "max_per_second",
            "retry_delays[1]",
            "retry_delays[2]",
            "timeout"
        ]
    );
    for (body, field) in [
        (json!({"timeout": "999ms"}), "timeout"),
        (json!({"timeout": "soon"}), "timeout"),
        (json!({"retry_delays": []}), "retry_delays"),
        (json!({"retry_delays": vec!["1s"; 11]}), "retry_delays"),
        (json!({"max_per_second": 10_001}), "max_per_second"),
        (json!({"max_per_second": -1}), "max_per_second"),
    ] {
        let mut full = json!({"url": url, "events": ["*"]});
        full.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let r = create(&server, &seed.key, full)
            .await
            .expect_error(422, "validation_failed");
        let issues = field_issues(&r);
        assert_eq!(issues.len(), 1, "{body}: {issues:?}");
        assert_eq!(issues[0].0, field, "{body}");
    }

    // In range: stored and answered; unset: null.
    let e = create(
        &server,
        &seed.key,
        json!({"url": url, "events": ["*"], "timeout": "1s",
               "retry_delays": ["1s", "90s", "72h"], "max_per_second": 10_000}),
    )
    .await
    .expect(201)
    .body;
    assert_eq!(e["timeout"], "1s");
    // Answered in the largest unit that is exact.
    assert_eq!(e["retry_delays"], json!(["1s", "90s", "3d"]));
    assert_eq!(e["max_per_second"], 10_000);
    let uuid = e["uuid"].as_str().unwrap();
    let plain = create(&server, &seed.key, json!({"url": url, "events": ["*"]}))
        .await
        .expect(201)
        .body;
    for f in ["timeout", "retry_delays", "max_per_second"] {
        assert_eq!(plain[f], Value::Null, "{f}");
    }

    // PUT changes each, refuses out of range without changing anything, and null restores.
    let r = api
        .put(
            uuid,
            json!({"timeout": "30s", "retry_delays": ["5s"], "max_per_second": 1}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["timeout"], "30s");
    assert_eq!(r.body["retry_delays"], json!(["5s"]));
    assert_eq!(r.body["max_per_second"], 1);
    let r = api
        .put(uuid, json!({"timeout": "1m", "max_per_second": 20_000}))
        .await
        .expect_error(422, "validation_failed");
    let mut fields: Vec<String> = field_issues(&r).into_iter().map(|f| f.0).collect();
    fields.sort();
    assert_eq!(fields, vec!["max_per_second", "timeout"]);
    let now = api.get_endpoint(uuid).await;
    assert_eq!(now["timeout"], "30s");
    assert_eq!(now["max_per_second"], 1);
    let r = api
        .put(
            uuid,
            json!({"timeout": null, "retry_delays": null, "max_per_second": null}),
        )
        .await
        .expect(200);
    for f in ["timeout", "retry_delays", "max_per_second"] {
        assert_eq!(r.body[f], Value::Null, "{f}");
    }

    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    for schema in ["CreateEndpointBody", "UpdateEndpointBody", "EndpointOut"] {
        for f in ["timeout", "retry_delays", "max_per_second"] {
            let p = &doc["components"]["schemas"][schema]["properties"][f];
            assert!(p.is_object(), "{schema} documents {f}: {p}");
        }
    }
}

/// The ledger's view of a delivery once it has ended.
async fn finished(api: &Api<'_>, id: &str) -> Value {
    api.wait_delivery(id, "finished", |d| {
        ["delivered", "failed", "retries_exhausted"].contains(&d["status"].as_str().unwrap_or(""))
    })
    .await
}

async fn retry_delays_and_timeout_override_the_deployments(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    // The deployment: 3 retries 100-300 ms apart, a 2 s time limit.
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/own-delays", Behaviour::Status(500));
    rx.respond("/deployment-delays", Behaviour::Status(500));
    let own = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/own-delays"), "events": ["*"], "retry_delays": ["1s", "2s"]}),
    )
    .await
    .expect(201)
    .body;
    let deployment = api.create(&rx.url("/deployment-delays"), &["*"]).await;
    let (own_delivery, _) = api.test(own["uuid"].as_str().unwrap()).await;
    let (deployment_delivery, _) = api.test(&deployment.uuid).await;

    let d = finished(&api, &deployment_delivery).await;
    assert_eq!(d["status"], "retries_exhausted");
    assert_eq!(
        d["attempts"], 4,
        "the deployment's three delays: four attempts"
    );
    let d = finished(&api, &own_delivery).await;
    assert_eq!(d["status"], "retries_exhausted");
    assert_eq!(
        d["attempts"], 3,
        "the endpoint's two delays: three attempts"
    );
    // (Only the test delivery: `webhook.*` events about the other endpoint come here too.)
    let times: Vec<Instant> = rx
        .requests("/own-delays")
        .iter()
        .filter(|r| r.delivery() == own_delivery)
        .map(|r| r.instant)
        .collect();
    assert_eq!(times.len(), 3);
    // Retries are never early (jitter only delays them).
    assert!(times[1] - times[0] >= Duration::from_secs(1), "{times:?}");
    assert!(times[2] - times[1] >= Duration::from_secs(2), "{times:?}");

    // A shorter time limit than the deployment's fails an answer the deployment would wait
    // for; a longer one waits for an answer the deployment would give up on.
    rx.respond("/short", Behaviour::Slow(Duration::from_millis(1500), 200));
    rx.respond("/long", Behaviour::Slow(Duration::from_millis(3500), 200));
    let short = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/short"), "events": ["*"], "timeout": "1s", "retry_delays": ["1s"]}),
    )
    .await
    .expect(201)
    .body;
    let long = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/long"), "events": ["*"], "timeout": "6s"}),
    )
    .await
    .expect(201)
    .body;
    let (short_delivery, _) = api.test(short["uuid"].as_str().unwrap()).await;
    let (long_delivery, _) = api.test(long["uuid"].as_str().unwrap()).await;
    let d = finished(&api, &long_delivery).await;
    assert_eq!(d["status"], "delivered", "{d:#}");
    assert_eq!(d["attempts"], 1, "{d:#}");
    let d = finished(&api, &short_delivery).await;
    assert_eq!(d["status"], "retries_exhausted", "{d:#}");
    assert_eq!(d["attempts"], 2, "{d:#}");
    let log = d["attempt_log"].as_array().expect("the attempt log");
    assert_eq!(log.len(), 2, "{d:#}");
    for a in log {
        assert_eq!(a["error_code"], "timeout", "{a:#}");
    }
    let short_attempts = rx
        .requests("/short")
        .iter()
        .filter(|r| r.delivery() == short_delivery)
        .count();
    assert_eq!(short_attempts, 2);
}

/// The arrival times of the requests on `path`, in order.
fn arrivals(reqs: &[ReceivedRequest]) -> Vec<Instant> {
    let mut t: Vec<Instant> = reqs.iter().map(|r| r.instant).collect();
    t.sort();
    t
}

/// Asserts that no one-second window holds more than `rate` of the arrivals: the arrival
/// `rate` places after any other is at least a second later.
fn at_most_per_second(t: &[Instant], rate: usize) {
    for (i, w) in t.windows(rate + 1).enumerate() {
        let span = w[rate] - w[0];
        assert!(
            span >= Duration::from_secs(1),
            "arrivals {i}..={}: {} within {span:?}",
            i + rate,
            rate + 1
        );
    }
}

async fn max_per_second_spreads_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let throttled = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/throttled"), "events": ["*"], "max_per_second": 3}),
    )
    .await
    .expect(201)
    .body;
    let free = api.create(&rx.url("/free"), &["*"]).await;
    let throttled = throttled["uuid"].as_str().unwrap().to_owned();
    let n = 12;
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(api.test(&throttled).await.0);
        api.test(&free.uuid).await;
    }
    let started = Instant::now();
    let got = rx.wait_for("/throttled", n, WAIT).await;
    let elapsed = started.elapsed();
    // The unthrottled endpoint is not held up by the throttled one.
    rx.wait_for("/free", n, WAIT).await;
    let t = arrivals(&got);
    assert_eq!(t.len(), n, "each delivery once");
    at_most_per_second(&t, 3);
    // 12 at 3/s: the last at least (12 - 3) / 3 = 3 s after the first.
    assert!(
        t[n - 1] - t[0] >= Duration::from_secs(3),
        "{:?}",
        t[n - 1] - t[0]
    );
    for id in &ids {
        assert_eq!(finished(&api, id).await["status"], "delivered");
    }
    eprintln!(
        "max_per_second 3: {n} deliveries over {:?} (first to last), {elapsed:?} after the last test call",
        t[n - 1] - t[0]
    );
}

async fn max_per_second_holds_across_two_instances_through_redis(backend: Backend) {
    let Some(redis) = crate::support::redis_url() else {
        crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
    };
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut settings: Vec<(&str, &str)> = fast();
    settings.push(("SWITCHBOARD_REDIS_URL", redis.as_str()));
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let api_a = Api::new(&a, &seed.key);
    let api_b = Api::new(&b, &seed.key);
    let rx = Receiver::start().await;
    let e = create(
        &a,
        &seed.key,
        json!({"url": rx.url("/shared"), "events": ["*"], "max_per_second": 2}),
    )
    .await
    .expect(201)
    .body;
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    // Deliveries written through both instances: each claims some (both wake on the writes).
    let n = 10;
    let mut ids = Vec::new();
    for i in 0..n {
        let api = if i % 2 == 0 { &api_a } else { &api_b };
        ids.push(api.test(&uuid).await.0);
    }
    let got = rx.wait_for("/shared", n, WAIT).await;
    let t = arrivals(&got);
    assert_eq!(t.len(), n, "each delivery once");
    at_most_per_second(&t, 2);
    assert!(
        t[n - 1] - t[0] >= Duration::from_secs(4),
        "{:?}",
        t[n - 1] - t[0]
    );
    for id in &ids {
        assert_eq!(finished(&api_a, id).await["status"], "delivered");
    }
}

// ---------------------------------------------------------------------------------------------
// Broker destinations.

/// A stream entry: its id and its fields.
type StreamEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// The entries of a Redis stream, as `ReceivedRequest`s (fields but `body` as headers), oldest
/// first.
async fn stream_entries(redis_url: &str, stream: &str) -> Vec<ReceivedRequest> {
    let client = redis::Client::open(redis_url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let entries: Vec<StreamEntry> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(id, fields)| {
            let mut headers = HashMap::new();
            let mut body = Vec::new();
            for (k, v) in fields {
                if k == b"body" {
                    body = v;
                } else {
                    headers.insert(String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap());
                }
            }
            ReceivedRequest {
                path: id,
                method: "XADD".into(),
                headers,
                body,
                at: SystemTime::now(),
                instant: Instant::now(),
            }
        })
        .collect()
}

async fn wait_stream(redis_url: &str, stream: &str, n: usize) -> Vec<ReceivedRequest> {
    let end = Instant::now() + WAIT;
    loop {
        let got = stream_entries(redis_url, stream).await;
        if got.len() >= n || Instant::now() > end {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn redis_stream_endpoints_receive_signed_envelopes(backend: Backend) {
    let Some(redis) = crate::support::redis_url() else {
        crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
    };
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let prefix = format!("sbtest:{}", uuid::Uuid::new_v4());
    let e = create(
        &server,
        &seed.key,
        json!({"type": "redis_stream", "events": ["message.sent"],
               "target": {"url": redis, "stream": format!("{prefix}:{{namespace}}:{{channel_slug}}"), "max_len": 1000}}),
    )
    .await
    .expect(201)
    .body;
    assert_eq!(e["type"], "redis_stream");
    assert_eq!(e["target"]["max_len"], 1000);
    let secret = e["signing_secret"].as_str().unwrap().to_owned();
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    // An HTTPS endpoint beside it: the broker message is the same envelope.
    let rx = Receiver::start().await;
    api.create(&rx.url("/https"), &["message.sent"]).await;

    for text in ["one", "two", "three"] {
        send(&server, &seed.key, "+4915123400002", text).await;
    }
    let stream = format!("{prefix}:message:sandbox");
    let got = wait_stream(&redis, &stream, 3).await;
    assert_eq!(got.len(), 3, "each delivery once, in {stream}");
    let https = rx.wait_for("/https", 3, WAIT).await;
    let mut delivery_ids = std::collections::HashSet::new();
    for m in &got {
        assert!(
            signed_by(&secret, m),
            "the signature verifies over the body"
        );
        assert_eq!(m.header("content-type"), Some("application/json"));
        assert_eq!(m.header("x-switchboard-event"), Some("message.sent"));
        assert_eq!(m.header("webhook-id"), m.header("x-switchboard-delivery"));
        assert!(m.header("webhook-signature").unwrap().starts_with("v1,"));
        assert!(m.header("traceparent").is_some());
        assert!(delivery_ids.insert(m.header("x-switchboard-delivery").unwrap().to_owned()));
        // Byte for byte the envelope an HTTPS endpoint receives for the same event.
        let event_id = m.json()["metadata"]["event_id"].clone();
        let same = https
            .iter()
            .find(|r| r.json()["metadata"]["event_id"] == event_id)
            .expect("the same event over HTTPS");
        assert_eq!(same.body, m.body);
    }
    // The ledger: delivered, the attempt's excerpt the entry id.
    let ledger = ledger_of(&server, &seed.key, &uuid).await;
    assert_eq!(ledger.len(), 3);
    for d in &ledger {
        let id = d["delivery_id"].as_str().unwrap();
        let d = finished(&api, id).await;
        assert_eq!(d["status"], "delivered", "{d:#}");
        let excerpt = d["attempt_log"][0]["response_body_excerpt"]
            .as_str()
            .unwrap();
        assert!(excerpt.starts_with(&format!("XADD {stream} ")), "{excerpt}");
        let entry = excerpt.rsplit(' ').next().unwrap();
        assert!(got.iter().any(|m| m.path == entry), "{entry}");
    }
    // A test event goes there too.
    let (test_delivery, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &test_delivery).await["status"], "delivered");
    let test_stream = format!("{prefix}:integration:none");
    let got = wait_stream(&redis, &test_stream, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].header("x-switchboard-delivery"),
        Some(test_delivery.as_str())
    );
    assert!(signed_by(&secret, &got[0]));

    let client = redis::Client::open(redis.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(&test_stream)
        .query_async(&mut conn)
        .await
        .unwrap();
}

async fn broker_targets_are_validated_and_credentials_sealed(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let issues_of = |r: &Resp| -> Vec<String> {
        let mut f: Vec<String> = field_issues(r).into_iter().map(|f| f.0).collect();
        f.sort();
        f
    };
    for (body, fields) in [
        (
            json!({"type": "rabbitmq", "events": ["*"], "target": {"url": "amqp://n.example.com", "exchange": "a b"}}),
            vec!["target.exchange", "target.routing_key"],
        ),
        (
            json!({"type": "nats_jetstream", "events": ["*"], "target": {"url": "redis://n.example.com", "stream": "x"}}),
            vec!["target.stream", "target.subject", "target.url"],
        ),
        (json!({"type": "sqs", "events": ["*"]}), vec!["type"]),
        (
            json!({"type": "redis_stream", "events": ["*"]}),
            vec!["target"],
        ),
        (
            json!({"type": "redis_stream", "events": ["*"], "url": "https://a.example.com",
                   "target": {"url": "redis://r.example.com", "stream": "s"}}),
            vec!["url"],
        ),
        (
            json!({"type": "redis_stream", "events": ["*"],
                   "target": {"url": "https://r.example.com", "stream": "{nope}", "max_len": 0, "extra": 1}}),
            vec![
                "target.extra",
                "target.max_len",
                "target.stream",
                "target.url",
            ],
        ),
        (
            json!({"events": ["*"], "url": "https://a.example.com", "target": {"url": "redis://r.example.com"}}),
            vec!["target"],
        ),
    ] {
        let r = create(&server, &seed.key, body.clone())
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(issues_of(&r), fields, "{body}");
    }

    // Credentials are sealed and answered masked, on create, read and list.
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let e = create(
        &server,
        &seed.key,
        json!({"type": "redis_stream", "events": ["*"],
               "target": {"url": format!("redis://queue:{password}@r.example.com:6379/2"), "stream": "events"}}),
    )
    .await
    .expect(201)
    .body;
    let masked = "redis://queue:***@r.example.com:6379/2";
    assert_eq!(e["target"]["url"], masked);
    assert_eq!(e["target"]["max_len"], 100_000, "the default");
    assert_eq!(e["url"], masked);
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    assert_eq!(api.get_endpoint(&uuid).await["target"]["url"], masked);
    // PUT replaces the target; url stays refused.
    let r = api
        .put(
            &uuid,
            json!({"target": {"url": format!("redis://:{password}@r2.example.com"), "stream": "{event}", "max_len": 5}}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["target"]["url"], "redis://:***@r2.example.com");
    assert_eq!(r.body["target"]["stream"], "{event}");
    let r = api
        .put(&uuid, json!({"url": "https://a.example.com/x"}))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(issues_of(&r), vec!["url"]);
    let listed = server
        .get("/api/v1/integrations/webhook-endpoints", &seed.key)
        .await
        .expect(200)
        .body
        .to_string();
    assert!(!listed.contains(&password));
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    for schema in ["CreateEndpointBody", "EndpointOut"] {
        for f in ["type", "target"] {
            let p = &doc["components"]["schemas"][schema]["properties"][f];
            assert!(p.is_object(), "{schema} documents {f}: {p}");
        }
    }
    assert_not_in_clear(&env, &password).await;
}

/// The database holds `secret` nowhere in clear.
pub(crate) async fn assert_not_in_clear(env: &TestEnv, secret: &str) {
    match env.backend {
        Backend::Sqlite => {
            let mut scanned = 0;
            for entry in std::fs::read_dir(env.dir.path()).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if !name.starts_with("switchboard.db") {
                    continue;
                }
                let bytes = std::fs::read(&path).unwrap();
                scanned += bytes.len();
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "the credential is in clear in {name}"
                );
            }
            assert!(scanned > 0, "the database files were scanned");
        }
        Backend::Postgres => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&env.database_url)
                .await
                .unwrap();
            for table in ["webhook_endpoints", "org_events", "events"] {
                let rows: Vec<String> =
                    sqlx::query_scalar(&format!("SELECT row_to_json(t)::text FROM {table} t"))
                        .fetch_all(&mut c)
                        .await
                        .unwrap();
                for r in rows {
                    assert!(!r.contains(secret), "the credential is in clear in {table}");
                }
            }
        }
    }
}

async fn an_unreachable_broker_is_retried_like_an_https_endpoint(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    // Nothing listens on port 1.
    let e = create(
        &server,
        &seed.key,
        json!({"type": "redis_stream", "events": ["*"],
               "target": {"url": "redis://127.0.0.1:1", "stream": "x"}}),
    )
    .await
    .expect(201)
    .body;
    let (id, _) = api.test(e["uuid"].as_str().unwrap()).await;
    let d = finished(&api, &id).await;
    assert_eq!(d["status"], "retries_exhausted", "{d:#}");
    assert_eq!(d["attempts"], 4, "the deployment's three retries");
    for a in d["attempt_log"].as_array().unwrap() {
        assert_eq!(a["error_code"], "broker_unavailable", "{a:#}");
        assert_eq!(a["response_status"], Value::Null);
    }
}

async fn nats_jetstream_endpoints_receive_acknowledged_signed_envelopes(backend: Backend) {
    const NATS: &str = "nats://127.0.0.1:4222";
    let Ok(client) = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .connect(NATS)
        .await
    else {
        crate::support::skip("NATS with JetStream is not running on 127.0.0.1:4222");
    };
    let js = async_nats::jetstream::new(client);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("SBTEST_{id}");
    let stream = js
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("sbtest.{id}.>")],
            ..Default::default()
        })
        .await
        .expect("JetStream is enabled");

    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let e = create(
        &server,
        &seed.key,
        json!({"type": "nats_jetstream", "events": ["message.sent"],
               "target": {"url": NATS, "subject": format!("sbtest.{id}.{{namespace}}.{{channel_slug}}")}}),
    )
    .await
    .expect(201)
    .body;
    assert_eq!(e["type"], "nats_jetstream");
    let secret = e["signing_secret"].as_str().unwrap().to_owned();
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    for text in ["one", "two", "three"] {
        send(&server, &seed.key, "+4915123400003", text).await;
    }
    let ledger = {
        let end = Instant::now() + WAIT;
        loop {
            let l = ledger_of(&server, &seed.key, &uuid).await;
            if l.len() >= 3 || Instant::now() > end {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(ledger.len(), 3);
    for d in &ledger {
        let d = finished(&api, d["delivery_id"].as_str().unwrap()).await;
        assert_eq!(d["status"], "delivered", "{d:#}");
        let excerpt = d["attempt_log"][0]["response_body_excerpt"]
            .as_str()
            .unwrap();
        assert!(
            excerpt.starts_with(&format!("JetStream {name} seq ")),
            "{excerpt}"
        );
    }
    // Exactly three messages, each a signed envelope with Nats-Msg-Id = its delivery id.
    let mut ids = std::collections::HashSet::new();
    for seq in 1..=3u64 {
        let m = stream.get_raw_message(seq).await.expect("the message");
        assert_eq!(m.subject.as_str(), format!("sbtest.{id}.message.sandbox"));
        let headers: HashMap<String, String> = m
            .headers
            .iter()
            .map(|(k, v)| (k.to_string().to_ascii_lowercase(), v[0].to_string()))
            .collect();
        let r = ReceivedRequest {
            path: m.subject.to_string(),
            method: "PUB".into(),
            headers,
            body: m.payload.to_vec(),
            at: SystemTime::now(),
            instant: Instant::now(),
        };
        assert!(
            signed_by(&secret, &r),
            "the signature verifies over the payload"
        );
        assert_eq!(r.header("nats-msg-id"), r.header("x-switchboard-delivery"));
        assert_eq!(r.header("webhook-id"), r.header("x-switchboard-delivery"));
        assert_eq!(r.json()["event"], "message.sent");
        assert!(ids.insert(r.header("nats-msg-id").unwrap().to_owned()));
    }
    assert!(
        stream.get_raw_message(4).await.is_err(),
        "no fourth message"
    );
    js.delete_stream(&name).await.unwrap();
}

async fn rabbitmq_endpoints_receive_confirmed_signed_envelopes(backend: Backend) {
    use lapin::options::{
        BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
        QueueDeclareOptions, QueueDeleteOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};
    const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let Ok(conn) = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default()).await
    else {
        crate::support::skip("RabbitMQ is not running on 127.0.0.1:5672 (guest/guest)");
    };
    let ch = conn.create_channel().await.unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (exchange, lonely, queue) = (
        format!("sbtest.{id}"),
        format!("sbtest.{id}.unbound"),
        format!("sbtest.{id}.q"),
    );
    for x in [&exchange, &lonely] {
        ch.exchange_declare(
            x,
            lapin::ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch.queue_declare(
        &queue,
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        &queue,
        &exchange,
        "message.#",
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();

    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let e = create(
        &server,
        &seed.key,
        json!({"type": "rabbitmq", "events": ["message.sent"],
               "target": {"url": AMQP, "exchange": exchange, "routing_key": "{namespace}.{event}.{channel_slug}"}}),
    )
    .await
    .expect(201)
    .body;
    assert_eq!(e["type"], "rabbitmq");
    assert_eq!(e["target"]["url"], "amqp://guest:***@127.0.0.1:5672/%2f");
    let secret = e["signing_secret"].as_str().unwrap().to_owned();
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    // No queue takes what goes to the other exchange: the message is returned, the attempt
    // fails and is retried.
    let unroutable = create(
        &server,
        &seed.key,
        json!({"type": "rabbitmq", "events": ["security.*"],
               "target": {"url": AMQP, "exchange": lonely, "routing_key": "x"}}),
    )
    .await
    .expect(201)
    .body;
    for text in ["one", "two", "three"] {
        send(&server, &seed.key, "+4915123400004", text).await;
    }
    let ledger = {
        let end = Instant::now() + WAIT;
        loop {
            let l = ledger_of(&server, &seed.key, &uuid).await;
            if l.len() >= 3 || Instant::now() > end {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(ledger.len(), 3);
    for d in &ledger {
        let d = finished(&api, d["delivery_id"].as_str().unwrap()).await;
        assert_eq!(d["status"], "delivered", "{d:#}");
        let excerpt = d["attempt_log"][0]["response_body_excerpt"]
            .as_str()
            .unwrap();
        assert!(excerpt.starts_with("RabbitMQ confirmed"), "{excerpt}");
    }
    let mut ids = std::collections::HashSet::new();
    for _ in 0..3 {
        let m = ch
            .basic_get(&queue, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("a message in the queue");
        assert_eq!(
            m.delivery.routing_key.as_str(),
            "message.message.sent.sandbox"
        );
        let mut headers = HashMap::new();
        for (k, v) in m
            .delivery
            .properties
            .headers()
            .as_ref()
            .expect("headers")
            .inner()
        {
            if let AMQPValue::LongString(v) = v {
                headers.insert(
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                );
            }
        }
        let r = ReceivedRequest {
            path: queue.clone(),
            method: "AMQP".into(),
            headers,
            body: m.delivery.data.clone(),
            at: SystemTime::now(),
            instant: Instant::now(),
        };
        assert!(
            signed_by(&secret, &r),
            "the signature verifies over the body"
        );
        let delivery = r.header("x-switchboard-delivery").unwrap().to_owned();
        assert_eq!(
            m.delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.as_str()),
            Some(delivery.as_str())
        );
        assert_eq!(r.header("webhook-id"), Some(delivery.as_str()));
        assert!(ids.insert(delivery));
    }
    assert!(
        ch.basic_get(&queue, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .is_none(),
        "no fourth message"
    );
    // The unroutable endpoint: a security event (the key below), returned each time.
    env.admin(&[
        "key",
        "create",
        "--org",
        &seed.org_id.to_string(),
        "--scopes",
        "channels:read",
    ])
    .await;
    let unroutable = unroutable["uuid"].as_str().unwrap();
    let l = {
        let end = Instant::now() + WAIT;
        loop {
            let l = ledger_of(&server, &seed.key, unroutable).await;
            if !l.is_empty() || Instant::now() > end {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(l.len(), 1);
    let d = finished(&api, l[0]["delivery_id"].as_str().unwrap()).await;
    assert_eq!(d["status"], "retries_exhausted", "{d:#}");
    for a in d["attempt_log"].as_array().unwrap() {
        assert_eq!(a["error_code"], "broker_rejected", "{a:#}");
    }

    ch.queue_delete(&queue, QueueDeleteOptions::default())
        .await
        .unwrap();
    for x in [&exchange, &lonely] {
        ch.exchange_delete(x, ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Authentication to HTTPS endpoints.

type TokenCalls = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A local OAuth2 token endpoint: each call gets a new token `tok-N`, valid an hour; records
/// each call's `Authorization` header and form body.
async fn token_server() -> (String, TokenCalls) {
    let calls: TokenCalls = Default::default();
    let c = calls.clone();
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let c = c.clone();
            async move {
                let n = {
                    let mut calls = c.lock().unwrap();
                    calls.push((
                        headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned(),
                        body,
                    ));
                    calls.len()
                };
                axum::Json(json!({"access_token": format!("tok-{n}"), "token_type": "Bearer", "expires_in": 3600}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/token"), calls)
}

async fn oauth2_client_credentials_tokens_are_cached_and_refreshed_once_after_a_401(
    backend: Backend,
) {
    use base64::Engine as _;
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let (token_url, calls) = token_server().await;
    let secret = format!("cs-{}", uuid::Uuid::new_v4().simple());
    let auth = json!({"type": "oauth2_client_credentials", "token_url": token_url,
                      "client_id": "sb-client", "client_secret": secret, "scope": "webhooks write"});

    // Validation: every broken field named.
    for (bad, field) in [
        (json!({"type": "basic"}), "auth.type"),
        (
            json!({"type": "oauth2_client_credentials", "token_url": token_url, "client_id": "x"}),
            "auth.client_secret",
        ),
        (
            json!({"type": "oauth2_client_credentials", "token_url": "ftp://a.example.com",
                   "client_id": "x", "client_secret": "y"}),
            "auth.token_url",
        ),
    ] {
        let r = create(
            &server,
            &seed.key,
            json!({"url": rx.url("/x"), "events": ["*"], "auth": bad}),
        )
        .await
        .expect_error(422, "validation_failed");
        let fields: Vec<String> = field_issues(&r).into_iter().map(|f| f.0).collect();
        assert_eq!(fields, vec![field], "{bad}");
    }

    let e = create(
        &server,
        &seed.key,
        json!({"url": rx.url("/hook"), "events": ["message.sent"], "auth": auth}),
    )
    .await
    .expect(201)
    .body;
    assert_eq!(e["auth"]["type"], "oauth2_client_credentials");
    assert_eq!(e["auth"]["client_id"], "sb-client");
    assert_eq!(e["auth"]["scope"], "webhooks write");
    assert!(e["auth"].get("client_secret").is_none(), "never read back");
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    let signing = e["signing_secret"].as_str().unwrap().to_owned();

    // The first request's token is refused: a new token, and the request again at once.
    rx.script("/hook", vec![Behaviour::Status(401)]);
    let (first, _) = api.test(&uuid).await;
    let d = finished(&api, &first).await;
    assert_eq!(d["status"], "delivered", "{d:#}");
    assert_eq!(d["attempts"], 1, "the repeat is part of the attempt");
    let got = rx.requests("/hook");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].header("authorization"), Some("Bearer tok-1"));
    assert_eq!(got[1].header("authorization"), Some("Bearer tok-2"));
    assert!(signed_by(&signing, &got[1]), "still signed");
    {
        let calls = calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("sb-client:{secret}"))
        );
        for (authorization, body) in calls.iter() {
            assert_eq!(authorization, &basic);
            assert!(body.contains("grant_type=client_credentials"), "{body}");
            assert!(body.contains("scope=webhooks+write"), "{body}");
        }
    }
    // Cached until it expires: the next delivery uses tok-2 without a token call.
    let (second, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &second).await["status"], "delivered");
    let got = rx.requests("/hook");
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].header("authorization"), Some("Bearer tok-2"));
    assert_eq!(calls.lock().unwrap().len(), 2);

    // A second 401 is the attempt's outcome (a 401 is a permanent rejection).
    rx.script(
        "/hook",
        vec![Behaviour::Status(401), Behaviour::Status(401)],
    );
    let (third, _) = api.test(&uuid).await;
    let d = finished(&api, &third).await;
    assert_eq!(d["status"], "failed", "{d:#}");
    assert_eq!(d["attempt_log"][0]["response_status"], 401, "{d:#}");
    let got = rx.requests("/hook");
    assert_eq!(got.len(), 5);
    assert_eq!(got[3].header("authorization"), Some("Bearer tok-2"));
    assert_eq!(got[4].header("authorization"), Some("Bearer tok-3"));
    assert_eq!(calls.lock().unwrap().len(), 3);

    // PUT auth null removes it: no Authorization header any more.
    let r = api.put(&uuid, json!({"auth": null})).await.expect(200);
    assert_eq!(r.body["auth"], Value::Null);
    let (fourth, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &fourth).await["status"], "delivered");
    let got = rx.requests("/hook");
    assert_eq!(got.len(), 6);
    assert_eq!(got[5].header("authorization"), None);
    assert_not_in_clear(&env, &secret).await;
}
