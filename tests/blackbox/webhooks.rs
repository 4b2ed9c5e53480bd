//! Issue 5: signed webhooks: the catalogue, endpoints, URL safety, signed deliveries from the
//! outbox, retries, exhaustion, endpoint health, the ledger, manual retry, test events, and
//! durability (kill -9, several instances), against real local receivers.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::both_backends;
use crate::receivers::{Behaviour, ReceivedRequest, Receiver};
use crate::support::{Backend, Resp, Server, TestEnv};

const EVENTS: &str = "/api/v1/integrations/webhook-events";
const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const DELIVERIES: &str = "/api/v1/integrations/webhook-deliveries";
const WAIT: Duration = Duration::from_secs(30);

both_backends!(
    the_catalogue_lists_every_event,
    endpoints_crud_scopes_and_isolation,
    endpoint_input_is_validated,
    unsafe_urls_are_refused_without_the_development_flag,
    deliveries_are_signed_envelopes_with_the_documented_headers,
    subscriptions_choose_the_endpoints,
    retryable_failures_are_retried_until_delivered,
    permanent_rejections_are_not_retried,
    retry_after_is_honoured,
    exhausted_retries_emit_delivery_failed_to_other_endpoints,
    hostile_receivers_are_recorded_failures,
    endpoints_are_disabled_after_consecutive_failed_deliveries,
    disabled_endpoints_hold_deliveries_until_re_enabled,
    rotating_the_secret_changes_the_signature,
    test_events_go_to_one_endpoint_only,
    test_events_are_rate_limited_per_key,
    deleted_endpoints_stop_receiving,
    security_events_from_the_admin_tools_are_delivered,
    a_slow_endpoint_does_not_starve_the_others,
    kill_9_with_deliveries_pending_loses_nothing,
    two_instances_deliver_each_attempt_once,
    sigterm_lets_attempts_in_flight_finish,
    sigterm_hands_back_attempts_that_outlast_the_grace_period,
    the_dispatcher_wakes_at_once,
    outcomes_and_the_next_claims_share_transactions,
    claims_ahead_are_handed_back_at_sigterm,
    handed_deliveries_are_taken_over_after_kill_9,
);

/// Settings for fast tests: local receivers, short delays, a high test-event budget.
pub(crate) fn fast() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,200ms,300ms"),
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "2s"),
        ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "100ms"),
        ("SWITCHBOARD_RATE_LIMIT_TESTS", "100000"),
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
    ]
}
/// `fast()` with some settings replaced.
pub(crate) fn with(over: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut env: Vec<_> = fast()
        .into_iter()
        .filter(|(k, _)| !over.iter().any(|(o, _)| o == k))
        .collect();
    env.extend_from_slice(over);
    env
}
pub(crate) struct Api<'a> {
    server: &'a Server,
    key: String,
}
pub(crate) struct Endpoint {
    pub(crate) uuid: String,
    pub(crate) secret: String,
}
impl<'a> Api<'a> {
    pub(crate) fn new(server: &'a Server, key: &str) -> Self {
        Api {
            server,
            key: key.to_owned(),
        }
    }

    pub(crate) async fn create(&self, url: &str, events: &[&str]) -> Endpoint {
        let r = self
            .server
            .post(
                ENDPOINTS,
                &self.key,
                &json!({ "name": "receiver", "url": url, "events": events }),
            )
            .await
            .expect(201);
        Endpoint {
            uuid: r.body["uuid"].as_str().unwrap().to_owned(),
            secret: r.body["signing_secret"].as_str().unwrap().to_owned(),
        }
    }

    pub(crate) async fn put(&self, uuid: &str, body: Value) -> Resp {
        self.server
            .call(
                Method::PUT,
                &format!("{ENDPOINTS}/{uuid}"),
                Some(&self.key),
                Some(&body),
            )
            .await
    }

    pub(crate) async fn get_endpoint(&self, uuid: &str) -> Value {
        self.server
            .get(&format!("{ENDPOINTS}/{uuid}"), &self.key)
            .await
            .expect(200)
            .body
    }

    /// Sends a test event; returns (delivery_id, event_id).
    pub(crate) async fn test(&self, uuid: &str) -> (String, String) {
        let r = self
            .server
            .post(&format!("{ENDPOINTS}/{uuid}/test"), &self.key, &json!({}))
            .await
            .expect(202);
        (
            r.body["delivery_id"].as_str().unwrap().to_owned(),
            r.body["event_id"].as_str().unwrap().to_owned(),
        )
    }

    pub(crate) async fn delivery(&self, id: &str) -> Value {
        self.server
            .get(&format!("{DELIVERIES}/{id}"), &self.key)
            .await
            .expect(200)
            .body
    }

    /// Polls the ledger until the delivery satisfies `pred`.
    pub(crate) async fn wait_delivery(
        &self,
        id: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let d = self.delivery(id).await;
            if pred(&d) {
                return d;
            }
            if tokio::time::Instant::now() > end {
                panic!("delivery {id} never became {what}: {d:#}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn wait_status(&self, id: &str, status: &str) -> Value {
        self.wait_delivery(id, status, |d| d["status"] == status)
            .await
    }

    /// Polls an endpoint until it satisfies `pred`.
    pub(crate) async fn wait_endpoint(
        &self,
        uuid: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let e = self.get_endpoint(uuid).await;
            if pred(&e) {
                return e;
            }
            if tokio::time::Instant::now() > end {
                panic!("endpoint {uuid} never became {what}: {e:#}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn list(&self, query: &str) -> Resp {
        self.server
            .get(&format!("{DELIVERIES}{query}"), &self.key)
            .await
    }
}
/// Independent signature check: HMAC-SHA256 with the `hmac` crate over `{timestamp}.{body}`.
/// Whether one of the `v1=` values of `X-Switchboard-Signature` is the signature of `secret` (a
/// receiver accepts a request when any one matches: CONVENTIONS "Webhooks").
pub(crate) fn signed_by(secret: &str, r: &ReceivedRequest) -> bool {
    let ts = r.header("x-switchboard-timestamp").expect("timestamp");
    let sig = r.header("x-switchboard-signature").expect("signature");
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected = format!("v1={}", hex::encode(mac.finalize().into_bytes()));
    sig.split(',').any(|v| v == expected)
}
/// The same check by another implementation: Python's `hmac` module.
fn python_signature(secret: &str, timestamp: &str, body: &[u8]) -> String {
    crate::support::need_program("python3", "Python 3; .ci/run's machine has it");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body");
    std::fs::write(&path, body).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import hmac,hashlib,sys;body=open(sys.argv[3],'rb').read();\
             print('v1='+hmac.new(sys.argv[1].encode(),sys.argv[2].encode()+b'.'+body,hashlib.sha256).hexdigest())",
            secret,
            timestamp,
            path.to_str().unwrap(),
        ])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
fn events_of(rs: &[ReceivedRequest]) -> Vec<String> {
    rs.iter().map(ReceivedRequest::event).collect()
}

// ---------------------------------------------------------------------------------------------
async fn the_catalogue_lists_every_event(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let r = server
        .get(&format!("{EVENTS}?limit=200"), &seed.key)
        .await
        .expect(200);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 146);
    assert_eq!(r.body["has_more"], false);
    assert_eq!(r.body["next_cursor"], Value::Null);
    // A list like the others: limit, cursor, strict parameters.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("{EVENTS}?limit=60&cursor={c}"),
            None => format!("{EVENTS}?limit=60"),
        };
        let p = server.get(&q, &seed.key).await.expect(200).body;
        paged.extend(p["data"].as_array().unwrap().iter().cloned());
        match p["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        &paged, data,
        "pages of 60 make the whole catalogue, in order"
    );
    let first = server.get(EVENTS, &seed.key).await.expect(200).body;
    assert_eq!(first["data"].as_array().unwrap().len(), 50, "default limit");
    assert_eq!(first["has_more"], true);
    for (q, code) in [
        ("limit=3&typ=x", "invalid_request"),
        ("limit=0", "invalid_request"),
        ("cursor=nope", "invalid_cursor"),
    ] {
        server
            .get(&format!("{EVENTS}?{q}"), &seed.key)
            .await
            .expect_error(400, code);
    }
    assert_eq!(
        server
            .get(&format!("{EVENTS}?limit=3"), &seed.key)
            .await
            .expect(200)
            .body["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let names: HashSet<&str> = data.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 146, "no duplicates");
    for e in data {
        let name = e["name"].as_str().unwrap();
        let ns = e["namespace"].as_str().unwrap();
        assert!(name.starts_with(&format!("{ns}.")), "{e}");
        assert!(!e["description"].as_str().unwrap().is_empty());
    }
    for n in [
        "message.sent",
        "message.status.update",
        "commerce.order_created",
        "crm.deal_won",
        "integration.test",
        "webhook.delivery_failed",
        "webhook.endpoint_disabled",
        "security.api_key_created",
    ] {
        assert!(names.contains(n), "{n}");
    }
    let crm = data.iter().filter(|e| e["namespace"] == "crm").count();
    assert_eq!(crm, 26);

    // Scopes: webhooks:read is needed; webhooks:write alone is not enough.
    let read = env.key(seed.org_id, "webhooks:read").await;
    server.get(EVENTS, &read).await.expect(200);
    let other = env.key(seed.org_id, "channels:read,webhooks:write").await;
    let r = server
        .get(EVENTS, &other)
        .await
        .expect_error(403, "insufficient_scope");
    assert_eq!(
        r.body["error"]["details"]["required_scope"],
        "webhooks:read"
    );
}
async fn endpoints_crud_scopes_and_isolation(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);

    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({
                "name": "Orders",
                "url": "https://hooks.example.com/orders?token=abc",
                "events": ["message.sent", "crm.*"],
                "headers": {"X-Tenant": "acme"},
            }),
        )
        .await
        .expect(201);
    let ep = r.body.clone();
    let uuid = ep["uuid"].as_str().unwrap().to_owned();
    let secret = ep["signing_secret"].as_str().unwrap();
    // `whsec_` + the standard base64 of 32 random bytes (Standard Webhooks).
    assert!(
        secret.starts_with("whsec_") && secret.len() == 50,
        "{secret}"
    );
    assert_eq!(ep["name"], "Orders");
    assert_eq!(ep["url"], "https://hooks.example.com/orders?token=abc");
    assert_eq!(ep["events"], json!(["message.sent", "crm.*"]));
    assert_eq!(ep["headers"], json!({"X-Tenant": "acme"}));
    assert_eq!(ep["status"], "active");
    assert_eq!(ep["disabled_reason"], Value::Null);
    assert_eq!(ep["consecutive_failures"], 0);
    assert!(ep["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(ep["updated_at"].is_string());

    // The secret is shown only on create (and rotate).
    let got = api.get_endpoint(&uuid).await;
    assert!(got.get("signing_secret").is_none(), "{got}");
    assert_eq!(got["uuid"], ep["uuid"]);
    let list = server.get(ENDPOINTS, &seed.key).await.expect(200);
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    assert!(list.body["data"][0].get("signing_secret").is_none());
    assert!(!list.text.contains(secret));
    assert_eq!(list.body["has_more"], false);

    // PUT with a subset of fields.
    let r = api
        .put(&uuid, json!({"name": "Renamed", "events": ["*"]}))
        .await
        .expect(200);
    assert_eq!(r.body["name"], "Renamed");
    assert_eq!(r.body["events"], json!(["*"]));
    assert_eq!(r.body["url"], ep["url"], "untouched fields stay");
    assert_eq!(r.body["headers"], ep["headers"]);
    assert!(r.body.get("signing_secret").is_none());
    let r = api
        .put(
            &uuid,
            json!({"headers": {"X-Other": "1"}, "url": "https://hooks.example.com/v2"}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["headers"], json!({"X-Other": "1"}));
    assert_eq!(r.body["url"], "https://hooks.example.com/v2");
    let r = api.put(&uuid, json!({"headers": null})).await.expect(200);
    assert_eq!(r.body["headers"], json!({}));
    let r = api
        .put(&uuid, json!({"status": "disabled"}))
        .await
        .expect(200);
    assert_eq!(r.body["status"], "disabled");
    assert!(r.body["disabled_reason"].is_string());
    let r = api
        .put(&uuid, json!({"status": "active"}))
        .await
        .expect(200);
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["disabled_reason"], Value::Null);
    api.put(&uuid, json!({})).await.expect(200);

    // Rotation returns a new secret.
    let r = server
        .post(
            &format!("{ENDPOINTS}/{uuid}/rotate-secret"),
            &seed.key,
            &json!({}),
        )
        .await
        .expect(200);
    let rotated = r.body["signing_secret"].as_str().unwrap();
    assert!(rotated.starts_with("whsec_") && rotated != secret);

    // Scopes.
    let read = env.key(seed.org_id, "webhooks:read").await;
    server.get(ENDPOINTS, &read).await.expect(200);
    server
        .get(&format!("{ENDPOINTS}/{uuid}"), &read)
        .await
        .expect(200);
    server.get(DELIVERIES, &read).await.expect(200);
    for (method, path) in [
        (Method::POST, ENDPOINTS.to_owned()),
        (Method::PUT, format!("{ENDPOINTS}/{uuid}")),
        (Method::DELETE, format!("{ENDPOINTS}/{uuid}")),
        (Method::POST, format!("{ENDPOINTS}/{uuid}/rotate-secret")),
        (Method::POST, format!("{ENDPOINTS}/{uuid}/test")),
        (
            Method::POST,
            format!("{DELIVERIES}/00000000-0000-0000-0000-000000000000/retry"),
        ),
    ] {
        let r = server
            .call(
                method.clone(),
                &path,
                Some(&read),
                Some(&json!({"url": "https://example.com", "events": ["*"]})),
            )
            .await
            .expect_error(403, "insufficient_scope");
        assert_eq!(
            r.body["error"]["details"]["required_scope"], "webhooks:write",
            "{method} {path}"
        );
    }
    let write = env.key(seed.org_id, "webhooks:write").await;
    server
        .get(ENDPOINTS, &write)
        .await
        .expect_error(403, "insufficient_scope");

    // Another organization sees none of it: 404 everywhere.
    let other_org = env.admin(&["org", "create", "--name", "Other"]).await;
    let other = env.key(other_org["id"].as_i64().unwrap(), "*").await;
    let r = server.get(ENDPOINTS, &other).await.expect(200);
    assert_eq!(r.body["data"], json!([]));
    for (method, path) in [
        (Method::GET, format!("{ENDPOINTS}/{uuid}")),
        (Method::PUT, format!("{ENDPOINTS}/{uuid}")),
        (Method::DELETE, format!("{ENDPOINTS}/{uuid}")),
        (Method::POST, format!("{ENDPOINTS}/{uuid}/rotate-secret")),
        (Method::POST, format!("{ENDPOINTS}/{uuid}/test")),
    ] {
        server
            .call(method, &path, Some(&other), Some(&json!({"name": "x"})))
            .await
            .expect_error(404, "not_found");
    }
    // Unknown and malformed UUIDs.
    for bad in ["01a200cd-c188-7714-bf55-af987f0a5be2", "not-a-uuid"] {
        server
            .get(&format!("{ENDPOINTS}/{bad}"), &seed.key)
            .await
            .expect_error(404, "not_found");
        server
            .post(&format!("{ENDPOINTS}/{bad}/test"), &seed.key, &json!({}))
            .await
            .expect_error(404, "not_found");
    }

    // Delete: 204, then 404.
    let r = server
        .call(
            Method::DELETE,
            &format!("{ENDPOINTS}/{uuid}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    assert!(r.text.is_empty());
    server
        .get(&format!("{ENDPOINTS}/{uuid}"), &seed.key)
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::DELETE,
            &format!("{ENDPOINTS}/{uuid}"),
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        server.get(ENDPOINTS, &seed.key).await.expect(200).body["data"],
        json!([])
    );

    // Pagination of endpoints.
    for i in 0..5 {
        api.create(&format!("https://hooks.example.com/{i}"), &["*"])
            .await;
    }
    let p1 = server
        .get(&format!("{ENDPOINTS}?limit=2"), &seed.key)
        .await
        .expect(200);
    assert_eq!(p1.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(p1.body["has_more"], true);
    assert_eq!(
        p1.body["data"][0]["url"], "https://hooks.example.com/4",
        "newest first"
    );
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("{ENDPOINTS}?limit=2&cursor={c}"),
            None => format!("{ENDPOINTS}?limit=2"),
        };
        let p = server.get(&q, &seed.key).await.expect(200);
        for e in p.body["data"].as_array().unwrap() {
            seen.push(e["url"].as_str().unwrap().to_owned());
        }
        match p.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);
    server
        .get(&format!("{ENDPOINTS}?limit=0"), &seed.key)
        .await
        .expect_error(400, "invalid_request");
    server
        .get(&format!("{ENDPOINTS}?cursor=nope"), &seed.key)
        .await
        .expect_error(400, "invalid_cursor");

    // The OpenAPI document lists the webhook operations.
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200);
    for path in [
        ENDPOINTS.to_owned(),
        format!("{ENDPOINTS}/{{uuid}}"),
        format!("{ENDPOINTS}/{{uuid}}/test"),
        format!("{ENDPOINTS}/{{uuid}}/rotate-secret"),
        EVENTS.to_owned(),
        DELIVERIES.to_owned(),
        format!("{DELIVERIES}/{{delivery_id}}"),
        format!("{DELIVERIES}/{{delivery_id}}/retry"),
    ] {
        assert!(doc.body["paths"][&path].is_object(), "{path} is documented");
    }
}
async fn endpoint_input_is_validated(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let ok_url = "https://hooks.example.com/x";

    // Not JSON: 400.
    let r = server
        .client
        .post(server.url(ENDPOINTS))
        .bearer_auth(&seed.key)
        .header("content-type", "application/json")
        .body("{\"url\": ")
        .send()
        .await
        .unwrap();
    Server::read(r).await.expect_error(400, "malformed_json");
    // The fields in order as an array would fit the struct: not an object, so a 422.
    let r = server
        .client
        .post(server.url(ENDPOINTS))
        .bearer_auth(&seed.key)
        .header("content-type", "application/json")
        .body(format!("[\"n\", \"{ok_url}\", [\"*\"], null, null]"))
        .send()
        .await
        .unwrap();
    let r = Server::read(r).await.expect_error(422, "validation_failed");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "body");

    let fields = |r: &Resp| -> Vec<String> {
        r.body["error"]["details"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap().to_owned())
            .collect()
    };
    for (body, field) in [
        (json!({"events": ["*"]}), "url"),
        (json!({"url": ok_url}), "events"),
        (json!({"url": ok_url, "events": []}), "events"),
        (json!({"url": ok_url, "events": "message.sent"}), "events"),
        (
            json!({"url": ok_url, "events": ["message.sent", "nope.created"]}),
            "events[1]",
        ),
        (
            json!({"url": ok_url, "events": ["message.*.x"]}),
            "events[0]",
        ),
        (json!({"url": ok_url, "events": ["nope.*"]}), "events[0]"),
        (
            json!({"url": ok_url, "events": ["service.order_created"]}),
            "events[0]",
        ),
        (json!({"url": ok_url, "events": [7]}), "events[0]"),
        (json!({"url": 5, "events": ["*"]}), "url"),
        (json!({"url": "not a url", "events": ["*"]}), "url"),
        (
            json!({"url": "ftp://example.com/x", "events": ["*"]}),
            "url",
        ),
        (json!({"name": "", "url": ok_url, "events": ["*"]}), "name"),
        (
            json!({"name": "x".repeat(201), "url": ok_url, "events": ["*"]}),
            "name",
        ),
        (
            json!({"url": ok_url, "events": ["*"], "status": "paused"}),
            "status",
        ),
        (
            json!({"url": ok_url, "events": ["*"], "headers": {"X-N": 1}}),
            "headers.X-N",
        ),
        (
            json!({"url": ok_url, "events": ["*"], "headers": ["X-A"]}),
            "headers",
        ),
    ] {
        let r = server
            .post(ENDPOINTS, &seed.key, &body)
            .await
            .expect_error(422, "validation_failed");
        assert!(
            fields(&r).iter().any(|f| f == field),
            "{body}: expected a problem with {field}: {}",
            r.text
        );
    }
    // The unknown event is named in the error.
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": ok_url, "events": ["nope.created"]}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert!(r.text.contains("nope.created"), "{}", r.text);

    // Reserved and malformed custom headers.
    for name in [
        "Authorization",
        "authorization",
        "Cookie",
        "Host",
        "Content-Type",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Upgrade",
        "TE",
        "Keep-Alive",
        "Proxy-Authorization",
        "X-Switchboard-Signature",
        "x-switchboard-event",
        "Bad Name",
        "",
    ] {
        let r = server
            .post(
                ENDPOINTS,
                &seed.key,
                &json!({"url": ok_url, "events": ["*"], "headers": {name: "v"}}),
            )
            .await
            .expect_error(422, "validation_failed");
        assert!(
            fields(&r).iter().any(|f| f.starts_with("headers")),
            "{name}: {}",
            r.text
        );
    }
    for value in ["a\r\nX-Injected: 1", "tab\u{1}"] {
        server
            .post(
                ENDPOINTS,
                &seed.key,
                &json!({"url": ok_url, "events": ["*"], "headers": {"X-Ok": value}}),
            )
            .await
            .expect_error(422, "validation_failed");
    }
    let many: serde_json::Map<String, Value> =
        (0..21).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": ok_url, "events": ["*"], "headers": many}),
        )
        .await
        .expect_error(422, "validation_failed");

    // Several problems are reported together.
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"name": "", "url": ok_url, "events": ["x.y"]}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert!(fields(&r).len() >= 2, "{}", r.text);

    // PUT validates the same way, and refuses nulls for required fields.
    let ep = api.create(ok_url, &["*"]).await;
    for body in [
        json!({"events": ["nope.x"]}),
        json!({"events": []}),
        json!({"name": null}),
        json!({"url": null}),
        json!({"events": null}),
        json!({"status": "paused"}),
        json!({"headers": {"Cookie": "a=b"}}),
        json!({"url": "ftp://example.com/"}),
    ] {
        api.put(&ep.uuid, body.clone())
            .await
            .expect_error(422, "validation_failed");
    }
    let r = server
        .client
        .put(server.url(&format!("{ENDPOINTS}/{}", ep.uuid)))
        .bearer_auth(&seed.key)
        .header("content-type", "application/json")
        .body("nope")
        .send()
        .await
        .unwrap();
    Server::read(r).await.expect_error(400, "malformed_json");
    // Nothing was changed by the refused requests.
    let now = api.get_endpoint(&ep.uuid).await;
    assert_eq!(now["events"], json!(["*"]));
    assert_eq!(now["headers"], json!({}));
}
async fn unsafe_urls_are_refused_without_the_development_flag(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let api = Api::new(&server, &seed.key);
    for url in [
        "http://hooks.example.com/x",
        "https://hooks.example.com:8443/x",
        "https://hooks.example.com:80/x",
        "https://user:pass@hooks.example.com/x",
        "https://user@hooks.example.com/x",
        "https://127.0.0.1/x",
        "https://127.1/x",
        "https://2130706433/x",
        "https://0x7f000001/x",
        "https://0x7f.0.0.1/x",
        "https://017700000001/x",
        "https://0177.0.0.1/x",
        "https://0/x",
        "https://0.0.0.0/x",
        "https://10.1.2.3/x",
        "https://172.16.5.4/x",
        "https://192.168.0.1/x",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/x",
        "https://224.0.0.1/x",
        "https://255.255.255.255/x",
        "https://[::1]/x",
        "https://[::]/x",
        "https://[::ffff:127.0.0.1]/x",
        "https://[::ffff:7f00:1]/x",
        "https://[::ffff:a9fe:a9fe]/x",
        "https://[::127.0.0.1]/x",
        "https://[64:ff9b::a00:1]/x",
        "https://[2002:7f00:1::]/x",
        "https://[2001::1]/x",
        "https://[fc00::1]/x",
        "https://[fd00:ec2::254]/x",
        "https://[fe80::1]/x",
        "https://[ff02::1]/x",
        "https://localhost/x",
        "https://LOCALHOST./x",
        "https://app.localhost/x",
        "https://printer.local/x",
        "https://metadata.google.internal/x",
        "https://db.internal/x",
        "https://intranet/x",
        "https://router.lan/x",
        "https://nas.home.arpa/x",
    ] {
        let r = server
            .post(ENDPOINTS, &seed.key, &json!({"url": url, "events": ["*"]}))
            .await
            .expect_error(422, "unsafe_url");
        assert!(!r.body["error"]["message"].as_str().unwrap().is_empty());
    }
    // Updates are checked too, and change nothing when refused.
    let ep = api.create("https://hooks.example.com/ok", &["*"]).await;
    api.put(&ep.uuid, json!({"url": "https://127.0.0.1/x"}))
        .await
        .expect_error(422, "unsafe_url");
    api.put(&ep.uuid, json!({"url": "http://hooks.example.com/x"}))
        .await
        .expect_error(422, "unsafe_url");
    assert_eq!(
        api.get_endpoint(&ep.uuid).await["url"],
        "https://hooks.example.com/ok"
    );
    // A public address and a name that does not resolve are accepted.
    api.create("https://93.184.215.14/hook", &["*"]).await;
    api.create("https://hooks.not-registered-yet.example.com/hook", &["*"])
        .await;

    // At delivery time: an endpoint whose URL is not allowed (here: a loopback receiver
    // accepted by an earlier configuration) gets failed attempts, never a request.
    let rx = Receiver::start().await;
    drop(server);
    let dev = env.start(&fast()).await;
    let loopback = Api::new(&dev, &seed.key)
        .create(&rx.url("/hook"), &["*"])
        .await;
    drop(dev);
    let server = env
        .start(&[
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms"),
            ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "100ms"),
        ])
        .await;
    let api = Api::new(&server, &seed.key);
    let (id, _) = api.test(&loopback.uuid).await;
    let d = api.wait_status(&id, "retries_exhausted").await;
    assert_eq!(d["error_code"], "unsafe_target");
    assert_eq!(d["attempts"], 2);
    assert!(
        rx.all().is_empty(),
        "no request reached the loopback receiver"
    );
}
async fn deliveries_are_signed_envelopes_with_the_documented_headers(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({
                "name": "signed",
                "url": rx.url("/hook?source=switchboard"),
                "events": ["security.*"],
                "headers": {"X-Tenant": "acme", "X-Api-Version": "2026-08"},
            }),
        )
        .await
        .expect(201);
    let uuid = r.body["uuid"].as_str().unwrap().to_owned();
    let secret = r.body["signing_secret"].as_str().unwrap().to_owned();

    let before = chrono::Utc::now().timestamp();
    let (delivery_id, event_id) = api.test(&uuid).await;
    let got = rx.wait_for("/hook", 1, WAIT).await;
    let req = &got[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("x-switchboard-event"), Some("integration.test"));
    assert_eq!(
        req.header("x-switchboard-delivery"),
        Some(delivery_id.as_str())
    );
    assert_eq!(req.header("x-switchboard-attempt"), Some("1"));
    assert_eq!(req.header("x-tenant"), Some("acme"));
    assert_eq!(req.header("x-api-version"), Some("2026-08"));
    assert!(
        req.header("user-agent")
            .unwrap()
            .starts_with("Switchboard-Webhooks/")
    );
    let ts: i64 = req
        .header("x-switchboard-timestamp")
        .unwrap()
        .parse()
        .unwrap();
    assert!((ts - before).abs() <= 5, "timestamp {ts} is now");
    let sig = req.header("x-switchboard-signature").unwrap();
    assert!(sig.starts_with("v1=") && sig.len() == 3 + 64, "{sig}");
    assert!(
        sig[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert!(
        signed_by(&secret, req),
        "the hmac crate verifies the signature"
    );
    assert_eq!(
        python_signature(
            &secret,
            req.header("x-switchboard-timestamp").unwrap(),
            &req.body
        ),
        sig,
        "Python's hmac verifies the signature"
    );
    assert!(!signed_by("whsec_wrong", req));

    // The envelope of specification 2.11.
    let body = req.json();
    assert_eq!(body["event"], "integration.test");
    assert_eq!(body["metadata"]["event_id"], event_id.as_str());
    assert_eq!(body["metadata"]["event_type"], "integration.test");
    assert_eq!(body["metadata"]["api_version"], "v1");
    assert_eq!(body["metadata"]["organization_id"], seed.org_id);
    let occurred = body["metadata"]["occurred_at"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(occurred).is_ok(),
        "{occurred}"
    );
    assert!(body["channel"].is_null(), "no channel context");
    assert!(body["data"].is_object());
    assert_eq!(body["data"]["endpoint_uuid"], uuid.as_str());

    // A security event from the admin tools, with no key material.
    let created = env
        .admin(&[
            "key",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--scopes",
            "channels:read",
        ])
        .await;
    let got = rx.wait_for("/hook", 2, WAIT).await;
    let req = &got[1];
    assert_eq!(req.event(), "security.api_key_created");
    assert!(signed_by(&secret, req));
    let body = req.json();
    assert_eq!(body["event"], "security.api_key_created");
    assert_eq!(body["data"]["api_key_id"], created["id"]);
    let text = String::from_utf8_lossy(&req.body);
    assert!(
        !text.contains(created["key"].as_str().unwrap()),
        "never the key: {text}"
    );
    assert_ne!(req.delivery(), delivery_id);

    // The ledger shows both as delivered, with the answer's status.
    let d = api.wait_status(&delivery_id, "delivered").await;
    assert_eq!(d["attempts"], 1);
    assert_eq!(d["response_status"], 200);
    assert_eq!(d["event_id"], event_id.as_str());
    assert_eq!(d["endpoint_uuid"], uuid.as_str());
    assert!(d["delivered_at"].is_string());
    assert_eq!(d["next_attempt_at"], Value::Null);
    assert_eq!(d["attempt_log"][0]["response_status"], 200);
    assert_eq!(
        d["attempt_log"][0]["response_body_excerpt"],
        "{\"received\":true}"
    );
    assert_eq!(d["payload"]["metadata"]["event_id"], event_id.as_str());
}
async fn subscriptions_choose_the_endpoints(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    api.create(&rx.url("/all"), &["*"]).await;
    api.create(&rx.url("/ns"), &["security.*"]).await;
    api.create(&rx.url("/exact"), &["security.api_key_revoked"])
        .await;
    api.create(&rx.url("/other"), &["message.sent", "crm.*"])
        .await;
    let disabled = api.create(&rx.url("/disabled"), &["*"]).await;
    api.put(&disabled.uuid, json!({"status": "disabled"}))
        .await
        .expect(200);
    // Two endpoints with the same URL: one delivery per URL.
    api.create(&rx.url("/same"), &["security.api_key_created"])
        .await;
    api.create(&rx.url("/same"), &["security.*"]).await;
    // Another organization's endpoint never sees this organization's events.
    let other_org = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other_org["id"].as_i64().unwrap(), "*").await;
    Api::new(&server, &other_key)
        .create(&rx.url("/foreign"), &["*"])
        .await;

    let k = env
        .admin(&[
            "key",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--scopes",
            "channels:read",
        ])
        .await;
    env.admin(&["key", "revoke", &k["id"].to_string()]).await;
    rx.wait_until(WAIT, |all| {
        let n = |p: &str| all.iter().filter(|r| r.path == p).count();
        n("/all") >= 2 && n("/ns") >= 2 && n("/exact") >= 1 && n("/same") >= 2
    })
    .await;
    // A marker event that everything subscribed to `*` receives last.
    let marker = api.create(&rx.url("/marker"), &["*"]).await;
    api.test(&marker.uuid).await;
    rx.wait_for("/marker", 1, WAIT).await;
    // Everything else has arrived by now (the same dispatcher, earlier events).
    rx.wait_until(WAIT, |all| {
        all.iter().filter(|r| r.path == "/all").count() >= 2
    })
    .await;

    let created = "security.api_key_created".to_owned();
    let revoked = "security.api_key_revoked".to_owned();
    let mut all = events_of(&rx.requests("/all"));
    all.sort();
    assert_eq!(all, vec![created.clone(), revoked.clone()]);
    let mut ns = events_of(&rx.requests("/ns"));
    ns.sort();
    assert_eq!(ns, vec![created.clone(), revoked.clone()]);
    assert_eq!(events_of(&rx.requests("/exact")), vec![revoked.clone()]);
    let mut same = events_of(&rx.requests("/same"));
    same.sort();
    assert_eq!(
        same,
        vec![created, revoked],
        "one delivery per event and URL"
    );
    assert!(rx.requests("/other").is_empty());
    assert!(rx.requests("/disabled").is_empty());
    assert!(rx.requests("/foreign").is_empty());
}
async fn retryable_failures_are_retried_until_delivered(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_WEBHOOK_TIMEOUT", "1s")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let cases: Vec<(&str, Vec<Behaviour>, Vec<&str>)> = vec![
        (
            "/5xx",
            vec![
                Behaviour::Status(500),
                Behaviour::Status(502),
                Behaviour::Status(503),
            ],
            vec!["http_error", "http_error", "http_error"],
        ),
        (
            "/4xx",
            vec![
                Behaviour::Status(408),
                Behaviour::Status(425),
                Behaviour::Status(429),
            ],
            vec!["http_error", "http_error", "http_error"],
        ),
        ("/close", vec![Behaviour::Close], vec!["connection_closed"]),
        ("/hang", vec![Behaviour::Hang], vec!["timeout"]),
        (
            "/redirect",
            vec![Behaviour::Redirect(
                302,
                "https://elsewhere.example.com/".into(),
            )],
            vec!["redirect_not_followed"],
        ),
    ];
    let mut ids = Vec::new();
    for (path, script, _) in &cases {
        rx.script(path, script.clone());
        let ep = api.create(&rx.url(path), &["integration.test"]).await;
        ids.push((api.test(&ep.uuid).await.0, ep.secret));
    }
    // A refused connection (nothing listens on the port) is retried too.
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused = api
        .create(&format!("http://127.0.0.1:{closed_port}/x"), &["*"])
        .await;
    let (refused_id, _) = api.test(&refused.uuid).await;

    for ((path, script, codes), (id, secret)) in cases.iter().zip(&ids) {
        let d = api.wait_status(id, "delivered").await;
        let n = script.len() + 1;
        assert_eq!(d["attempts"], n as i64, "{path}: {d:#}");
        let log = d["attempt_log"].as_array().unwrap();
        assert_eq!(log.len(), n, "{path}");
        for (i, code) in codes.iter().enumerate() {
            assert_eq!(log[i]["number"], (i + 1) as i64);
            assert_eq!(
                log[i]["error_code"],
                *code,
                "{path} attempt {}: {d:#}",
                i + 1
            );
            assert!(log[i]["duration_ms"].is_i64());
        }
        assert_eq!(log[n - 1]["response_status"], 200);
        assert_eq!(log[n - 1]["error_code"], Value::Null);
        // The receiver saw the same delivery id with attempts 1..n, each freshly signed.
        let reqs = rx.requests(path);
        assert_eq!(reqs.len(), n, "{path}");
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(r.attempt(), (i + 1) as u32);
            assert_eq!(r.delivery(), *id);
            assert!(signed_by(secret, r), "{path} attempt {}", i + 1);
        }
        assert!(
            reqs.windows(2)
                .all(|w| w[1].instant >= w[0].instant + Duration::from_millis(90)),
            "{path}: retries wait the configured delays"
        );
    }
    let d = api
        .wait_delivery(&refused_id, "retrying after a refused connection", |d| {
            d["attempts"].as_i64().unwrap_or(0) >= 2
        })
        .await;
    assert_eq!(
        d["attempt_log"][0]["error_code"], "connection_failed",
        "{d:#}"
    );
    assert_eq!(d["attempt_log"][0]["response_status"], Value::Null);
}
async fn permanent_rejections_are_not_retried(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let watcher = api.create(&rx.url("/watcher"), &["webhook.*"]).await;
    for status in [400u16, 401, 403, 404, 410, 422] {
        let path = format!("/p{status}");
        rx.respond(&path, Behaviour::Status(status));
        let ep = api.create(&rx.url(&path), &["webhook.*"]).await;
        let (id, _) = api.test(&ep.uuid).await;
        let d = api.wait_status(&id, "failed").await;
        assert_eq!(d["attempts"], 1, "{status}");
        assert_eq!(d["response_status"], status);
        assert_eq!(d["error_code"], "http_error");
        assert_eq!(d["next_attempt_at"], Value::Null);
        // webhook.delivery_failed goes to the other endpoints, not the failing one.
        let got = rx
            .wait_until(WAIT, |all| {
                all.iter()
                    .any(|r| r.path == "/watcher" && r.json()["data"]["delivery_id"] == id.as_str())
            })
            .await;
        let note = got
            .iter()
            .find(|r| r.path == "/watcher" && r.json()["data"]["delivery_id"] == id.as_str())
            .unwrap();
        assert_eq!(note.event(), "webhook.delivery_failed");
        assert!(signed_by(&watcher.secret, note));
        let data = note.json()["data"].clone();
        assert_eq!(data["status"], "failed");
        assert_eq!(data["endpoint_uuid"], ep.uuid.as_str());
        assert_eq!(data["event"], "integration.test");
        assert_eq!(data["response_status"], status);
        assert_eq!(data["attempts"], 1);
        assert_eq!(
            rx.requests(&path).len(),
            1,
            "{status}: one attempt, and not its own failure"
        );
    }
}
async fn retry_after_is_honoured(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.script("/429", vec![Behaviour::RetryAfter(429, "2".into())]);
    rx.script("/503", vec![Behaviour::RetryAfter(503, "1".into())]);
    // On other statuses Retry-After is ignored and the schedule (100 ms) applies.
    rx.script("/500", vec![Behaviour::RetryAfter(500, "30".into())]);
    let mut ids = HashMap::new();
    for p in ["/429", "/503", "/500"] {
        let ep = api.create(&rx.url(p), &["integration.test"]).await;
        ids.insert(p, api.test(&ep.uuid).await.0);
    }
    for (p, min, max) in [
        ("/429", 2000u64, 10_000u64),
        ("/503", 1000, 10_000),
        ("/500", 90, 5000),
    ] {
        let reqs = rx.wait_for(p, 2, WAIT).await;
        let gap = reqs[1].instant.duration_since(reqs[0].instant);
        assert!(
            gap >= Duration::from_millis(min) && gap < Duration::from_millis(max),
            "{p}: the retry came after {gap:?}"
        );
        let d = api.wait_status(&ids[p], "delivered").await;
        assert_eq!(
            d["attempt_log"][0]["response_status"],
            p[1..].parse::<i64>().unwrap()
        );
    }
}
async fn exhausted_retries_emit_delivery_failed_to_other_endpoints(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/down", Behaviour::Status(500));
    let down = api.create(&rx.url("/down"), &["*"]).await;
    let watcher = api
        .create(&rx.url("/watcher"), &["webhook.delivery_failed"])
        .await;
    let (id, event_id) = api.test(&down.uuid).await;
    let d = api.wait_status(&id, "retries_exhausted").await;
    assert_eq!(d["attempts"], 4, "delays + 1 attempts");
    assert_eq!(d["response_status"], 500);
    assert_eq!(d["error_code"], "http_error");
    assert_eq!(d["next_attempt_at"], Value::Null);
    let log = d["attempt_log"].as_array().unwrap();
    assert_eq!(log.len(), 4);
    let reqs = rx.requests("/down");
    assert_eq!(reqs.len(), 4);
    assert_eq!(
        reqs.iter()
            .map(ReceivedRequest::attempt)
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    // The gaps follow the configured delays (100, 200, 300 ms, plus at most 10 % jitter).
    for (i, want) in [100u64, 200, 300].iter().enumerate() {
        let gap = reqs[i + 1].instant.duration_since(reqs[i].instant);
        assert!(gap >= Duration::from_millis(*want - 5), "gap {i}: {gap:?}");
    }
    let got = rx.wait_for("/watcher", 1, WAIT).await;
    let note = &got[0];
    assert_eq!(note.event(), "webhook.delivery_failed");
    assert!(signed_by(&watcher.secret, note));
    let data = note.json()["data"].clone();
    assert_eq!(data["delivery_id"], id.as_str());
    assert_eq!(data["event_id"], event_id.as_str());
    assert_eq!(data["status"], "retries_exhausted");
    assert_eq!(data["attempts"], 4);
    assert_eq!(data["endpoint_uuid"], down.uuid.as_str());
    // The failing endpoint is subscribed to `*` but does not receive its own failure (nor
    // does the failure of that notification, if any, loop).
    let down_events: HashSet<String> = events_of(&rx.requests("/down")).into_iter().collect();
    assert_eq!(down_events, HashSet::from(["integration.test".to_owned()]));
    let e = api.get_endpoint(&down.uuid).await;
    assert_eq!(e["consecutive_failures"], 1, "one failed delivery");
    assert_eq!(e["status"], "active");
}
async fn hostile_receivers_are_recorded_failures(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_TIMEOUT", "1s"),
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/huge", Behaviour::HugeBody(20 * 1024 * 1024));
    rx.respond("/slow-ok", Behaviour::Slow(Duration::from_millis(300), 200));
    rx.respond("/slow-late", Behaviour::Slow(Duration::from_secs(5), 200));
    rx.respond("/hang", Behaviour::Hang);
    rx.respond("/close", Behaviour::Close);
    rx.respond(
        "/redirect",
        Behaviour::Redirect(301, "https://example.com/?token=s3cret".into()),
    );
    let mut ids = HashMap::new();
    for p in [
        "/huge",
        "/slow-ok",
        "/slow-late",
        "/hang",
        "/close",
        "/redirect",
    ] {
        let ep = api.create(&rx.url(p), &["integration.test"]).await;
        ids.insert(p, api.test(&ep.uuid).await.0);
    }
    let d = api.wait_status(&ids["/huge"], "delivered").await;
    let excerpt = d["attempt_log"][0]["response_body_excerpt"]
        .as_str()
        .unwrap();
    assert_eq!(excerpt.len(), 1024, "the first KiB is kept");
    assert!(excerpt.bytes().all(|b| b == b'x'));
    api.wait_status(&ids["/slow-ok"], "delivered").await;
    for (p, code) in [
        ("/slow-late", "timeout"),
        ("/hang", "timeout"),
        ("/close", "connection_closed"),
        ("/redirect", "redirect_not_followed"),
    ] {
        let d = api.wait_status(&ids[p], "retries_exhausted").await;
        assert_eq!(d["attempts"], 2, "{p}");
        assert_eq!(d["error_code"], code, "{p}: {d:#}");
        for a in d["attempt_log"].as_array().unwrap() {
            assert_eq!(a["error_code"], code, "{p}");
            assert!(
                a["duration_ms"].as_i64().unwrap() < 4000,
                "{p}: bounded by the timeout"
            );
        }
        if p == "/redirect" {
            assert_eq!(d["response_status"], 301);
            let m = d["error_message"].as_str().unwrap();
            assert!(m.contains("redirect") && !m.contains("s3cret"), "{m}");
        }
    }
    assert_eq!(
        rx.requests("/redirect").len(),
        2,
        "the redirect was never followed"
    );
    // The dispatcher is still healthy.
    let fine = api.create(&rx.url("/fine"), &["integration.test"]).await;
    let (id, _) = api.test(&fine.uuid).await;
    api.wait_status(&id, "delivered").await;
}
async fn endpoints_are_disabled_after_consecutive_failed_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "3"),
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/flaky", Behaviour::Status(500));
    let flaky = api.create(&rx.url("/flaky"), &["*"]).await;
    let watcher = api
        .create(&rx.url("/watcher"), &["webhook.endpoint_disabled"])
        .await;

    // A success resets the counter: fail, fail, succeed, then three failures disable.
    for round in 0..2 {
        let (id, _) = api.test(&flaky.uuid).await;
        api.wait_status(&id, "retries_exhausted").await;
        let e = api.get_endpoint(&flaky.uuid).await;
        assert_eq!(e["consecutive_failures"], round + 1);
        assert_eq!(e["status"], "active");
    }
    rx.respond("/flaky", Behaviour::Status(204));
    let (id, _) = api.test(&flaky.uuid).await;
    api.wait_status(&id, "delivered").await;
    assert_eq!(
        api.get_endpoint(&flaky.uuid).await["consecutive_failures"],
        0
    );
    rx.respond("/flaky", Behaviour::Status(400));
    for _ in 0..3 {
        let (id, _) = api.test(&flaky.uuid).await;
        api.wait_status(&id, "failed").await;
    }
    let e = api
        .wait_endpoint(&flaky.uuid, "disabled", |e| e["status"] == "disabled")
        .await;
    assert_eq!(e["consecutive_failures"], 3);
    let reason = e["disabled_reason"].as_str().unwrap();
    assert!(
        reason.contains("3 consecutive failed deliveries"),
        "{reason}"
    );
    assert!(e["disabled_at"].is_string());

    // The organization's other subscribed endpoints hear about it.
    let got = rx.wait_for("/watcher", 1, WAIT).await;
    assert_eq!(got[0].event(), "webhook.endpoint_disabled");
    assert!(signed_by(&watcher.secret, &got[0]));
    let data = got[0].json()["data"].clone();
    assert_eq!(data["endpoint_uuid"], flaky.uuid.as_str());
    assert_eq!(data["consecutive_failures"], 3);
    assert_eq!(data["disabled_reason"], reason);

    // While disabled, new events are not delivered to it.
    let seen = rx.requests("/flaky").len();
    let marker = api.create(&rx.url("/marker"), &["security.*"]).await;
    env.admin(&[
        "key",
        "create",
        "--org",
        &seed.org_id.to_string(),
        "--scopes",
        "channels:read",
    ])
    .await;
    rx.wait_for("/marker", 1, WAIT).await;
    let _ = marker;
    assert_eq!(
        rx.requests("/flaky").len(),
        seen,
        "a disabled endpoint receives nothing"
    );

    // Re-enabling resets the counter; deliveries flow again.
    rx.respond("/flaky", Behaviour::Status(200));
    let e = api
        .put(&flaky.uuid, json!({"status": "active"}))
        .await
        .expect(200);
    assert_eq!(e.body["status"], "active");
    assert_eq!(e.body["consecutive_failures"], 0);
    assert_eq!(e.body["disabled_reason"], Value::Null);
    let (id, _) = api.test(&flaky.uuid).await;
    api.wait_status(&id, "delivered").await;
}
async fn disabled_endpoints_hold_deliveries_until_re_enabled(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms,2s")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.script("/ep", vec![Behaviour::Status(500), Behaviour::Status(500)]);
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let (id, _) = api.test(&ep.uuid).await;
    // After two failed attempts the third is scheduled 2 s later: disable before it.
    rx.wait_for("/ep", 2, WAIT).await;
    api.wait_delivery(&id, "retrying after attempt 2", |d| {
        d["attempts"] == 2 && d["status"] == "retrying" && d["next_attempt_at"].is_string()
    })
    .await;
    api.put(&ep.uuid, json!({"status": "disabled"}))
        .await
        .expect(200);
    let d = api.delivery(&id).await;
    assert_eq!(d["status"], "retrying");
    assert_eq!(d["next_attempt_at"], Value::Null, "held: nothing scheduled");
    // Well past the scheduled time, no attempt was made.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(rx.requests("/ep").len(), 2);
    assert_eq!(api.delivery(&id).await["attempts"], 2);
    // A test event still reaches a disabled endpoint (to check it before re-enabling).
    let (test_id, _) = api.test(&ep.uuid).await;
    api.wait_status(&test_id, "delivered").await;
    assert_eq!(api.get_endpoint(&ep.uuid).await["status"], "disabled");
    assert_eq!(api.delivery(&id).await["attempts"], 2, "still held");
    // Re-enabling sends it at once.
    api.put(&ep.uuid, json!({"status": "active"}))
        .await
        .expect(200);
    let d = api.wait_status(&id, "delivered").await;
    assert_eq!(d["attempts"], 3);
    let last = rx
        .requests("/ep")
        .into_iter()
        .find(|r| r.delivery() == id && r.attempt() == 3);
    assert!(
        last.is_some(),
        "attempt 3 of the held delivery reached the receiver"
    );
}
async fn rotating_the_secret_changes_the_signature(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;
    api.test(&ep.uuid).await;
    let first = rx.wait_for("/ep", 1, WAIT).await;
    assert!(signed_by(&ep.secret, &first[0]));

    // An immediate cut-over (`0s`): the old secret stops signing at once.
    let r = server
        .post(
            &format!("{ENDPOINTS}/{}/rotate-secret", ep.uuid),
            &seed.key,
            &json!({"grace_period": "0s"}),
        )
        .await
        .expect(200);
    let new_secret = r.body["signing_secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, ep.secret);
    assert_eq!(r.body["uuid"], ep.uuid.as_str());
    assert!(
        !server
            .get(&format!("{ENDPOINTS}/{}", ep.uuid), &seed.key)
            .await
            .text
            .contains(&new_secret)
    );

    api.test(&ep.uuid).await;
    let got = rx.wait_for("/ep", 2, WAIT).await;
    assert!(
        signed_by(&new_secret, &got[1]),
        "signed with the new secret"
    );
    assert!(!signed_by(&ep.secret, &got[1]), "not with the old one");
    assert_eq!(
        got[1]
            .header("x-switchboard-signature")
            .unwrap()
            .matches("v1=")
            .count(),
        1,
        "one signature only"
    );
    // The secret is never logged, and is stored only encrypted.
    assert!(!server.logs().contains(&new_secret) && !server.logs().contains(&ep.secret));
    assert_not_stored_in_clear(&env, &[&new_secret, &ep.secret]).await;
}
/// Scans the database for the secrets in clear: every file of a SQLite database (and its
/// write-ahead log), or every stored signing secret on PostgreSQL.
async fn assert_not_stored_in_clear(env: &TestEnv, secrets: &[&str]) {
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
                for secret in secrets {
                    let hex_part = &secret["whsec_".len()..];
                    assert!(
                        !bytes
                            .windows(hex_part.len())
                            .any(|w| w == hex_part.as_bytes()),
                        "a signing secret is in clear in {name}"
                    );
                }
            }
            assert!(scanned > 0, "the database files were scanned");
        }
        Backend::Postgres => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&env.database_url)
                .await
                .unwrap();
            let stored: Vec<Vec<u8>> = sqlx::query_scalar(
                "SELECT signing_secret FROM webhook_endpoints
                 UNION ALL SELECT signing_secret FROM webhook_endpoint_secrets",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            assert!(!stored.is_empty());
            for value in stored {
                for secret in secrets {
                    let hex_part = &secret["whsec_".len()..];
                    assert!(
                        !value
                            .windows(hex_part.len())
                            .any(|w| w == hex_part.as_bytes())
                    );
                }
            }
        }
    }
}
async fn test_events_go_to_one_endpoint_only(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let a = api.create(&rx.url("/a"), &["*"]).await;
    api.create(&rx.url("/b"), &["*"]).await;
    api.create(&rx.url("/c"), &["integration.test"]).await;
    // Even an endpoint not subscribed to integration.test receives its own test.
    let d = api.create(&rx.url("/d"), &["crm.deal_won"]).await;
    let (id_a, _) = api.test(&a.uuid).await;
    let (id_d, _) = api.test(&d.uuid).await;
    api.wait_status(&id_a, "delivered").await;
    api.wait_status(&id_d, "delivered").await;
    // Then an event that /b and /c would receive if test events leaked... is a security
    // event to /b (subscribed to `*`): it arrives after anything sent before it.
    env.admin(&[
        "key",
        "create",
        "--org",
        &seed.org_id.to_string(),
        "--scopes",
        "channels:read",
    ])
    .await;
    rx.wait_for("/b", 1, WAIT).await;
    assert_eq!(events_of(&rx.requests("/a"))[0], "integration.test");
    assert_eq!(
        events_of(&rx.requests("/b")),
        vec!["security.api_key_created"]
    );
    assert!(rx.requests("/c").is_empty());
    assert_eq!(events_of(&rx.requests("/d")), vec!["integration.test"]);
    // The ledger holds one delivery per test.
    let r = api.list("?event=integration.test").await.expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
}
async fn deleted_endpoints_stop_receiving(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,5s")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/gone", Behaviour::Status(503));
    let gone = api.create(&rx.url("/gone"), &["*"]).await;
    let (id, _) = api.test(&gone.uuid).await;
    api.wait_delivery(&id, "waiting for attempt 3", |d| d["attempts"] == 2)
        .await;
    server
        .call(
            Method::DELETE,
            &format!("{ENDPOINTS}/{}", gone.uuid),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    let d = api.wait_status(&id, "failed").await;
    assert_eq!(d["error_code"], "endpoint_deleted");
    assert_eq!(d["next_attempt_at"], Value::Null);
    let marker = api.create(&rx.url("/marker"), &["security.*"]).await;
    let _ = marker;
    env.admin(&[
        "key",
        "create",
        "--org",
        &seed.org_id.to_string(),
        "--scopes",
        "channels:read",
    ])
    .await;
    rx.wait_for("/marker", 1, WAIT).await;
    assert_eq!(
        rx.requests("/gone").len(),
        2,
        "no new events, no more attempts"
    );
}
async fn security_events_from_the_admin_tools_are_delivered(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/security"), &["security.*"]).await;
    let org = seed.org_id.to_string();
    let created = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--name",
            "crm",
            "--scopes",
            "messages:write",
        ])
        .await;
    env.admin(&["key", "revoke", &created["id"].to_string()])
        .await;
    let rotated = env
        .admin(&["key", "rotate", &seed.key_id.to_string()])
        .await;
    // create (1 created) + revoke (1 revoked) + rotate (1 created, 1 revoked).
    let got = rx.wait_for("/security", 4, WAIT).await;
    let names = events_of(&got);
    let created_events = names
        .iter()
        .filter(|n| *n == "security.api_key_created")
        .count();
    let revoked_events = names
        .iter()
        .filter(|n| *n == "security.api_key_revoked")
        .count();
    assert_eq!((created_events, revoked_events), (2, 2), "{names:?}");
    for r in &got {
        assert!(signed_by(&ep.secret, r));
        let text = String::from_utf8_lossy(&r.body);
        assert!(!text.contains(created["key"].as_str().unwrap()));
        assert!(!text.contains(rotated["key"].as_str().unwrap()));
        assert!(!text.contains(&seed.key));
        let body = r.json();
        assert!(body["data"]["api_key_id"].is_i64());
        assert!(body["data"]["prefix"].as_str().unwrap().starts_with("sbk_"));
    }
    let revoked = got
        .iter()
        .find(|r| {
            r.json()["data"]["api_key_id"] == created["id"]
                && r.event() == "security.api_key_revoked"
        })
        .expect("the revocation of the created key");
    assert!(revoked.json()["data"]["revoked_at"].is_string());
}
async fn a_slow_endpoint_does_not_starve_the_others(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_CONCURRENCY", "6"),
            ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "2"),
            ("SWITCHBOARD_WEBHOOK_TIMEOUT", "8s"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/slow", Behaviour::Hang);
    let slow = api.create(&rx.url("/slow"), &["integration.test"]).await;
    let fast_ep = api.create(&rx.url("/fast"), &["integration.test"]).await;
    for _ in 0..12 {
        api.test(&slow.uuid).await;
    }
    rx.wait_for("/slow", 2, WAIT).await;
    let start = std::time::Instant::now();
    let mut fast_ids = Vec::new();
    for _ in 0..10 {
        fast_ids.push(api.test(&fast_ep.uuid).await.0);
    }
    rx.wait_for("/fast", 10, WAIT).await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "the fast endpoint was served while the slow one hung ({took:?})"
    );
    assert_eq!(
        rx.requests("/slow").len(),
        2,
        "the slow endpoint holds only its own two slots"
    );
    for id in &fast_ids {
        api.wait_status(id, "delivered").await;
    }
}
async fn kill_9_with_deliveries_pending_loses_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = with(&[
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "3s"),
        ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "2"),
        (
            "SWITCHBOARD_WEBHOOK_RETRY_DELAYS",
            "200ms,200ms,200ms,200ms,200ms",
        ),
    ]);
    let mut server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/ep", Behaviour::Hang);
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(api.test(&ep.uuid).await.0);
    }
    // Two attempts are in flight (hanging), six are pending.
    rx.wait_for("/ep", 2, WAIT).await;
    drop(api);
    server.kill().await;

    rx.respond("/ep", Behaviour::Status(200));
    let server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    for id in &ids {
        let d = api.wait_status(id, "delivered").await;
        assert!(d["attempts"].as_i64().unwrap() >= 1);
    }
    // Every delivery reached the receiver with a 2xx; the two interrupted ones were taken
    // over after their leases expired and their lost attempt is logged.
    let delivered: HashSet<String> = rx
        .requests("/ep")
        .iter()
        .map(ReceivedRequest::delivery)
        .collect();
    assert_eq!(delivered.len(), 8);
    let interrupted: Vec<Value> = {
        let mut v = Vec::new();
        for id in &ids {
            let d = api.delivery(id).await;
            if d["attempt_log"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["error_code"] == "attempt_interrupted")
            {
                v.push(d);
            }
        }
        v
    };
    // Two attempts were in flight at the kill (one, if the kill fell between an attempt's
    // timeout and the next claim on a loaded machine).
    assert!(
        (1..=2).contains(&interrupted.len()),
        "the attempts in flight at the kill: {interrupted:#?}"
    );
    for d in &interrupted {
        assert!(d["attempts"].as_i64().unwrap() >= 2);
        assert_eq!(d["status"], "delivered");
    }
}
async fn two_instances_deliver_each_attempt_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = with(&[("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,100ms")]);
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let rx = Receiver::start().await;
    // Every third attempt fails, so retries are shared between the instances as well.
    rx.script(
        "/ep",
        (0..200)
            .map(|i| {
                if i % 3 == 0 {
                    Behaviour::Status(500)
                } else {
                    Behaviour::Status(200)
                }
            })
            .collect(),
    );
    let api_a = Api::new(&a, &seed.key);
    let api_b = Api::new(&b, &seed.key);
    let ep = api_a.create(&rx.url("/ep"), &["*"]).await;
    let mut ids = Vec::new();
    for i in 0..60 {
        let api = if i % 2 == 0 { &api_a } else { &api_b };
        ids.push(api.test(&ep.uuid).await.0);
    }
    for id in &ids {
        api_a
            .wait_delivery(id, "finished", |d| {
                d["status"] == "delivered" || d["status"] == "retries_exhausted"
            })
            .await;
    }
    let reqs = rx.requests("/ep");
    let mut seen = HashSet::new();
    for r in &reqs {
        assert!(
            seen.insert((r.delivery(), r.attempt())),
            "attempt {} of {} was made twice",
            r.attempt(),
            r.delivery()
        );
    }
    // Each delivery's attempts are 1..n without gaps, matching the ledger.
    let mut per: HashMap<String, Vec<u32>> = HashMap::new();
    for r in &reqs {
        per.entry(r.delivery()).or_default().push(r.attempt());
    }
    assert_eq!(per.len(), 60);
    for id in &ids {
        let mut got = per[id].clone();
        got.sort();
        let d = api_b.delivery(id).await;
        let n = d["attempts"].as_i64().unwrap() as u32;
        assert_eq!(got, (1..=n).collect::<Vec<_>>(), "{id}");
    }
}
async fn sigterm_lets_attempts_in_flight_finish(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/ep", Behaviour::Slow(Duration::from_millis(1500), 200));
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let (id, _) = api.test(&ep.uuid).await;
    rx.wait_for("/ep", 1, WAIT).await;
    drop(api);
    assert_eq!(server.terminate().await, Some(0));
    assert!(server.logs().contains("webhook dispatcher stopped"));
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let d = api.delivery(&id).await;
    assert_eq!(
        d["status"], "delivered",
        "the attempt in flight finished during shutdown: {d:#}"
    );
    assert_eq!(d["attempts"], 1);
    assert_eq!(rx.requests("/ep").len(), 1);
}
async fn sigterm_hands_back_attempts_that_outlast_the_grace_period(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = with(&[
        ("SWITCHBOARD_SHUTDOWN_GRACE", "1s"),
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "30s"),
    ]);
    let mut server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.script("/ep", vec![Behaviour::Hang]);
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let (id, _) = api.test(&ep.uuid).await;
    rx.wait_for("/ep", 1, WAIT).await;
    drop(api);
    let stopping = std::time::Instant::now();
    assert_eq!(server.terminate().await, Some(0));
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "{:?}",
        stopping.elapsed()
    );
    assert!(
        server.logs().contains("handing their deliveries back"),
        "{}",
        server.logs()
    );
    // The delivery was handed back due at once: the next instance delivers it without waiting
    // for a lease (30 s + margin) to expire.
    let restarted = std::time::Instant::now();
    let server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    let d = api.wait_status(&id, "delivered").await;
    assert!(restarted.elapsed() < Duration::from_secs(15));
    assert_eq!(d["attempts"], 2);
    assert_eq!(d["attempt_log"][0]["error_code"], "attempt_interrupted");
    assert_eq!(d["attempt_log"][0]["duration_ms"], Value::Null);
    assert_eq!(d["attempt_log"][1]["response_status"], 200);
    assert_eq!(
        api.get_endpoint(&ep.uuid).await["consecutive_failures"],
        0,
        "an interrupted attempt is not a failure"
    );
}
async fn the_dispatcher_wakes_at_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    // With a one-minute poll, only wake-ups can explain prompt deliveries.
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "60s"),
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "300ms"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.script("/ep", vec![Behaviour::Status(500)]);
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    // Written by this process: the commit wakes the dispatcher; the retry is due in 300 ms.
    let start = std::time::Instant::now();
    let (id, _) = api.test(&ep.uuid).await;
    let d = api.wait_status(&id, "delivered").await;
    assert_eq!(d["attempts"], 2);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    if backend == Backend::Postgres {
        // Written by another process (the admin tools): PostgreSQL NOTIFY wakes it. (On
        // SQLite such rows are found by the poll.)
        let start = std::time::Instant::now();
        env.admin(&[
            "key",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--scopes",
            "channels:read",
        ])
        .await;
        rx.wait_until(Duration::from_secs(20), |all| {
            all.iter().any(|r| r.event() == "security.api_key_created")
        })
        .await;
        assert!(start.elapsed() < Duration::from_secs(20));
    }
}
async fn test_events_are_rate_limited_per_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_RATE_LIMIT_TESTS", "3")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let path = format!("{ENDPOINTS}/{}/test", ep.uuid);
    for _ in 0..3 {
        let r = server.post(&path, &seed.key, &json!({})).await.expect(202);
        assert_eq!(r.header("ratelimit-policy"), Some("\"tests\";q=3;w=60"));
    }
    let r = server
        .post(&path, &seed.key, &json!({}))
        .await
        .expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    // Reads are a separate budget.
    let r = server.get(ENDPOINTS, &seed.key).await.expect(200);
    assert!(
        r.header("ratelimit-policy")
            .unwrap()
            .starts_with("\"reads\"")
    );
    // Another key has its own budget.
    let other = env.key(seed.org_id, "webhooks:write").await;
    server.post(&path, &other, &json!({})).await.expect(202);
}

/// Under load the dispatcher records a batch of outcomes and claims deliveries for the slots
/// those attempts freed in one transaction (the claims counter's `with="outcomes"`), and every
/// delivery is still made exactly once.
async fn outcomes_and_the_next_claims_share_transactions(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_CONCURRENCY", "8"),
            ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "8"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    // Slow enough that the test events queue up behind the eight slots: a claim is made with
    // outcomes only while due deliveries may be waiting (a claim before it filled its room).
    rx.respond("/ep", Behaviour::Slow(Duration::from_millis(100), 200));
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;
    let mut ids = Vec::new();
    let (mut with_outcomes, mut alone) = (0.0, 0.0);
    // Rounds of 40 test events queued at once behind eight slots, until a claim was made with
    // outcomes. The claim loop is woken first when a slot frees up and claims alone whenever it
    // can (a claim beside a recording is worth more than the saved commit: docs/benchmarks.md),
    // so the record loop's claim is the exception, a few per cent of claims: up to 30 rounds.
    for _ in 0..30 {
        for _ in 0..40 {
            ids.push(api.test(&ep.uuid).await.0);
        }
        for id in &ids {
            api.wait_status(id, "delivered").await;
        }
        let m = server
            .call(Method::GET, "/metrics", None, None)
            .await
            .expect(200);
        with_outcomes = crate::sending::counter(
            &m.text,
            "switchboard_webhook_claims_total{with=\"outcomes\"}",
        );
        alone =
            crate::sending::counter(&m.text, "switchboard_webhook_claims_total{with=\"alone\"}");
        if with_outcomes > 0.0 {
            break;
        }
    }
    eprintln!("claims with outcomes: {with_outcomes}, alone: {alone}");
    assert!(
        with_outcomes > 0.0,
        "no claim was made with outcomes ({alone} alone)"
    );
    // Each delivery reached the receiver once, with one attempt.
    let received: Vec<String> = rx
        .requests("/ep")
        .iter()
        .map(ReceivedRequest::delivery)
        .collect();
    assert_eq!(received.len(), ids.len());
    let unique: HashSet<&String> = received.iter().collect();
    assert_eq!(unique, ids.iter().collect::<HashSet<_>>());
    for id in ids.iter().step_by(13) {
        assert_eq!(api.delivery(id).await["attempts"], 1);
    }
}
async fn claims_ahead_are_handed_back_at_sigterm(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = with(&[
        ("SWITCHBOARD_WEBHOOK_CONCURRENCY", "4"),
        ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "2"),
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "10s"),
        ("SWITCHBOARD_SHUTDOWN_GRACE", "20s"),
    ]);
    let mut server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;
    // A quick endpoint...
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (id, _) = api.test(&ep.uuid).await;
        api.wait_status(&id, "delivered").await;
        ids.push(id);
    }
    // ...slows down: two attempts are in flight (its limit) and the next two deliveries are
    // claimed ahead of them, waiting for a slot.
    rx.respond("/ep", Behaviour::Slow(Duration::from_millis(3000), 200));
    for _ in 0..8 {
        ids.push(api.test(&ep.uuid).await.0);
    }
    rx.wait_for("/ep", 3 + 2, WAIT).await;
    drop(api);
    assert_eq!(server.terminate().await, Some(0));
    let logs = server.logs();
    let handed = logs
        .lines()
        .find(|l| l.contains("had not started were handed back"))
        .unwrap_or_else(|| panic!("no hand-back at shutdown: {logs}"));
    assert!(handed.contains("\"handed_back\":2"), "{handed}");
    // The waiting deliveries were handed back as they were: the next instance makes their
    // first attempt at once (no lease to wait for, no interrupted attempt), and every delivery
    // reached the receiver exactly once.
    rx.respond("/ep", Behaviour::Status(200));
    let server = env.start(&settings).await;
    let api = Api::new(&server, &seed.key);
    for id in &ids {
        let d = api.wait_status(id, "delivered").await;
        assert_eq!(d["attempts"], 1, "{d:#}");
        assert_eq!(d["attempt_log"].as_array().unwrap().len(), 1, "{d:#}");
        assert_eq!(d["attempt_log"][0]["response_status"], 200, "{d:#}");
    }
    let received: Vec<String> = rx
        .requests("/ep")
        .iter()
        .map(ReceivedRequest::delivery)
        .collect();
    assert_eq!(received.len(), ids.len());
    assert_eq!(
        received.iter().collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>()
    );
}

/// Deliveries written while the writing instance has free slots are leased to it by the writing
/// transaction (handed off: no claim transaction). When that instance is killed with their
/// attempts in flight, another instance takes them over once their leases expire, with the
/// interrupted attempts logged, and every one is delivered.
async fn handed_deliveries_are_taken_over_after_kill_9(backend: Backend) {
    handed_takeover(backend, &[]).await
}

/// [`handed_deliveries_are_taken_over_after_kill_9`] with `extra` settings for both instances
/// (`partitions.rs` runs it on partitioned tables).
pub async fn handed_takeover(backend: Backend, extra: &[(&'static str, &'static str)]) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut settings = with(&[
        ("SWITCHBOARD_WEBHOOK_TIMEOUT", "5s"),
        ("SWITCHBOARD_WEBHOOK_ENDPOINT_CONCURRENCY", "4"),
    ]);
    settings.extend_from_slice(extra);
    let mut a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let rx = Receiver::start().await;
    rx.respond("/ep", Behaviour::Hang);
    let ep = Api::new(&a, &seed.key)
        .create(&rx.url("/ep"), &["message.sent"])
        .await;
    for i in 0..3 {
        crate::recovery::send(&a, &seed.key, "+4915123450101", &format!("handed {i}")).await;
    }
    rx.wait_for("/ep", 3, WAIT).await;
    let m = a
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect(200);
    let handed = crate::sending::counter(&m.text, "switchboard_webhook_deliveries_handed_total");
    assert_eq!(
        handed, 3.0,
        "the sends' transactions handed their deliveries to A"
    );
    a.kill().await;

    rx.respond("/ep", Behaviour::Status(200));
    let api = Api::new(&b, &seed.key);
    let ledger = crate::recovery::ledger(&b, &seed.key, &ep.uuid).await;
    assert_eq!(ledger.len(), 3);
    for d in &ledger {
        let id = d["delivery_id"].as_str().unwrap();
        let d = api.wait_status(id, "delivered").await;
        let log = d["attempt_log"].as_array().unwrap();
        assert_eq!(log.len(), 2, "{d:#}");
        assert_eq!(log[0]["error_code"], "attempt_interrupted", "{d:#}");
        assert_eq!(log[1]["response_status"], 200, "{d:#}");
    }
    let delivered: HashSet<String> = rx
        .requests("/ep")
        .iter()
        .map(ReceivedRequest::delivery)
        .collect();
    assert_eq!(delivered.len(), 3);
}
