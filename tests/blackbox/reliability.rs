//! Issue 30: nothing lost, nothing stuck. A webhook answer that stalls or is cut off is not a
//! delivery; a kill -9 in the middle of a paced WhatsApp batch loses and doubles nothing; a
//! rotation with no grace is a cut-over; a stored provider rejection keeps its request id;
//! every list refuses unknown query parameters; every documented metric is there from the
//! first scrape. (A full disk is `disk_full.rs`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::both_backends;
use crate::fake_providers::{Behaviour, Fake};
use crate::fault_proxy::{Proxy, via};
use crate::receivers::Receiver;
use crate::support::{Backend, Server, TestEnv, skip};
use crate::webhooks::{Api, fast, signed_by};

crate::async_tests!(2; a_frozen_redis_delays_nothing_and_limits_still_apply);
crate::sync_tests!(the_failure_modes_table_names_existing_tests);

both_backends!(
    stalled_and_truncated_answers_are_not_deliveries,
    a_rotation_without_grace_is_a_cut_over,
    a_replayed_provider_rejection_keeps_its_request_id,
    every_list_refuses_unknown_query_parameters,
    every_documented_metric_is_exported_from_start_up,
    kill_9_mid_batch_loses_and_doubles_nothing,
);

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const BATCH: &str = "/api/v1/integrations/messages/batch";
const MESSAGES: &str = "/api/v1/integrations/messages";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const APP_SECRET: &str = "wa-app-secret";
const PHONE_NUMBER_ID: &str = "1098765";
const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Webhook answers that never complete

/// How the raw receiver answers: `200` headers announcing a 64-byte body, a part of the body,
/// then nothing more (the connection stays open) or the connection closes.
#[derive(Clone, Copy, Debug)]
enum Answer {
    StallBody,
    CloseMidBody,
}

/// A webhook receiver on a plain TCP socket (a well-behaved HTTP server cannot misbehave this
/// way): it reads each request whole, records its attempt number and answers as told.
struct RawReceiver {
    port: u16,
    attempts: Arc<Mutex<Vec<u32>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawReceiver {
    async fn start(answer: Answer) -> RawReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let seen = attempts.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer_once(stream, answer, seen.clone()));
            }
        });
        RawReceiver {
            port,
            attempts,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn attempts(&self) -> Vec<u32> {
        self.attempts.lock().unwrap().clone()
    }
}

async fn answer_once(mut stream: TcpStream, answer: Answer, attempts: Arc<Mutex<Vec<u32>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    let length = header("content-length:").unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    attempts
        .lock()
        .unwrap()
        .push(header("x-switchboard-attempt:").unwrap_or(0) as u32);
    let _ = stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"received\":")
        .await;
    let _ = stream.flush().await;
    match answer {
        Answer::StallBody => tokio::time::sleep(Duration::from_secs(3600)).await,
        Answer::CloseMidBody => drop(stream),
    }
}

/// A `200` whose body stalls is a `timeout`, one whose connection closes before the body's end
/// is `connection_closed`: neither is a delivery, each is retried until the attempts run out.
async fn stalled_and_truncated_answers_are_not_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    // Attempts time out after 2 s and are retried after 100, 200 and 300 ms.
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    for (answer, code) in [
        (Answer::StallBody, "timeout"),
        (Answer::CloseMidBody, "connection_closed"),
    ] {
        let rx = RawReceiver::start(answer).await;
        let ep = api.create(&rx.url(), &["integration.test"]).await;
        let (delivery, _) = api.test(&ep.uuid).await;
        let d = api
            .wait_delivery(&delivery, "finished", |d| {
                d["status"] == "retries_exhausted" || d["status"] == "delivered"
            })
            .await;
        assert_eq!(
            d["status"], "retries_exhausted",
            "{answer:?}: an answer that never completes is not a delivery: {d:#}"
        );
        let log = d["attempt_log"].as_array().unwrap();
        assert_eq!(log.len(), 4, "{d:#}");
        for a in log {
            assert_eq!(a["error_code"], code, "{answer:?}: {d:#}");
        }
        assert_eq!(rx.attempts(), vec![1, 2, 3, 4], "{answer:?}");
    }
    // A whole answer is still a delivery (the body read to its end).
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ok"), &["integration.test"]).await;
    let (delivery, _) = api.test(&ep.uuid).await;
    api.wait_status(&delivery, "delivered").await;
}

// ---------------------------------------------------------------------------------------------
// Secret cut-over

fn secret_id(secret: &str) -> String {
    format!(
        "sec_{}",
        &hex::encode(Sha256::digest(secret.as_bytes()))[..12]
    )
}

/// After a rotation with an hour's grace, a rotation with `0s` (a leaked secret) leaves only the
/// newest secret signing: the earlier ones' grace ends at once.
async fn a_rotation_without_grace_is_a_cut_over(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;
    let rotate = |grace: &'static str| {
        let path = format!("{ENDPOINTS}/{}/rotate-secret", ep.uuid);
        let server = &server;
        let key = seed.key.clone();
        async move {
            server
                .post(&path, &key, &json!({ "grace_period": grace }))
                .await
                .expect(200)
                .body["signing_secret"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let first = ep.secret.clone();
    let second = rotate("1h").await;
    api.test(&ep.uuid).await;
    let during = rx.wait_for("/ep", 1, WAIT).await.remove(0);
    assert!(signed_by(&first, &during) && signed_by(&second, &during));

    let third = rotate("0s").await;
    let (delivery, _) = api.test(&ep.uuid).await;
    let after = rx.wait_for("/ep", 2, WAIT).await.remove(1);
    let ours = after.header("x-switchboard-signature").unwrap();
    assert_eq!(ours.split(',').count(), 1, "one secret signs: {ours}");
    let standard = after.header("webhook-signature").unwrap();
    assert_eq!(standard.split(' ').count(), 1, "{standard}");
    assert!(signed_by(&third, &after));
    assert!(!signed_by(&second, &after) && !signed_by(&first, &after));
    let d = api.wait_status(&delivery, "delivered").await;
    assert_eq!(
        d["attempt_log"][0]["signed_with"],
        json!([secret_id(&third)])
    );
}

// ---------------------------------------------------------------------------------------------
// A stored rejection's request id

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake, max_per_second: u32) -> Value {
    env.admin(&[
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
            "phone_number_id": PHONE_NUMBER_ID,
            "access_token": WA_TOKEN,
            "app_secret": APP_SECRET,
            "api_base_url": graph.base_url,
            "max_per_second": max_per_second,
        })
        .to_string(),
    ])
    .await
}

fn template(channel_id: i64, phone: &str, n: usize) -> Value {
    json!({"channel_id": channel_id, "phone": phone,
           "template": {"name": "order_update", "language": "en_US",
                        "components": [{"type": "body", "parameters": [{"type": "text", "text": n.to_string()}]}]}})
}

/// A send the provider refuses is recorded, and its 422 stored with the idempotency key (by the
/// sends' group commit, in a task of its own): the replay is the same body, the first
/// request's `request_id` included.
async fn a_replayed_provider_rejection_keeps_its_request_id(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 80).await;
    let server = env.start(&[]).await;
    graph
        .then(Behaviour::Reject {
            status: 400,
            code: 131026,
            message: "(#131026) Message undeliverable".into(),
            details: Some("Receiver is incapable of receiving this message".into()),
        })
        .await;
    let body = template(channel["id"].as_i64().unwrap(), "+4915112345678", 1);
    let key = [("Idempotency-Key", "rejected-once")];
    let path = "/api/v1/integrations/messages/template";
    let first = server
        .post_with(path, &seed.key, &body, &key)
        .await
        .expect_error(422, "provider_rejected");
    let request_id = first.body["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.header("x-request-id"), Some(request_id.as_str()));
    let replay = server
        .post_with(path, &seed.key, &body, &key)
        .await
        .expect_error(422, "provider_rejected");
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_ne!(replay.header("x-request-id"), Some(request_id.as_str()));
    assert_eq!(
        replay.body["error"]["request_id"], request_id,
        "the stored rejection keeps the first request's id: {}",
        replay.text
    );
    assert_eq!(replay.body, first.body, "the replay is the stored body");
    assert_eq!(
        graph.received().await.len(),
        1,
        "the provider was called once"
    );
}

// ---------------------------------------------------------------------------------------------
// Unknown query parameters on every list

/// The GET operations of the OpenAPI document that answer a page (`data` and `has_more`), with
/// the query parameters each declares.
fn list_operations(doc: &Value) -> Vec<(String, Vec<String>)> {
    let schemas = &doc["components"]["schemas"];
    let resolve = |s: &Value| {
        let mut s = s.clone();
        while let Some(r) = s.get("$ref").and_then(Value::as_str) {
            s = schemas[r.rsplit('/').next().unwrap()].clone();
        }
        s
    };
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let Some(get) = ops.get("get") else { continue };
        let Some(content) = get["responses"]["200"]["content"].as_object() else {
            continue;
        };
        let is_page = content.values().any(|c| {
            let s = resolve(&c["schema"]);
            s["properties"].get("data").is_some() && s["properties"].get("has_more").is_some()
        });
        if !is_page {
            continue;
        }
        let params = get["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        out.push((path.clone(), params));
    }
    out
}

/// Every list route of the router (found in the served OpenAPI document, so that a new list is
/// checked too) refuses an unknown query parameter with 400 `invalid_request`, naming it and
/// listing the parameters the list accepts.
async fn every_list_refuses_unknown_query_parameters(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let group = server
        .post("/api/groups", &seed.key, &json!({"name": "Customers"}))
        .await
        .expect(201)
        .body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = server
        .get("/api/v1/integrations/openapi.json", &seed.key)
        .await
        .expect(200)
        .body;
    let lists = list_operations(&doc);
    assert!(
        lists.len() >= 15,
        "the OpenAPI document's lists were found: {lists:?}"
    );
    let mut checked = Vec::new();
    for (template, accepted) in lists {
        let path = template.replace("{id}", &group);
        assert!(
            !path.contains('{'),
            "{template}: a list under a path parameter needs a value in this test"
        );
        server.get(&path, &seed.key).await.expect(200);
        let r = server
            .get(&format!("{path}?limit_typo=10"), &seed.key)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            r.body["error"]["details"]["param"], "limit_typo",
            "{path}: {}",
            r.text
        );
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("limit_typo"), "{path}: {message}");
        for p in &accepted {
            assert!(
                message.contains(p.as_str()),
                "{path}: the message lists `{p}`: {message}"
            );
        }
        checked.push(path);
    }
    eprintln!(
        "{} lists refuse unknown parameters: {checked:?}",
        checked.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics from start-up

/// The metrics of the table in docs/operations.md.
fn documented_metrics() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `switchboard_"))
        .map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            format!("switchboard_{name}")
        })
        .collect()
}

/// The first scrape after start-up has every metric of docs/operations.md, each with its
/// `# HELP`; and every metric it has is documented there.
async fn every_documented_metric_is_exported_from_start_up(backend: Backend) {
    let env = TestEnv::new(backend).await;
    env.seed().await;
    let server = env.start(&[]).await;
    let scrape = server.call(Method::GET, "/metrics", None, None).await.text;
    let documented = documented_metrics();
    assert!(documented.len() >= 30, "{documented:?}");
    let mut missing = Vec::new();
    for name in &documented {
        let help = scrape.contains(&format!("# HELP {name} "));
        let sample = scrape.lines().any(|l| {
            !l.starts_with('#')
                && l.strip_prefix(name.as_str()).is_some_and(|rest| {
                    rest.starts_with(' ')
                        || rest.starts_with('{')
                        || rest.starts_with("_bucket")
                        || rest.starts_with("_count")
                })
        });
        if !help || !sample {
            missing.push(format!("{name} (help: {help}, series: {sample})"));
        }
    }
    assert!(
        missing.is_empty(),
        "documented metrics missing from the first scrape: {missing:#?}\n{scrape}"
    );
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(
                scrape.contains(&format!("# HELP {name} ")),
                "{name} has no # HELP"
            );
            assert!(
                documented.iter().any(|d| d == name),
                "{name} is not documented in docs/operations.md"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// kill -9 in the middle of a paced WhatsApp batch, twenty times

async fn wait_for_batch(server: &Server, key: &str, id: &str, deadline: Duration) -> Value {
    let end = Instant::now() + deadline;
    loop {
        let b = server
            .get(&format!("{MESSAGES}/batches/{id}"), key)
            .await
            .expect(200)
            .body;
        if b["status"] == "completed" || Instant::now() > end {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn all_messages(server: &Server, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{MESSAGES}?limit=200&cursor={c}"),
            None => format!("{MESSAGES}?limit=200"),
        };
        let page = server.get(&path, key).await.expect(200).body;
        out.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

/// The item number a template send carries (its body parameter).
fn item_of(template: &Value) -> usize {
    template["components"][0]["parameters"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("an item number")
}

/// Each round posts a batch of 10 template sends on a channel paced at 5 per second, waits
/// until a few of them reached the provider, and kills the instance with SIGKILL 0, 20 or 40 ms
/// later: while a call is under way (the provider has the message, its answer is not recorded)
/// or while the worker waits for the next slot of the pace (items claimed, not sent); then
/// starts the next instance. The fake Graph API reports each accepted send's `sent` status with
/// its `biz_opaque_callback_data`, as the real one does, retrying while no instance answers. In
/// the end every item is sent exactly once: none is lost (failed as `provider_outcome_unknown`,
/// or never sent) and none reached the provider twice, and each message carries the provider id
/// its send was given. (Not aimed at: a kill between the in-flight mark's commit and the
/// request leaving the process, right at a slot; such a message never reached the provider, no
/// callback comes, and it fails with `provider_outcome_unknown` after the wait, never sent
/// twice: docs/messaging.md.)
async fn kill_9_mid_batch_loses_and_doubles_nothing(backend: Backend) {
    const ROUNDS: usize = 20;
    const ITEMS: usize = 10;
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let channel = whatsapp_channel(&env, seed.org_id, &graph, 5).await;
    let channel_id = channel["id"].as_i64().unwrap();
    let inbound = format!("/inbound/{}", channel["uuid"].as_str().unwrap());
    // Short provider and media time limits: a dead instance's leases expire sooner.
    let settings = [
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
        ("SWITCHBOARD_RATE_LIMIT_BATCH_ITEMS", "100000"),
        ("SWITCHBOARD_PROVIDER_TIMEOUT", "1s"),
        ("SWITCHBOARD_MEDIA_TIMEOUT", "1s"),
        ("SWITCHBOARD_SEND_OUTCOME_WAIT", "30s"),
    ];
    let reached = |round: usize| {
        graph
            .accepted_sends()
            .iter()
            .filter(|(body, _)| item_of(&body["template"]) / ITEMS == round)
            .count()
    };
    let mut batches = Vec::new();
    let mut rounds = Vec::new();
    let mut settled = 0;
    for round in 0..ROUNDS {
        let mut server = env.start(&settings).await;
        if round == 0 {
            graph.report_statuses(&server.url(&inbound), APP_SECRET, PHONE_NUMBER_ID);
        } else {
            graph.redirect_statuses(&server.url(&inbound));
        }
        let items: Vec<Value> = (0..ITEMS)
            .map(|n| {
                let item = round * ITEMS + n;
                let mut t = template(channel_id, &format!("+49151{:08}", 20_000_000 + item), item);
                t["path"] = json!("template");
                t
            })
            .collect();
        let r = server
            .post_with(
                BATCH,
                &seed.key,
                &json!({ "messages": items }),
                &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
            )
            .await
            .expect(202);
        batches.push(r.body["batch_id"].as_str().unwrap().to_owned());
        let k = 2 + round % 4;
        let end = Instant::now() + WAIT;
        while reached(round) < k {
            assert!(
                Instant::now() < end,
                "round {round}: the batch does not start"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(20 * (round % 3) as u64)).await;
        server.kill().await;
        rounds.push((round, reached(round)));
        settled += server
            .logs()
            .matches("settled by the provider's status callback")
            .count();
    }
    let server = env.start(&settings).await;
    graph.redirect_statuses(&server.url(&inbound));
    for id in &batches {
        let b = wait_for_batch(&server, &seed.key, id, Duration::from_secs(120)).await;
        assert_eq!(b["status"], "completed", "{b}");
    }
    settled += server
        .logs()
        .matches("settled by the provider's status callback")
        .count();

    // What reached the provider, and what was recorded.
    let mut calls: HashMap<usize, Vec<String>> = HashMap::new();
    for (body, wamid) in graph.accepted_sends() {
        calls
            .entry(item_of(&body["template"]))
            .or_default()
            .push(wamid);
    }
    let messages = all_messages(&server, &seed.key).await;
    assert_eq!(messages.len(), ROUNDS * ITEMS);
    let doubled: Vec<usize> = (0..ROUNDS * ITEMS)
        .filter(|i| calls.get(i).is_some_and(|c| c.len() > 1))
        .collect();
    let mut lost = Vec::new();
    let mut wrong_id = Vec::new();
    for m in &messages {
        let item = item_of(&m["template"]);
        if m["status"] != "sent" {
            lost.push(format!(
                "item {item}: {} {}; provider calls: {:?}",
                m["status"],
                m["error"],
                calls.get(&item)
            ));
            continue;
        }
        let given = calls.get(&item).and_then(|c| c.first());
        if m["provider_message_id"].as_str() != given.map(String::as_str) {
            wrong_id.push(format!(
                "item {item}: {} but the provider gave {given:?}",
                m["provider_message_id"]
            ));
        }
    }
    eprintln!(
        "kill -9 mid-batch ({backend:?}), {ROUNDS} rounds of {ITEMS} items; items that had \
         reached the provider when each round was killed: {rounds:?}; in flight at a kill and \
         settled by the provider's status callback: {settled}; lost: {}; doubled: {}",
        lost.len(),
        doubled.len()
    );
    assert!(lost.is_empty(), "lost items: {lost:#?}");
    assert!(doubled.is_empty(), "items sent twice: {doubled:?}");
    assert!(wrong_id.is_empty(), "{wrong_id:#?}");
    assert_eq!(
        calls.len(),
        ROUNDS * ITEMS,
        "every item reached the provider"
    );
}

// ---------------------------------------------------------------------------------------------
// A frozen Redis

/// Redis accepts connections and never answers (a frozen server, not a dead one): requests are
/// still served promptly (Redis' calls time out after a second and the instance limits on its
/// own meanwhile), limits still apply, and a warning says why.
async fn a_frozen_redis_delays_nothing_and_limits_still_apply() {
    let Some(redis) = crate::support::redis_url() else {
        skip("SWITCHBOARD_TEST_REDIS_URL is not set");
    };
    let env = TestEnv::new(Backend::Sqlite).await;
    let seed = env.seed().await;
    let target = {
        let u = url::Url::parse(&redis).unwrap();
        format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(6379))
    };
    let proxy = Proxy::start(&target).await;
    let server = env
        .start(&[
            ("SWITCHBOARD_REDIS_URL", &via(&redis, &proxy)),
            ("SWITCHBOARD_RATE_LIMIT_READS", "3"),
        ])
        .await;
    let path = "/api/v1/integrations/channels";
    server.get(path, &seed.key).await.expect(200);

    proxy.freeze();
    let mut statuses = Vec::new();
    let mut slowest = Duration::ZERO;
    for _ in 0..6 {
        let started = Instant::now();
        statuses.push(server.get(path, &seed.key).await.status.as_u16());
        slowest = slowest.max(started.elapsed());
    }
    assert!(statuses.contains(&200), "still served: {statuses:?}");
    assert!(statuses.contains(&429), "still limited: {statuses:?}");
    assert!(
        slowest < Duration::from_secs(5),
        "no request waits on the frozen Redis for long: {slowest:?}"
    );
    assert!(
        server.logs().contains("Redis rate limiting failed"),
        "a warning says why"
    );
    proxy.thaw();
}

// ---------------------------------------------------------------------------------------------
// The failure modes table names real tests

/// Every test docs/operations.md's "Failure modes" table names exists: `module::test` in
/// `tests/blackbox/module.rs`, `health::tests::name` in the store.
fn the_failure_modes_table_names_existing_tests() {
    let root = env!("CARGO_MANIFEST_DIR");
    let doc = std::fs::read_to_string(format!("{root}/docs/operations.md")).unwrap();
    let table = doc
        .split("## Failure modes")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/operations.md has a Failure modes section");
    let mut named = 0;
    for row in table.lines().filter(|l| l.starts_with("| **")) {
        let last = row.trim_end_matches('|').rsplit('|').next().unwrap();
        let tests: Vec<&str> = last
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| t.contains("::"))
            .collect();
        assert!(!tests.is_empty(), "a row without a test: {row}");
        for t in tests {
            let parts: Vec<&str> = t.split("::").collect();
            let (file, name) = match parts.as_slice() {
                ["health", "tests", name] => (format!("{root}/crates/store/src/health.rs"), *name),
                [module, name, ..] => (format!("{root}/tests/blackbox/{module}.rs"), *name),
                _ => panic!("not a test path: {t}"),
            };
            let source = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(
                source.contains(&format!("fn {name}(")),
                "{t} (named in the Failure modes table) is not a test of {file}"
            );
            named += 1;
        }
    }
    assert!(named >= 15, "{named} tests named");
}
