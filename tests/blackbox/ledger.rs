//! The delivery ledger (filters and pages), manual retry and the purge of old deliveries.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::both_backends;
use crate::receivers::{Behaviour, Receiver};
use crate::support::{Backend, Resp, TestEnv};
use crate::webhooks::{Api, fast, signed_by, with};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const DELIVERIES: &str = "/api/v1/integrations/webhook-deliveries";
const WAIT: Duration = Duration::from_secs(30);

both_backends!(
    the_ledger_filters_and_paginates,
    manual_retry_redelivers,
    old_deliveries_are_purged,
);

async fn the_ledger_filters_and_paginates(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms")]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/bad", Behaviour::Status(404));
    let good = api
        .create(&rx.url("/good"), &["integration.test", "security.*"])
        .await;
    let bad = api.create(&rx.url("/bad"), &["integration.test"]).await;
    let mut good_ids = Vec::new();
    for _ in 0..3 {
        good_ids.push(api.test(&good.uuid).await.0);
    }
    let (bad_id, _) = api.test(&bad.uuid).await;
    let middle = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    env.admin(&[
        "key",
        "create",
        "--org",
        &seed.org_id.to_string(),
        "--scopes",
        "channels:read",
    ])
    .await;
    for id in &good_ids {
        api.wait_status(id, "delivered").await;
    }
    api.wait_status(&bad_id, "failed").await;
    // Wait for the security event's delivery too.
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = api
            .list("?event=security.api_key_created&status=delivered")
            .await
            .expect(200);
        if r.body["data"].as_array().unwrap().len() == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "security delivery not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let ids = |r: &Resp| -> Vec<String> {
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["delivery_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = api.list("").await.expect(200);
    assert_eq!(all.body["data"].as_array().unwrap().len(), 5);
    assert_eq!(all.body["has_more"], false);
    let first = &all.body["data"][0];
    for field in [
        "delivery_id",
        "event_id",
        "event",
        "endpoint_uuid",
        "status",
        "attempts",
        "response_status",
        "error_code",
        "error_message",
        "next_attempt_at",
        "delivered_at",
        "created_at",
    ] {
        assert!(
            first.get(field).is_some(),
            "list items carry {field}: {first}"
        );
    }
    assert_eq!(first["event"], "security.api_key_created", "newest first");
    let created: Vec<&str> = all.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["created_at"].as_str().unwrap())
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");

    let r = api.list("?status=failed").await.expect(200);
    assert_eq!(ids(&r), vec![bad_id.clone()]);
    assert_eq!(r.body["data"][0]["response_status"], 404);
    let r = api.list("?status=delivered").await.expect(200);
    assert_eq!(ids(&r).len(), 4);
    let r = api.list("?event=integration.test").await.expect(200);
    assert_eq!(ids(&r).len(), 4);
    let r = api.list("?event=security.*").await.expect(200);
    assert_eq!(ids(&r).len(), 1);
    let r = api
        .list(&format!("?endpoint_uuid={}", bad.uuid))
        .await
        .expect(200);
    assert_eq!(ids(&r), vec![bad_id.clone()]);
    let r = api
        .list(&format!(
            "?endpoint_uuid={}&status=delivered&event=integration.test",
            good.uuid
        ))
        .await
        .expect(200);
    let mut want = good_ids.clone();
    want.reverse();
    assert_eq!(ids(&r), want);
    let r = api.list("?status=retrying").await.expect(200);
    assert!(ids(&r).is_empty());
    let stamp = middle.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let r = api.list(&format!("?since={stamp}")).await.expect(200);
    assert_eq!(
        ids(&r).len(),
        1,
        "only the security event is after the stamp"
    );
    let r = api.list(&format!("?until={stamp}")).await.expect(200);
    assert_eq!(ids(&r).len(), 4);
    let r = api
        .list("?since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z")
        .await
        .expect(200);
    assert!(ids(&r).is_empty());
    let r = api
        .list(&format!("?endpoint_uuid={}", uuid::Uuid::new_v4()))
        .await
        .expect(200);
    assert!(ids(&r).is_empty());

    // Pagination: two by two, no duplicates, no gaps.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".to_owned(),
        };
        let r = api.list(&q).await.expect(200);
        pages += 1;
        seen.extend(ids(&r));
        match r.body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(r.body["has_more"], true);
                cursor = Some(c.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ids(&all));

    // Bad filters are 400 invalid_request naming the parameter.
    for (q, param) in [
        ("?status=done", "status"),
        ("?event=nope.x", "event"),
        ("?event=*", "event"),
        ("?endpoint_uuid=xyz", "endpoint_uuid"),
        ("?since=yesterday", "since"),
        ("?until=2026-13-01T00:00:00Z", "until"),
        ("?limit=500", "limit"),
        ("?cursor=%%%", "cursor"),
    ] {
        let code = if q.contains("cursor=") {
            "invalid_cursor"
        } else {
            "invalid_request"
        };
        let r = api.list(q).await.expect_error(400, code);
        assert_eq!(
            r.body["error"]["details"]["param"], param,
            "{q}: {}",
            r.text
        );
    }

    // Detail: the attempt log; unknown, malformed and foreign ids are 404.
    let d = api.delivery(&bad_id).await;
    let a = &d["attempt_log"][0];
    assert_eq!(a["number"], 1);
    assert_eq!(a["response_status"], 404);
    assert_eq!(a["error_code"], "http_error");
    assert!(a["started_at"].is_string() && a["duration_ms"].is_i64());
    assert_eq!(a["response_body_excerpt"], "{\"received\":true}");
    for bad in [uuid::Uuid::new_v4().to_string(), "nope".to_owned()] {
        server
            .get(&format!("{DELIVERIES}/{bad}"), &seed.key)
            .await
            .expect_error(404, "not_found");
    }
    let other_org = env.admin(&["org", "create", "--name", "Other"]).await;
    let other = env.key(other_org["id"].as_i64().unwrap(), "*").await;
    server
        .get(&format!("{DELIVERIES}/{bad_id}"), &other)
        .await
        .expect_error(404, "not_found");
    server
        .post(&format!("{DELIVERIES}/{bad_id}/retry"), &other, &json!({}))
        .await
        .expect_error(404, "not_found");
    assert_eq!(
        server.get(DELIVERIES, &other).await.expect(200).body["data"],
        json!([])
    );
}
async fn manual_retry_redelivers(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/ep", Behaviour::Status(404));
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let (id, _) = api.test(&ep.uuid).await;
    api.wait_status(&id, "failed").await;
    rx.respond("/ep", Behaviour::Status(200));
    let r = server
        .post(&format!("{DELIVERIES}/{id}/retry"), &seed.key, &json!({}))
        .await
        .expect(202);
    assert_eq!(r.body["delivery_id"], id.as_str());
    assert_eq!(r.body["status"], "pending");
    let d = api.wait_status(&id, "delivered").await;
    assert_eq!(d["attempts"], 2);
    let reqs = rx.requests("/ep");
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].delivery(), id, "the same delivery id");
    assert_eq!(reqs[1].attempt(), 2);
    assert!(signed_by(&ep.secret, &reqs[1]));
    assert_eq!(d["attempt_log"][0]["response_status"], 404);
    assert_eq!(d["attempt_log"][1]["response_status"], 200);
    // A delivered delivery can be redelivered too.
    server
        .post(&format!("{DELIVERIES}/{id}/retry"), &seed.key, &json!({}))
        .await
        .expect(202);
    rx.wait_for("/ep", 3, WAIT).await;
    api.wait_delivery(&id, "delivered a second time", |d| {
        d["status"] == "delivered" && d["attempts"] == 3
    })
    .await;
    // Unknown delivery: 404; once the endpoint is deleted: 409 endpoint_deleted.
    server
        .post(
            &format!("{DELIVERIES}/{}/retry", uuid::Uuid::new_v4()),
            &seed.key,
            &json!({}),
        )
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::DELETE,
            &format!("{ENDPOINTS}/{}", ep.uuid),
            Some(&seed.key),
            None,
        )
        .await
        .expect(204);
    server
        .post(&format!("{DELIVERIES}/{id}/retry"), &seed.key, &json!({}))
        .await
        .expect_error(409, "endpoint_deleted");
    // The ledger keeps the deleted endpoint's deliveries.
    assert_eq!(api.delivery(&id).await["endpoint_uuid"], ep.uuid.as_str());
}
async fn old_deliveries_are_purged(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_DELIVERY_RETENTION", "2s"),
            ("SWITCHBOARD_PURGE_INTERVAL", "200ms"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    let (id, _) = api.test(&ep.uuid).await;
    api.wait_status(&id, "delivered").await;
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let r = server.get(&format!("{DELIVERIES}/{id}"), &seed.key).await;
        if r.status == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the delivery was never purged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(api.list("").await.expect(200).body["data"], json!([]));
}
