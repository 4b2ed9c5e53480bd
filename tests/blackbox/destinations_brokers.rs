//! Issue 35: broker destinations under faults, with order and after an outage, against the
//! brokers this machine runs (RabbitMQ on 5672, NATS JetStream on 4222, Redis on 6379; a
//! broker that is not running is a skip), on both backends. The brokers themselves are shared
//! with other tests and never stopped: outages are made by the fault proxy between Switchboard
//! and the broker.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::both_backends;
use crate::fault_proxy::{Proxy, via};
use crate::receivers::ReceivedRequest;
use crate::recovery::{at, ledger, recover, send, wait_recovery};
use crate::support::{Backend, Server, TestEnv};
use crate::webhooks::{Api, signed_by, with};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const NATS: &str = "nats://127.0.0.1:4222";
const WAIT: Duration = Duration::from_secs(90);

both_backends!(
    a_rabbitmq_outage_mid_stream_loses_nothing,
    a_nats_outage_mid_stream_loses_nothing,
    a_redis_outage_mid_stream_loses_nothing,
    // On PostgreSQL with two instances sharing the work; one on SQLite.
    per_contact_order_holds_on_rabbitmq,
    per_contact_order_holds_on_nats_jetstream,
    a_recovery_replays_to_rabbitmq,
    a_recovery_replays_to_nats_jetstream,
    a_recovery_replays_to_a_redis_stream,
);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Rabbitmq,
    Nats,
    Redis,
}

/// Where a test's broker messages land, and how they are read back: a RabbitMQ topic exchange
/// and a queue bound to everything, a JetStream stream on `sbtest.{id}.>`, or Redis streams
/// `sbtest:{id}:...`.
pub(crate) struct Sink {
    kind: Kind,
    id: String,
    amqp: Option<(lapin::Connection, lapin::Channel)>,
    js: Option<async_nats::jetstream::Context>,
    redis: Option<String>,
    /// What was read so far (RabbitMQ messages are taken off the queue).
    read: Vec<ReceivedRequest>,
    next_seq: u64,
}

impl Sink {
    /// Sets up a sink on `kind` (skips the test when the broker is not running).
    pub(crate) async fn new(kind: Kind) -> Sink {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut sink = Sink {
            kind,
            id,
            amqp: None,
            js: None,
            redis: None,
            read: Vec::new(),
            next_seq: 1,
        };
        match kind {
            Kind::Rabbitmq => sink.amqp = Some(sink.declare_amqp().await),
            Kind::Nats => {
                let Ok(client) = async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(2))
                    .connect(NATS)
                    .await
                else {
                    crate::support::skip("NATS with JetStream is not running on 127.0.0.1:4222");
                };
                let js = async_nats::jetstream::new(client);
                js.get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: sink.nats_stream(),
                    subjects: vec![format!("sbtest.{}.>", sink.id)],
                    ..Default::default()
                })
                .await
                .expect("JetStream is enabled");
                sink.js = Some(js);
            }
            Kind::Redis => {
                let Some(url) = crate::support::redis_url() else {
                    crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
                };
                sink.redis = Some(url);
            }
        }
        sink
    }

    async fn declare_amqp(&self) -> (lapin::Connection, lapin::Channel) {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let Ok(conn) =
            lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default()).await
        else {
            crate::support::skip("RabbitMQ is not running on 127.0.0.1:5672 (guest/guest)");
        };
        let ch = conn.create_channel().await.unwrap();
        let (exchange, queue) = (
            format!("sbtest.{}", self.id),
            format!("sbtest.{}.q", self.id),
        );
        ch.exchange_declare(
            &exchange,
            lapin::ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
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
            "#",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        (conn, ch)
    }

    fn nats_stream(&self) -> String {
        format!("SBTEST_{}", self.id)
    }

    /// The upstream `host:port` of the broker (what a fault proxy forwards to).
    pub(crate) fn upstream(&self) -> String {
        match self.kind {
            Kind::Rabbitmq => "127.0.0.1:5672".into(),
            Kind::Nats => "127.0.0.1:4222".into(),
            Kind::Redis => {
                let u = url::Url::parse(self.redis.as_deref().unwrap()).unwrap();
                format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(6379))
            }
        }
    }

    /// The endpoint `type` and `target` for this sink: `key` is the routing key / subject /
    /// stream suffix template (it may use `{contact_uuid}` and the other placeholders); the
    /// URL goes through `proxy` when given.
    pub(crate) fn endpoint(&self, key: &str, proxy: Option<&Proxy>) -> (&'static str, Value) {
        let url = |u: &str| match proxy {
            Some(p) => via(u, p),
            None => u.to_owned(),
        };
        match self.kind {
            Kind::Rabbitmq => (
                "rabbitmq",
                json!({"url": url(AMQP), "exchange": format!("sbtest.{}", self.id), "routing_key": key}),
            ),
            Kind::Nats => (
                "nats_jetstream",
                json!({"url": url(NATS), "subject": format!("sbtest.{}.{key}", self.id)}),
            ),
            Kind::Redis => (
                "redis_stream",
                json!({"url": url(self.redis.as_deref().unwrap()),
                       "stream": format!("sbtest:{}:{key}", self.id), "max_len": 100000}),
            ),
        }
    }

    /// Every message that arrived so far, in the broker's order (Redis: per stream, streams
    /// in key order). `path` is the routing key, subject or stream key.
    pub(crate) async fn messages(&mut self) -> Vec<ReceivedRequest> {
        match self.kind {
            Kind::Rabbitmq => self.read_amqp().await,
            Kind::Nats => self.read_nats().await,
            Kind::Redis => return self.read_redis().await,
        }
        self.read.clone()
    }

    async fn read_amqp(&mut self) {
        use lapin::options::BasicGetOptions;
        use lapin::types::AMQPValue;
        let queue = format!("sbtest.{}.q", self.id);
        let ch = &self.amqp.as_ref().unwrap().1;
        while let Some(m) = ch
            .basic_get(&queue, BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let mut headers = HashMap::new();
            if let Some(h) = m.delivery.properties.headers() {
                for (k, v) in h.inner() {
                    if let AMQPValue::LongString(v) = v {
                        headers.insert(
                            k.as_str().to_ascii_lowercase(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        );
                    }
                }
            }
            let message_id = m
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string());
            assert_eq!(
                message_id.as_deref(),
                headers.get("x-switchboard-delivery").map(String::as_str),
                "the AMQP message id is the delivery id"
            );
            self.read.push(received(
                m.delivery.routing_key.to_string(),
                headers,
                m.delivery.data.clone(),
            ));
        }
    }

    async fn read_nats(&mut self) {
        let js = self.js.as_ref().unwrap();
        let stream = js.get_stream(self.nats_stream()).await.unwrap();
        while let Ok(m) = stream.get_raw_message(self.next_seq).await {
            self.next_seq += 1;
            let headers: HashMap<String, String> = m
                .headers
                .iter()
                .map(|(k, v)| (k.to_string().to_ascii_lowercase(), v[0].to_string()))
                .collect();
            assert_eq!(
                headers.get("nats-msg-id"),
                headers.get("x-switchboard-delivery"),
                "Nats-Msg-Id is the delivery id"
            );
            self.read
                .push(received(m.subject.to_string(), headers, m.payload.to_vec()));
        }
    }

    async fn read_redis(&mut self) -> Vec<ReceivedRequest> {
        type Entry = (String, Vec<(Vec<u8>, Vec<u8>)>);
        let client = redis::Client::open(self.redis.as_deref().unwrap()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("sbtest:{}:*", self.id))
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            let entries: Vec<Entry> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap();
            for (_, fields) in entries {
                let mut headers = HashMap::new();
                let mut body = Vec::new();
                for (k, v) in fields {
                    if k == b"body" {
                        body = v;
                    } else {
                        headers
                            .insert(String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap());
                    }
                }
                out.push(received(key.clone(), headers, body));
            }
        }
        out
    }

    /// Waits until messages of `n` distinct deliveries arrived; returns every message.
    pub(crate) async fn wait_deliveries(&mut self, n: usize) -> Vec<ReceivedRequest> {
        let end = Instant::now() + WAIT;
        loop {
            let got = self.messages().await;
            let distinct: HashSet<&str> = got.iter().map(delivery_id).collect();
            if distinct.len() >= n || Instant::now() > end {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Removes what the test declared or wrote.
    pub(crate) async fn clean_up(self) {
        match self.kind {
            Kind::Rabbitmq => {
                use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
                let ch = &self.amqp.as_ref().unwrap().1;
                ch.queue_delete(
                    &format!("sbtest.{}.q", self.id),
                    QueueDeleteOptions::default(),
                )
                .await
                .unwrap();
                ch.exchange_delete(
                    &format!("sbtest.{}", self.id),
                    ExchangeDeleteOptions::default(),
                )
                .await
                .unwrap();
            }
            Kind::Nats => {
                let js = self.js.as_ref().unwrap();
                js.delete_stream(self.nats_stream()).await.unwrap();
            }
            Kind::Redis => {
                let client = redis::Client::open(self.redis.as_deref().unwrap()).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("sbtest:{}:*", self.id))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                for key in keys {
                    let _: () = redis::cmd("DEL")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            }
        }
    }
}

fn received(path: String, headers: HashMap<String, String>, body: Vec<u8>) -> ReceivedRequest {
    ReceivedRequest {
        path,
        method: "BROKER".into(),
        headers,
        body,
        at: SystemTime::now(),
        instant: Instant::now(),
    }
}

pub(crate) fn delivery_id(r: &ReceivedRequest) -> &str {
    r.header("x-switchboard-delivery")
        .expect("X-Switchboard-Delivery")
}

/// The text of a delivered `message.sent`.
pub(crate) fn text(r: &ReceivedRequest) -> String {
    r.json()["data"]["message"]["text"]["body"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Creates a broker endpoint on `sink`; returns (uuid, signing secret).
pub(crate) async fn broker_endpoint(
    server: &Server,
    key: &str,
    sink: &Sink,
    template: &str,
    proxy: Option<&Proxy>,
    extra: Value,
) -> (String, String) {
    let (kind, target) = sink.endpoint(template, proxy);
    let mut body = json!({"type": kind, "events": ["message.sent"], "target": target});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let e = server.post(ENDPOINTS, key, &body).await.expect(201).body;
    (
        e["uuid"].as_str().unwrap().to_owned(),
        e["signing_secret"].as_str().unwrap().to_owned(),
    )
}

/// Polls the ledger of an endpoint until `n` deliveries are all `delivered`.
pub(crate) async fn wait_all_delivered(
    server: &Server,
    key: &str,
    endpoint: &str,
    n: usize,
) -> Vec<Value> {
    let end = Instant::now() + WAIT;
    loop {
        let rows = ledger(server, key, endpoint).await;
        if rows.len() >= n && rows.iter().all(|d| d["status"] == "delivered") {
            return rows;
        }
        if Instant::now() > end {
            let statuses: Vec<(&Value, &Value)> = rows
                .iter()
                .map(|d| (&d["status"], &d["error_code"]))
                .collect();
            panic!("not all {n} delivered: {} rows {statuses:?}", rows.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every delivery of the ledger arrived, each message verified; the same delivery twice is
/// the same message (at least once); returns the messages by delivery id.
pub(crate) fn check_arrivals(
    rows: &[Value],
    got: &[ReceivedRequest],
    secret: &str,
) -> HashMap<String, Vec<ReceivedRequest>> {
    let mut by_delivery: HashMap<String, Vec<ReceivedRequest>> = HashMap::new();
    for m in got {
        assert!(
            signed_by(secret, m),
            "the signature verifies: {}",
            delivery_id(m)
        );
        assert_eq!(m.header("webhook-id"), Some(delivery_id(m)));
        by_delivery
            .entry(delivery_id(m).to_owned())
            .or_default()
            .push(m.clone());
    }
    let ledger_ids: HashSet<String> = rows
        .iter()
        .map(|d| d["delivery_id"].as_str().unwrap().to_owned())
        .collect();
    let arrived: HashSet<String> = by_delivery.keys().cloned().collect();
    assert_eq!(arrived, ledger_ids, "every delivery arrived, nothing else");
    for (id, copies) in &by_delivery {
        for c in copies {
            assert_eq!(
                c.body, copies[0].body,
                "a duplicate of {id} is the same message"
            );
        }
    }
    by_delivery
}

/// Waits until some delivery of `endpoint` has a failed attempt.
async fn wait_failed_attempt(server: &Server, key: &str, endpoint: &str) {
    let end = Instant::now() + WAIT;
    loop {
        let rows = ledger(server, key, endpoint).await;
        if rows.iter().any(|d| d["status"] == "retrying") {
            return;
        }
        assert!(
            Instant::now() < end,
            "no attempt failed while the broker was away"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events stream to a broker endpoint through a proxy; the proxy cuts every connection and
/// refuses new ones mid-stream, then comes back: every delivery arrives, verified, and the
/// ledger shows failed attempts, then success.
async fn outage_mid_stream(backend: Backend, kind: Kind) {
    const N: usize = 30;
    let mut sink = Sink::new(kind).await;
    let proxy = Proxy::start(&sink.upstream()).await;
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "1000"),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let (uuid, secret) = broker_endpoint(
        &server,
        &seed.key,
        &sink,
        "{event}",
        Some(&proxy),
        json!({"retry_delays": ["1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s"],
               "timeout": "2s"}),
    )
    .await;

    let phone = "+4915123470001";
    for i in 0..N / 3 {
        send(&server, &seed.key, phone, &format!("m{i}")).await;
    }
    // The first third is through before the broker goes away.
    let before = wait_all_delivered(&server, &seed.key, &uuid, N / 3).await;
    assert!(before.iter().all(|d| d["attempts"] == 1));
    proxy.take_down();
    for i in N / 3..2 * N / 3 {
        send(&server, &seed.key, phone, &format!("m{i}")).await;
    }
    wait_failed_attempt(&server, &seed.key, &uuid).await;
    proxy.bring_up();
    for i in 2 * N / 3..N {
        send(&server, &seed.key, phone, &format!("m{i}")).await;
    }
    let rows = wait_all_delivered(&server, &seed.key, &uuid, N).await;
    assert_eq!(rows.len(), N);

    // The ledger: the deliveries made while the broker was away failed, then succeeded.
    let mut recovered = 0;
    for row in rows.iter().filter(|d| d["attempts"].as_i64() > Some(1)) {
        let d = api.delivery(row["delivery_id"].as_str().unwrap()).await;
        let log = d["attempt_log"].as_array().unwrap();
        let (last, failed) = log.split_last().unwrap();
        assert_eq!(last["error_code"], Value::Null, "{d:#}");
        assert!(last["response_body_excerpt"].is_string(), "{d:#}");
        for a in failed {
            assert!(
                ["broker_unavailable", "timeout"].contains(&a["error_code"].as_str().unwrap_or("")),
                "{a:#}"
            );
        }
        recovered += 1;
    }
    assert!(recovered >= 1, "some deliveries failed, then arrived");

    let got = sink.wait_deliveries(N).await;
    let by_delivery = check_arrivals(&rows, &got, &secret);
    let mut texts: Vec<String> = by_delivery.values().map(|c| text(&c[0])).collect();
    texts.sort();
    let mut expected: Vec<String> = (0..N).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(texts, expected, "every event, once per delivery");
    if kind == Kind::Nats {
        assert_eq!(got.len(), N, "JetStream drops duplicates by Nats-Msg-Id");
    }
    sink.clean_up().await;
}

async fn a_rabbitmq_outage_mid_stream_loses_nothing(backend: Backend) {
    outage_mid_stream(backend, Kind::Rabbitmq).await;
}

async fn a_nats_outage_mid_stream_loses_nothing(backend: Backend) {
    outage_mid_stream(backend, Kind::Nats).await;
}

async fn a_redis_outage_mid_stream_loses_nothing(backend: Backend) {
    outage_mid_stream(backend, Kind::Redis).await;
}

/// Many events for a few contacts, written through two instances (on PostgreSQL; one on
/// SQLite) to a `per_contact` broker endpoint whose key names the contact: the consumer of
/// each contact's key sees its events in order, numbered 1, 2, 3, ...
async fn ordered_on(backend: Backend, kind: Kind) {
    const CONTACTS: usize = 4;
    const PER_CONTACT: usize = 12;
    let mut sink = Sink::new(kind).await;
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = with(&[
        ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "1000"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
    ]);
    let server = env.start(&settings).await;
    let second = match backend {
        Backend::Postgres => Some(env.start(&settings).await),
        Backend::Sqlite => None,
    };
    let other = second.as_ref().unwrap_or(&server);
    let (uuid, secret) = broker_endpoint(
        &server,
        &seed.key,
        &sink,
        "{contact_uuid}",
        None,
        json!({"ordering": "per_contact"}),
    )
    .await;
    // Each contact's messages in order, the contacts at once, alternating instances.
    let sends = (0..CONTACTS).map(|c| {
        let (server, other, key) = (&server, other, &seed.key);
        async move {
            for i in 0..PER_CONTACT {
                let through = if i % 2 == 0 { server } else { other };
                send(
                    through,
                    key,
                    &format!("+49151234800{c:02}"),
                    &format!("c{c}-{i:02}"),
                )
                .await;
            }
        }
    });
    futures::future::join_all(sends).await;
    let n = CONTACTS * PER_CONTACT;
    let rows = wait_all_delivered(&server, &seed.key, &uuid, n).await;
    let got = sink.wait_deliveries(n).await;
    check_arrivals(&rows, &got, &secret);

    // Per key (one contact each), in the broker's order: a delivery seen twice in a row is an
    // at-least-once duplicate; otherwise the texts and the sequence numbers go up one by one.
    let mut by_key: HashMap<String, Vec<&ReceivedRequest>> = HashMap::new();
    for m in &got {
        by_key.entry(m.path.clone()).or_default().push(m);
    }
    assert_eq!(
        by_key.len(),
        CONTACTS,
        "one key per contact: {:?}",
        by_key.keys()
    );
    for (key, messages) in by_key {
        let mut seen: Vec<&ReceivedRequest> = Vec::new();
        for m in messages {
            if seen
                .last()
                .is_some_and(|l| delivery_id(l) == delivery_id(m))
            {
                continue;
            }
            seen.push(m);
        }
        let contact = seen[0].json()["data"]["contact_uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(key.ends_with(&contact), "{key} names the contact {contact}");
        let texts: Vec<String> = seen.iter().map(|m| text(m)).collect();
        let prefix = texts[0][..2].to_owned();
        let expected: Vec<String> = (0..PER_CONTACT)
            .map(|i| format!("{prefix}-{i:02}"))
            .collect();
        assert_eq!(texts, expected, "{key}: in order, each once");
        let sequences: Vec<u64> = seen
            .iter()
            .map(|m| m.header("x-switchboard-sequence").unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            sequences,
            (1..=PER_CONTACT as u64).collect::<Vec<_>>(),
            "{key}"
        );
        for m in &seen {
            assert_eq!(m.json()["data"]["contact_uuid"], contact.as_str());
        }
    }
    sink.clean_up().await;
}

async fn per_contact_order_holds_on_rabbitmq(backend: Backend) {
    ordered_on(backend, Kind::Rabbitmq).await;
}

async fn per_contact_order_holds_on_nats_jetstream(backend: Backend) {
    ordered_on(backend, Kind::Nats).await;
}

/// A broker endpoint misses events while it is disabled; once re-enabled, `recover` replays
/// them to the broker, each a verified message.
async fn recovery_to(backend: Backend, kind: Kind) {
    let mut sink = Sink::new(kind).await;
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_RATE_LIMIT_SENDS", "100000")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let since = at(-1000);
    let (uuid, secret) = broker_endpoint(
        &server,
        &seed.key,
        &sink,
        "{event}",
        None,
        json!({"status": "disabled"}),
    )
    .await;
    // A second, active endpoint of the same sink's broker sees the events as they happen:
    // once it has them all, they are written, and none went to the disabled one.
    let rx = crate::receivers::Receiver::start().await;
    api.create(&rx.url("/live"), &["message.sent"]).await;
    for i in 0..5 {
        send(&server, &seed.key, "+4915123490001", &format!("missed {i}")).await;
    }
    rx.wait_for("/live", 5, WAIT).await;
    assert!(ledger(&server, &seed.key, &uuid).await.is_empty());
    assert!(
        sink.messages().await.is_empty(),
        "nothing reached the broker"
    );

    api.put(&uuid, json!({"status": "active"}))
        .await
        .expect(200);
    let started = recover(&server, &seed.key, &uuid, json!({"since": since}))
        .await
        .expect(202)
        .body;
    let id = started["recovery_id"].as_str().unwrap().to_owned();
    let done = wait_recovery(&server, &seed.key, &uuid, &id).await;
    assert_eq!(done["events_matched"], 5, "{done:#}");
    assert_eq!(done["deliveries_queued"], 5, "{done:#}");
    let rows = wait_all_delivered(&server, &seed.key, &uuid, 5).await;
    assert!(rows.iter().all(|d| d["trigger"] == "recovery"), "{rows:?}");
    let got = sink.wait_deliveries(5).await;
    let by_delivery = check_arrivals(&rows, &got, &secret);
    let mut texts: Vec<String> = by_delivery.values().map(|c| text(&c[0])).collect();
    texts.sort();
    assert_eq!(
        texts,
        (0..5).map(|i| format!("missed {i}")).collect::<Vec<_>>()
    );
    // The same event ids as the live endpoint got.
    let live: HashSet<String> = rx
        .requests("/live")
        .iter()
        .map(crate::recovery::event_id)
        .collect();
    let replayed: HashSet<String> = by_delivery
        .values()
        .map(|c| crate::recovery::event_id(&c[0]))
        .collect();
    assert_eq!(replayed, live);
    sink.clean_up().await;
}

async fn a_recovery_replays_to_rabbitmq(backend: Backend) {
    recovery_to(backend, Kind::Rabbitmq).await;
}

async fn a_recovery_replays_to_nats_jetstream(backend: Backend) {
    recovery_to(backend, Kind::Nats).await;
}

async fn a_recovery_replays_to_a_redis_stream(backend: Backend) {
    recovery_to(backend, Kind::Redis).await;
}
