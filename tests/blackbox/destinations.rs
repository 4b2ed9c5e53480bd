//! Issue 35: endpoint controls and destinations (CONVENTIONS "Destinations, filters,
//! throttles, endpoint authentication"): filters on the envelope, against real local
//! receivers, on both backends.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::receivers::Receiver;
use crate::recovery::{ledger as ledger_of, send};
use crate::support::{Backend, Resp, Server, TestEnv};
use crate::webhooks::{Api, fast, signed_by};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const WAIT: Duration = Duration::from_secs(30);

both_backends!(
    filters_choose_the_events_an_endpoint_receives,
    malformed_filters_are_refused_naming_filter,
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
