//! Tracing and the message journey (CONVENTIONS "Tracing and the message timeline"): W3C
//! trace context from the request to the provider and to every webhook attempt (also after a
//! restart between the send and the delivery), `trace_id` on the request's log lines, spans
//! exported to an OTLP/HTTP collector, and `GET /messages/{uuid}` with its timeline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};

use crate::both_backends;
use crate::fake_providers::{Fake, hub_signature, wa_status, wa_text, wa_webhook};
use crate::receivers::{Behaviour, Receiver};
use crate::support::{Backend, Resp, Server, TestEnv};

both_backends!(
    a_sends_trace_reaches_the_provider_and_every_attempt_across_a_restart,
    every_log_line_of_a_request_carries_its_trace_id,
    the_timeline_lists_every_step_in_order,
    spans_are_exported_to_an_otlp_collector,
);

const TEXT: &str = "/api/v1/integrations/messages";
const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const PHONE: &str = "+4915123456789";
const PHONE_DIGITS: &str = "4915123456789";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const APP_SECRET: &str = "app-secret-for-tests";
const PHONE_NUMBER_ID: &str = "1098765";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const WAIT: Duration = Duration::from_secs(30);

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{CALLER_SPAN}-01")
}

/// (trace id, span id) of a `traceparent` header; panics unless it is a valid version 00.
fn parse(header: Option<&str>) -> (String, String) {
    let h = header.expect("a traceparent header");
    let parts: Vec<&str> = h.split('-').collect();
    assert_eq!(parts.len(), 4, "{h}");
    assert_eq!(parts[0], "00", "{h}");
    assert_eq!(parts[1].len(), 32, "{h}");
    assert_eq!(parts[2].len(), 16, "{h}");
    assert!(
        h.bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{h}"
    );
    (parts[1].to_owned(), parts[2].to_owned())
}

fn settings(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut s = vec![
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "100"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
    ];
    s.extend_from_slice(extra);
    s
}

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake) -> String {
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
            "--slug",
            "wa",
            "--provider-config",
            &json!({
                "phone_number_id": PHONE_NUMBER_ID,
                "access_token": WA_TOKEN,
                "app_secret": APP_SECRET,
                "verify_token": "verify",
                "api_base_url": graph.base_url,
            })
            .to_string(),
        ])
        .await;
    ch["uuid"].as_str().unwrap().to_owned()
}

async fn wa_callback(server: &Server, channel_uuid: &str, body: &Value) -> Resp {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = hub_signature(APP_SECRET, &raw);
    let resp = server
        .client
        .post(server.url(&format!("/inbound/{channel_uuid}")))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", sig)
        .body(raw)
        .send()
        .await
        .unwrap();
    Server::read(resp).await
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The contact writes first, which opens WhatsApp's service window.
async fn open_window(server: &Server, wa: &str) {
    wa_callback(
        server,
        wa,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![wa_text(PHONE_DIGITS, "wamid.IN1", unix_now(), "Hi!")],
            vec![],
        ),
    )
    .await
    .expect(200);
}

async fn endpoint(server: &Server, key: &str, url: &str, events: &[&str]) -> Value {
    server
        .post(
            ENDPOINTS,
            key,
            &json!({"name": "hooks", "url": url, "events": events}),
        )
        .await
        .expect(201)
        .body
}

async fn send_traced(server: &Server, key: &str, body: &Value, traceparent: &str) -> Resp {
    let ikey = uuid::Uuid::new_v4().to_string();
    server
        .post_with(
            TEXT,
            key,
            body,
            &[("Idempotency-Key", &ikey), ("traceparent", traceparent)],
        )
        .await
}

async fn a_sends_trace_reaches_the_provider_and_every_attempt_across_a_restart(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let rx = Receiver::start().await;
    // The receiver is down at first: the delivery is retried, by the next instance too.
    rx.respond("/hooks", Behaviour::Status(503));
    let config = settings(&[(
        "SWITCHBOARD_WEBHOOK_RETRY_DELAYS",
        "300ms,300ms,300ms,300ms,300ms,300ms,300ms,300ms",
    )]);
    let mut server = env.start(&config).await;
    endpoint(&server, &seed.key, &rx.url("/hooks"), &["message.sent"]).await;
    open_window(&server, &wa).await;

    send_traced(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "Your order shipped"}),
        &traceparent(),
    )
    .await
    .expect(201);

    // The provider call is a span of the caller's trace.
    let calls = graph.received().await;
    let call = calls.last().expect("the provider was called");
    let (trace, provider_span) = parse(call.traceparent.as_deref());
    assert_eq!(trace, TRACE_ID);
    assert_ne!(
        provider_span, CALLER_SPAN,
        "the provider call is a span of its own"
    );

    // The first attempt too.
    let first = rx.wait_for("/hooks", 1, WAIT).await;
    let (trace, attempt_span) = parse(first[0].header("traceparent"));
    assert_eq!(trace, TRACE_ID);
    assert_ne!(attempt_span, CALLER_SPAN);
    assert_ne!(attempt_span, provider_span);

    // kill -9 between the send and the delivery; the next instance reads the trace context kept
    // with the event.
    server.kill().await;
    let before = rx.requests("/hooks").len();
    rx.respond("/hooks", Behaviour::Status(200));
    let _server = env.start(&config).await;
    let all = rx.wait_for("/hooks", before + 1, WAIT).await;
    let after = &all[before];
    assert!(after.attempt() > 1, "a retry: {}", after.attempt());
    let (trace, span) = parse(after.header("traceparent"));
    assert_eq!(trace, TRACE_ID, "the trace survives the restart");
    // Each attempt is a span of its own.
    let spans: std::collections::HashSet<String> = all
        .iter()
        .map(|r| {
            let (t, s) = parse(r.header("traceparent"));
            assert_eq!(t, TRACE_ID);
            s
        })
        .collect();
    assert_eq!(spans.len(), all.len(), "{spans:?}");
    assert!(spans.contains(&span));
}

/// The JSON log lines of the request with this id, once its last line (`request finished`)
/// has come through the server's standard error.
async fn request_lines(server: &Server, request_id: &str) -> Vec<Value> {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let lines: Vec<Value> = server
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["span"]["request_id"] == request_id)
            .collect();
        if lines
            .iter()
            .any(|l| l["fields"]["message"] == "request finished")
        {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "no `request finished` line for {request_id}:\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn every_log_line_of_a_request_carries_its_trace_id(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&settings(&[])).await;

    // A caller's trace is continued.
    let r = send_traced(
        &server,
        &seed.key,
        &json!({"phone": PHONE, "message": "hello"}),
        &traceparent(),
    )
    .await
    .expect(201);
    let id = r.header("x-request-id").unwrap().to_owned();
    let lines = request_lines(&server, &id).await;
    assert!(!lines.is_empty(), "{}", server.logs());
    for l in &lines {
        assert_eq!(l["span"]["trace_id"], TRACE_ID, "{l}");
    }

    // No traceparent, or an invalid one: a new trace, on every line of the request.
    for header in [None, Some("00-zzzz-not-valid-01"), Some("garbage")] {
        let mut req = server
            .client
            .get(server.url("/api/v1/integrations/channels"))
            .bearer_auth(&seed.key);
        if let Some(h) = header {
            req = req.header("traceparent", h);
        }
        let r = Server::read(req.send().await.unwrap()).await.expect(200);
        let id = r.header("x-request-id").unwrap().to_owned();
        let lines = request_lines(&server, &id).await;
        assert!(!lines.is_empty());
        let trace = lines[0]["span"]["trace_id"].as_str().unwrap().to_owned();
        assert_eq!(trace.len(), 32);
        assert!(trace.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(trace, "0".repeat(32));
        assert_ne!(trace, TRACE_ID);
        assert!(
            lines
                .iter()
                .all(|l| l["span"]["trace_id"] == trace.as_str())
        );
    }
}

async fn the_timeline_lists_every_step_in_order(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let rx = Receiver::start().await;
    let server = env.start(&settings(&[])).await;
    let ep = endpoint(
        &server,
        &seed.key,
        &rx.url("/hooks"),
        &["message.sent", "message.status.update"],
    )
    .await;
    open_window(&server, &wa).await;
    let r = send_traced(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "Your order shipped"}),
        &traceparent(),
    )
    .await
    .expect(201);
    let uuid = r.body["message"]["uuid"].as_str().unwrap().to_owned();
    let wamid = r.body["message"]["provider_message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sent = rx.wait_for("/hooks", 1, WAIT).await;
    // The provider reports the message delivered.
    wa_callback(
        &server,
        &wa,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![],
            vec![wa_status(&wamid, "delivered", PHONE_DIGITS)],
        ),
    )
    .await
    .expect(200);
    let all = rx.wait_for("/hooks", 2, WAIT).await;
    let update = all
        .iter()
        .find(|r| r.event() == "message.status.update")
        .expect("the status update was delivered");

    let path = format!("{TEXT}/{uuid}");
    // The ledger records an attempt just after the receiver answers: wait for both.
    let mut body = Value::Null;
    for _ in 0..600 {
        body = server.get(&path, &seed.key).await.expect(200).body;
        let attempts = body["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "webhook_attempt")
            .count();
        if attempts == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(body["uuid"], uuid.as_str());
    assert_eq!(body["status"], "delivered");
    let timeline = body["timeline"].as_array().unwrap().clone();
    let kinds: Vec<&str> = timeline
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    let own: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| *k != "webhook_attempt")
        .collect();
    assert_eq!(
        own,
        [
            "accepted",
            "provider_request",
            "provider_response",
            "status",
            "status"
        ],
        "{body:#}"
    );
    let times: Vec<String> = timeline
        .iter()
        .map(|s| s["at"].as_str().unwrap().to_owned())
        .collect();
    let parsed: Vec<chrono::DateTime<chrono::FixedOffset>> = times
        .iter()
        .map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap())
        .collect();
    assert!(
        parsed.windows(2).all(|w| w[0] <= w[1]),
        "oldest first: {times:?}"
    );
    let step = |kind: &str, n: usize| {
        timeline
            .iter()
            .filter(|s| s["kind"] == kind)
            .nth(n)
            .unwrap_or_else(|| panic!("no {kind} #{n} in {body:#}"))
            .clone()
    };
    assert_eq!(step("provider_request", 0)["provider"], "whatsapp_cloud");
    assert_eq!(step("provider_response", 0)["outcome"], "accepted");
    assert_eq!(
        step("provider_response", 0)["provider_message_id"],
        wamid.as_str()
    );
    assert_eq!(step("status", 0)["status"], "sent");
    assert_eq!(step("status", 1)["status"], "delivered");
    // Each webhook attempt, with its endpoint, delivery, attempt, answer and duration.
    let first = step("webhook_attempt", 0);
    assert_eq!(first["event"], "message.sent");
    assert_eq!(first["endpoint_uuid"], ep["uuid"]);
    assert_eq!(first["delivery_id"], sent[0].delivery().as_str());
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["response_status"], 200);
    assert!(first["duration_ms"].as_i64().is_some(), "{first}");
    let second = step("webhook_attempt", 1);
    assert_eq!(second["event"], "message.status.update");
    assert_eq!(second["delivery_id"], update.delivery().as_str());
    // The message.sent attempt came before the status it did not know of.
    let at = |s: &Value| chrono::DateTime::parse_from_rfc3339(s["at"].as_str().unwrap()).unwrap();
    assert!(at(&first) <= at(&step("status", 1)));
    assert!(at(&step("status", 1)) <= at(&second));

    // Organization-scoped, read scope required, unknown and malformed ids are 404s.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    server
        .get(&path, &other_key)
        .await
        .expect_error(404, "not_found");
    let writer = env.key(seed.org_id, "messages:write").await;
    server
        .get(&path, &writer)
        .await
        .expect_error(403, "insufficient_scope");
    server
        .get(&format!("{TEXT}/{}", uuid::Uuid::new_v4()), &seed.key)
        .await
        .expect_error(404, "not_found");
    server
        .get(&format!("{TEXT}/not-a-uuid"), &seed.key)
        .await
        .expect_error(404, "not_found");

    // A rejected send's journey ends with the provider's code.
    graph
        .then(crate::fake_providers::Behaviour::Reject {
            status: 400,
            code: 131026,
            message: "Message undeliverable".into(),
            details: None,
        })
        .await;
    let r = send_traced(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "again"}),
        &traceparent(),
    )
    .await
    .expect(422);
    let failed_uuid = r.body["error"]["details"]["message"]["uuid"]
        .as_str()
        .or_else(|| r.body["error"]["details"]["message_uuid"].as_str())
        .unwrap_or_else(|| panic!("the failed message's uuid in {}", r.text))
        .to_owned();
    let body = server
        .get(&format!("{TEXT}/{failed_uuid}"), &seed.key)
        .await
        .expect(200)
        .body;
    let timeline = body["timeline"].as_array().unwrap();
    let response = timeline
        .iter()
        .find(|s| s["kind"] == "provider_response")
        .unwrap();
    assert_eq!(response["outcome"], "rejected");
    assert_eq!(response["provider_code"], 131026);
    let status = timeline.iter().find(|s| s["kind"] == "status").unwrap();
    assert_eq!(status["status"], "failed");
    assert_eq!(status["provider_code"], 131026);
}

/// A stub OTLP/HTTP collector: keeps every span it is sent.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    async fn start() -> Collector {
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
        };
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let sink = sink.clone();
                    async move {
                        assert_eq!(
                            headers.get("content-type").and_then(|v| v.to_str().ok()),
                            Some("application/x-protobuf")
                        );
                        let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        let mut all = sink.lock().unwrap();
                        for rs in req.resource_spans {
                            for ss in rs.scope_spans {
                                all.extend(ss.spans);
                            }
                        }
                        (
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Collector { url, spans, task }
    }

    /// Waits until `found` finds something in the spans received so far; panics after [`WAIT`]
    /// with the names received.
    async fn wait_until<T>(&self, found: impl Fn(&[Span]) -> Option<T>) -> T {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let (hit, names) = {
                let all = self.spans.lock().unwrap();
                (
                    found(&all),
                    all.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
                )
            };
            if let Some(hit) = hit {
                return hit;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "spans received: {names:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn spans_are_exported_to_an_otlp_collector(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let collector = Collector::start().await;
    let rx = Receiver::start().await;
    let config = settings(&[
        (
            "SWITCHBOARD_OTLP_ENDPOINT",
            Box::leak(collector.url.clone().into_boxed_str()),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]);
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let server = env.start(&config).await;
    endpoint(&server, &seed.key, &rx.url("/hooks"), &["message.sent"]).await;
    open_window(&server, &wa).await;
    let r = send_traced(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "message": "hello"}),
        &traceparent(),
    )
    .await
    .expect(201);
    let wamid = r.body["message"]["provider_message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    rx.wait_for("/hooks", 1, WAIT).await;

    let wanted = [
        "POST /api/v1/integrations/messages",
        "provider.send",
        "store.transaction",
        "webhook.attempt",
    ];
    let spans = collector
        .wait_until(|all| {
            let spans: Vec<Span> = all
                .iter()
                .filter(|s| hex::encode(&s.trace_id) == TRACE_ID)
                .cloned()
                .collect();
            wanted
                .iter()
                .all(|w| spans.iter().any(|s| s.name == *w))
                .then_some(spans)
        })
        .await;
    let named = |n: &str| spans.iter().find(|s| s.name == n).unwrap().clone();
    let request = named("POST /api/v1/integrations/messages");
    // The request continues the caller's span; the rest hang off the request.
    assert_eq!(hex::encode(&request.parent_span_id), CALLER_SPAN);
    assert_eq!(named("provider.send").parent_span_id, request.span_id);
    assert!(
        spans
            .iter()
            .filter(|s| s.name == "store.transaction")
            .all(|s| s.parent_span_id == request.span_id)
    );
    // The provider got the provider call's span as its parent.
    let provider_span = named("provider.send");
    let calls = graph.received().await;
    let (_, sent_span) = parse(calls.last().unwrap().traceparent.as_deref());
    assert_eq!(hex::encode(&provider_span.span_id), sent_span);
    let attempt = named("webhook.attempt");
    assert_eq!(attempt.parent_span_id, request.span_id, "the event's cause");
    // The attempt's span is the traceparent the receiver got.
    let got = rx.requests("/hooks");
    let (_, sent_span) = parse(got[0].header("traceparent"));
    assert_eq!(hex::encode(&attempt.span_id), sent_span);
    let code = request
        .attributes
        .iter()
        .find(|a| a.key == "http.response.status_code")
        .expect("the status attribute");
    assert_eq!(
        code.value.as_ref().and_then(|v| v.value.clone()),
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(201))
    );

    // The provider's status callback runs in a trace of its own, linked to the message's.
    wa_callback(
        &server,
        &wa,
        &wa_webhook(
            PHONE_NUMBER_ID,
            vec![],
            vec![wa_status(&wamid, "delivered", PHONE_DIGITS)],
        ),
    )
    .await
    .expect(200);
    let status = collector
        .wait_until(|all| all.iter().find(|s| s.name == "message.status").cloned())
        .await;
    assert_ne!(
        hex::encode(&status.trace_id),
        TRACE_ID,
        "a trace of its own"
    );
    assert!(
        status
            .links
            .iter()
            .any(|l| hex::encode(&l.trace_id) == TRACE_ID),
        "linked to the message's trace: {:?}",
        status.links
    );
}
