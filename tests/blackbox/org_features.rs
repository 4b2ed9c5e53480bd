//! Issue 7 (legacy data routes under /api): contacts, groups, canned replies, the template
//! catalogue, campaigns (background worker, progress, completion events) and flows; scopes,
//! wildcard legacy keys, bad input, and events reaching a webhook receiver.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::fake_providers::Fake;
use crate::receivers::Receiver;
use crate::support::{Backend, Resp, Seed, Server, TestEnv};

both_backends!(
    contacts_crud_search_and_events,
    contact_deletion_keeps_history_and_frees_the_phone,
    groups_and_membership,
    canned_replies_crud,
    templates_catalogue_page,
    v1_templates_list_filters_and_pages,
    templates_sync_from_the_business_account,
    campaigns_send_every_recipient_in_the_background,
    campaign_request_validation,
    two_instances_send_each_campaign_recipient_once,
    a_stopped_instances_recipients_are_taken_over,
    flows_list_and_trigger,
    scopes_and_legacy_keys_on_every_route,
);

const PHONE: &str = "+4915123456789";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const BODY: &str = "Hi {{1}}, your order {{2}} has shipped.";

fn fast() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "100ms"),
        ("SWITCHBOARD_RATE_LIMIT_READS", "100000"),
        ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
    ]
}

fn fields(r: &Resp) -> Vec<String> {
    r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no field details in {}", r.text))
        .iter()
        .map(|f| f["field"].as_str().unwrap().to_owned())
        .collect()
}

async fn put(server: &Server, path: &str, key: &str, body: &Value) -> Resp {
    server.call(Method::PUT, path, Some(key), Some(body)).await
}

async fn delete(server: &Server, path: &str, key: &str, body: Option<&Value>) -> Resp {
    server.call(Method::DELETE, path, Some(key), body).await
}

async fn malformed(server: &Server, method: Method, path: &str, key: &str) {
    let r = server
        .client
        .request(method, server.url(path))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body("{\"x\": ")
        .send()
        .await
        .unwrap();
    Server::read(r).await.expect_error(400, "malformed_json");
}

async fn receiver_endpoint(server: &Server, key: &str, receiver: &Receiver, events: &[&str]) {
    server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            key,
            &json!({"name": "legacy", "url": receiver.url("/hook"), "events": events}),
        )
        .await
        .expect(201);
}

/// Waits for `n` deliveries of `event` at the receiver.
async fn events_named(receiver: &Receiver, event: &str, n: usize) -> Vec<Value> {
    let all = receiver
        .wait_until(Duration::from_secs(20), |all| {
            all.iter().filter(|r| r.event() == event).count() >= n
        })
        .await;
    all.iter()
        .filter(|r| r.event() == event)
        .map(|r| r.json())
        .collect()
}

async fn contacts_crud_search_and_events(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let receiver = Receiver::start().await;
    receiver_endpoint(&server, &seed.key, &receiver, &["contact.*"]).await;
    let k = &seed.key;

    // Create: the phone is normalized to E.164.
    let r = server
        .post(
            "/api/contacts",
            k,
            &json!({"phone": "0049 151 2345 6789", "name": "Ada Lovelace"}),
        )
        .await
        .expect(201);
    assert_eq!(r.body["phone"], PHONE);
    let ada = r.body["uuid"].as_str().unwrap().to_owned();
    let r = server
        .post(
            "/api/contacts",
            k,
            &json!({"phone": "+33612345678", "name": "Grace"}),
        )
        .await
        .expect(201);
    let grace = r.body["uuid"].as_str().unwrap().to_owned();

    // Duplicate phone (in another form): 422 validation_failed on phone.
    let r = server
        .post("/api/contacts", k, &json!({"phone": "+49 151 23456789"}))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "phone");
    assert_eq!(
        r.body["error"]["details"]["fields"][0]["issue"],
        "already used by another contact"
    );
    // Invalid phone, missing phone, bad name, malformed JSON.
    let r = server
        .post("/api/contacts", k, &json!({"phone": "12", "name": ""}))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["phone", "name"]);
    server
        .post("/api/contacts", k, &json!({"name": "x"}))
        .await
        .expect_error(422, "validation_failed");
    malformed(&server, Method::POST, "/api/contacts", k).await;

    // Search by phone (normalized before matching) and by name (case-insensitive substring).
    let r = server
        .get("/api/contacts?phone=0049%20151%2023456789", k)
        .await
        .expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["uuid"], ada.as_str());
    let r = server.get("/api/contacts?name=LOVE", k).await.expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["uuid"], ada.as_str());
    let r = server.get("/api/contacts?name=%25", k).await.expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0, "% is literal");
    server
        .get("/api/contacts?phone=abc", k)
        .await
        .expect_error(400, "invalid_request");
    server
        .get("/api/contacts?limit=0", k)
        .await
        .expect_error(400, "invalid_request");
    server
        .get("/api/contacts?cursor=nope", k)
        .await
        .expect_error(400, "invalid_cursor");
    server
        .get("/api/contacts?color=red", k)
        .await
        .expect_error(400, "invalid_request");

    // Pagination: newest first, one per page.
    let r = server.get("/api/contacts?limit=1", k).await.expect(200);
    assert_eq!(r.body["data"][0]["uuid"], grace.as_str());
    assert_eq!(r.body["has_more"], true);
    let cursor = r.body["next_cursor"].as_str().unwrap().to_owned();
    let r = server
        .get(&format!("/api/contacts?limit=1&cursor={cursor}"), k)
        .await
        .expect(200);
    assert_eq!(r.body["data"][0]["uuid"], ada.as_str());
    assert_eq!(r.body["has_more"], false);
    assert!(r.body["next_cursor"].is_null());

    // Get, update (phone taken: 422; name null clears), 404s.
    let r = server
        .get(&format!("/api/contacts/{ada}"), k)
        .await
        .expect(200);
    assert_eq!(r.body["name"], "Ada Lovelace");
    let r = put(
        &server,
        &format!("/api/contacts/{grace}"),
        k,
        &json!({"phone": PHONE}),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["phone"]);
    let r = put(
        &server,
        &format!("/api/contacts/{grace}"),
        k,
        &json!({"phone": "+33 6 12 34 56 79", "name": null}),
    )
    .await
    .expect(200);
    assert_eq!(r.body["phone"], "+33612345679");
    assert!(r.body["name"].is_null());
    put(
        &server,
        &format!("/api/contacts/{grace}"),
        k,
        &json!({"name": 5}),
    )
    .await
    .expect_error(422, "validation_failed");
    // Only a JSON object is a body (serde would read a struct from an array).
    let r = put(
        &server,
        &format!("/api/contacts/{grace}"),
        k,
        &json!([null, null]),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["body"]);
    server
        .get("/api/contacts/not-a-uuid", k)
        .await
        .expect_error(404, "not_found");
    server
        .get(&format!("/api/contacts/{}", uuid::Uuid::new_v4()), k)
        .await
        .expect_error(404, "not_found");

    // Another organization sees none of it.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    server
        .get(&format!("/api/contacts/{ada}"), &other_key)
        .await
        .expect_error(404, "not_found");
    let r = server.get("/api/contacts", &other_key).await.expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);

    // Delete, then the events reached the receiver.
    delete(&server, &format!("/api/contacts/{grace}"), k, None)
        .await
        .expect(204);
    delete(&server, &format!("/api/contacts/{grace}"), k, None)
        .await
        .expect_error(404, "not_found");
    let created = events_named(&receiver, "contact.created", 2).await;
    assert!(
        created
            .iter()
            .any(|e| e["data"]["contact_uuid"] == ada.as_str())
    );
    let updated = events_named(&receiver, "contact.updated", 1).await;
    assert_eq!(updated[0]["data"]["contact"]["phone"], "+33612345679");
    let deleted = events_named(&receiver, "contact.deleted", 1).await;
    assert_eq!(deleted[0]["data"]["contact_uuid"], grace.as_str());
}

async fn contact_deletion_keeps_history_and_frees_the_phone(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let k = &seed.key;
    let r = server
        .post("/api/contacts", k, &json!({"phone": PHONE, "name": "Ada"}))
        .await
        .expect(201);
    let old = r.body["uuid"].as_str().unwrap().to_owned();
    let send = |body: Value| {
        let server = &server;
        async move {
            server
                .post_with(
                    "/api/v1/integrations/messages",
                    k,
                    &body,
                    &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
                )
                .await
        }
    };
    send(json!({"contact_uuid": old, "message": "hello"}))
        .await
        .expect(201);
    delete(&server, &format!("/api/contacts/{old}"), k, None)
        .await
        .expect(204);

    // History keeps the message and its contact_uuid.
    let r = server
        .get("/api/v1/integrations/messages", k)
        .await
        .expect(200);
    assert_eq!(r.body["data"][0]["contact_uuid"], old.as_str());
    let r = server
        .get(
            &format!("/api/v1/integrations/messages?contact_uuid={old}"),
            k,
        )
        .await
        .expect(200);
    assert_eq!(
        r.body["data"].as_array().unwrap().len(),
        1,
        "the history filter still finds a deleted contact's messages"
    );
    // Sends to the deleted contact's UUID are refused (4xx, never 5xx).
    let r = send(json!({"contact_uuid": old, "message": "again"})).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text);
    // A send by phone creates a new contact; so can the contacts route after that one goes.
    let r = send(json!({"phone": PHONE, "message": "by phone"}))
        .await
        .expect(201);
    let fresh = r.body["contact"]["uuid"].as_str().unwrap().to_owned();
    assert_ne!(fresh, old);
    let r = server
        .get(&format!("/api/contacts?phone={}", "%2B4915123456789"), k)
        .await
        .expect(200);
    assert_eq!(r.body["data"][0]["uuid"], fresh.as_str());
    delete(&server, &format!("/api/contacts/{fresh}"), k, None)
        .await
        .expect(204);
    server
        .post("/api/contacts", k, &json!({"phone": PHONE}))
        .await
        .expect(201);
}

async fn groups_and_membership(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let receiver = Receiver::start().await;
    receiver_endpoint(&server, &seed.key, &receiver, &["group.*"]).await;
    let k = &seed.key;
    let mut contacts = Vec::new();
    for i in 0..3 {
        let r = server
            .post(
                "/api/contacts",
                k,
                &json!({"phone": format!("+4915123456{i:03}")}),
            )
            .await
            .expect(201);
        contacts.push(r.body["uuid"].as_str().unwrap().to_owned());
    }
    let r = server
        .post("/api/groups", k, &json!({"name": "  VIP  "}))
        .await
        .expect(201);
    assert_eq!(r.body["name"], "VIP");
    assert_eq!(r.body["member_count"], 0);
    let g = r.body["uuid"].as_str().unwrap().to_owned();
    server
        .post("/api/groups", k, &json!({"name": ""}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post("/api/groups", k, &json!({}))
        .await
        .expect_error(422, "validation_failed");
    malformed(&server, Method::POST, "/api/groups", k).await;

    let path = format!("/api/groups/{g}/contacts");
    let r = server
        .post(&path, k, &json!({"contact_uuids": contacts}))
        .await
        .expect(200);
    assert_eq!(r.body["member_count"], 3);
    // Adding again changes nothing.
    let r = server
        .post(&path, k, &json!({"contact_uuids": [contacts[0]]}))
        .await
        .expect(200);
    assert_eq!(r.body["member_count"], 3);
    // Unknown or other-org contacts: 422, nothing changed.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    let r = server
        .post("/api/contacts", &other_key, &json!({"phone": PHONE}))
        .await
        .expect(201);
    let foreign = r.body["uuid"].as_str().unwrap().to_owned();
    let r = server
        .post(
            &path,
            k,
            &json!({"contact_uuids": [foreign, uuid::Uuid::new_v4()]}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["contact_uuids", "contact_uuids"]);
    server
        .post(&path, k, &json!({"contact_uuids": ["nope"]}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(&path, k, &json!({"contact_uuids": []}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(&path, k, &json!({"contact_uuids": "x"}))
        .await
        .expect_error(422, "validation_failed");

    // Remove one; GET one shows members; the members page paginates.
    let r = delete(
        &server,
        &path,
        k,
        Some(&json!({"contact_uuids": [contacts[1]]})),
    )
    .await
    .expect(200);
    assert_eq!(r.body["member_count"], 2);
    let r = server.get(&format!("/api/groups/{g}"), k).await.expect(200);
    assert_eq!(r.body["members"].as_array().unwrap().len(), 2);
    assert_eq!(r.body["members_has_more"], false);
    let r = server.get(&format!("{path}?limit=1"), k).await.expect(200);
    assert_eq!(r.body["has_more"], true);
    let cursor = r.body["next_cursor"].as_str().unwrap().to_owned();
    let r2 = server
        .get(&format!("{path}?limit=1&cursor={cursor}"), k)
        .await
        .expect(200);
    assert_eq!(r2.body["has_more"], false);
    assert_ne!(r.body["data"][0]["uuid"], r2.body["data"][0]["uuid"]);

    // A deleted contact leaves its groups.
    delete(&server, &format!("/api/contacts/{}", contacts[0]), k, None)
        .await
        .expect(204);
    let r = server.get(&format!("/api/groups/{g}"), k).await.expect(200);
    assert_eq!(r.body["member_count"], 1);

    // Rename, list, other org, delete.
    let r = put(
        &server,
        &format!("/api/groups/{g}"),
        k,
        &json!({"name": "Gold"}),
    )
    .await
    .expect(200);
    assert_eq!(r.body["name"], "Gold");
    let r = server.get("/api/groups", k).await.expect(200);
    assert_eq!(r.body["data"][0]["uuid"], g.as_str());
    server
        .get(&format!("/api/groups/{g}"), &other_key)
        .await
        .expect_error(404, "not_found");
    delete(&server, &format!("/api/groups/{g}"), &other_key, None)
        .await
        .expect_error(404, "not_found");
    delete(&server, &format!("/api/groups/{g}"), k, None)
        .await
        .expect(204);
    server
        .get(&format!("/api/groups/{g}"), k)
        .await
        .expect_error(404, "not_found");

    events_named(&receiver, "group.created", 1).await;
    let updated = events_named(&receiver, "group.updated", 3).await;
    assert!(
        updated
            .iter()
            .any(|e| e["data"]["added_contact_uuids"].is_array())
    );
    assert!(
        updated
            .iter()
            .any(|e| e["data"]["removed_contact_uuids"].is_array())
    );
    events_named(&receiver, "group.deleted", 1).await;
}

async fn canned_replies_crud(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let k = &seed.key;
    let r = server
        .post(
            "/api/canned-replies",
            k,
            &json!({"shortcut": "/thanks", "text": "Thank you!"}),
        )
        .await
        .expect(201);
    let id = r.body["uuid"].as_str().unwrap().to_owned();
    let r = server
        .post(
            "/api/canned-replies",
            k,
            &json!({"shortcut": "/thanks", "text": "Again"}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["shortcut"]);
    let r = server
        .post(
            "/api/canned-replies",
            k,
            &json!({"shortcut": "a b", "text": "x".repeat(4097)}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["shortcut", "text"]);
    server
        .post(
            "/api/canned-replies",
            k,
            &json!({"shortcut": "/max", "text": "x".repeat(4096)}),
        )
        .await
        .expect(201);
    server
        .post("/api/canned-replies", k, &json!({}))
        .await
        .expect_error(422, "validation_failed");
    malformed(&server, Method::POST, "/api/canned-replies", k).await;

    let r = put(
        &server,
        &format!("/api/canned-replies/{id}"),
        k,
        &json!({"text": "Thanks a lot!"}),
    )
    .await
    .expect(200);
    assert_eq!(r.body["text"], "Thanks a lot!");
    assert_eq!(r.body["shortcut"], "/thanks");
    put(
        &server,
        &format!("/api/canned-replies/{id}"),
        k,
        &json!({"shortcut": "/max"}),
    )
    .await
    .expect_error(422, "validation_failed");
    put(&server, &format!("/api/canned-replies/{id}"), k, &json!({}))
        .await
        .expect_error(422, "validation_failed");
    let r = server
        .get("/api/canned-replies?limit=1", k)
        .await
        .expect(200);
    assert_eq!(r.body["has_more"], true);
    assert_eq!(r.body["data"][0]["shortcut"], "/max");

    // The shortcut is unique per organization only.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    server
        .post(
            "/api/canned-replies",
            &other_key,
            &json!({"shortcut": "/thanks", "text": "Hi"}),
        )
        .await
        .expect(201);
    delete(
        &server,
        &format!("/api/canned-replies/{id}"),
        &other_key,
        None,
    )
    .await
    .expect_error(404, "not_found");
    delete(&server, &format!("/api/canned-replies/{id}"), k, None)
        .await
        .expect(204);
    put(
        &server,
        &format!("/api/canned-replies/{id}"),
        k,
        &json!({"text": "x"}),
    )
    .await
    .expect_error(404, "not_found");
}

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake) -> i64 {
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
                "phone_number_id": "1098765",
                "access_token": WA_TOKEN,
                "app_secret": "app-secret",
                "verify_token": "verify-me",
                "api_base_url": graph.base_url,
            })
            .to_string(),
        ])
        .await;
    ch["id"].as_i64().unwrap()
}

async fn catalog_template(env: &TestEnv, channel_id: i64, name: &str, extra: &[&str]) -> String {
    let channel = channel_id.to_string();
    let components = json!([{"type": "BODY", "text": BODY}]).to_string();
    let mut args = vec![
        "template",
        "create",
        "--channel",
        &channel,
        "--name",
        name,
        "--language",
        "en_US",
        "--category",
        "utility",
        "--components",
        &components,
    ];
    args.extend_from_slice(extra);
    env.admin(&args).await["uuid"].as_str().unwrap().to_owned()
}

async fn templates_catalogue_page(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let approved = catalog_template(&env, wa, "order_update", &[]).await;
    let pending = catalog_template(&env, wa, "welcome", &["--status", "pending"]).await;
    let server = env.start(&fast()).await;
    let k = &seed.key;

    let r = server.get("/api/templates", k).await.expect(200);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["uuid"], pending.as_str(), "newest first");
    for key in [
        "uuid",
        "channel_id",
        "name",
        "language",
        "category",
        "status",
        "active",
        "components",
    ] {
        assert!(data[0].get(key).is_some(), "{key} in {}", data[0]);
    }
    let r = server
        .get("/api/templates?status=approved", k)
        .await
        .expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["uuid"], approved.as_str());
    let r = server
        .get(&format!("/api/templates?channel_id={}", seed.channel_id), k)
        .await
        .expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
    let r = server.get("/api/templates?limit=1", k).await.expect(200);
    assert_eq!(r.body["has_more"], true);
    let cursor = r.body["next_cursor"].as_str().unwrap().to_owned();
    let r = server
        .get(&format!("/api/templates?limit=1&cursor={cursor}"), k)
        .await
        .expect(200);
    assert_eq!(r.body["data"][0]["uuid"], approved.as_str());
    server
        .get("/api/templates?status=bogus", k)
        .await
        .expect_error(400, "invalid_request");
    server
        .get("/api/templates?channel_id=x", k)
        .await
        .expect_error(400, "invalid_request");
}

/// `GET /api/v1/integrations/templates`: the catalogue with `uuid`, filtered by channel, status
/// and name, newest first, in pages.
async fn v1_templates_list_filters_and_pages(backend: Backend) {
    const PATH: &str = "/api/v1/integrations/templates";
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let approved = catalog_template(&env, wa, "order_update", &[]).await;
    let pending = catalog_template(&env, wa, "welcome", &["--status", "pending"]).await;
    let components = json!([{"type": "BODY", "text": BODY}]).to_string();
    let spanish = env
        .admin(&[
            "template",
            "create",
            "--channel",
            &wa.to_string(),
            "--name",
            "order_update",
            "--language",
            "es",
            "--category",
            "utility",
            "--components",
            &components,
        ])
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let server = env.start(&fast()).await;
    let k = &seed.key;
    let uuids = |r: &Resp| -> Vec<String> {
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["uuid"].as_str().unwrap().to_owned())
            .collect()
    };

    let r = server.get(PATH, k).await.expect(200);
    assert_eq!(
        uuids(&r),
        [spanish.clone(), pending.clone(), approved.clone()]
    );
    assert_eq!(r.body["data"][0]["channel_id"], wa);
    assert_eq!(r.body["data"][0]["language"], "es");
    let r = server
        .get(&format!("{PATH}?name=order_update"), k)
        .await
        .expect(200);
    assert_eq!(uuids(&r), [spanish.clone(), approved.clone()]);
    let r = server
        .get(&format!("{PATH}?name=order_update&status=pending"), k)
        .await
        .expect(200);
    assert!(uuids(&r).is_empty());
    let r = server
        .get(&format!("{PATH}?status=pending&channel_id={wa}"), k)
        .await
        .expect(200);
    assert_eq!(uuids(&r), vec![pending.clone()]);
    let r = server
        .get(&format!("{PATH}?channel_id={}", seed.channel_id), k)
        .await
        .expect(200);
    assert!(uuids(&r).is_empty());

    // Pages, with the filters kept.
    let r = server
        .get(&format!("{PATH}?name=order_update&limit=1"), k)
        .await
        .expect(200);
    assert_eq!(uuids(&r), vec![spanish.clone()]);
    assert_eq!(r.body["has_more"], true);
    let cursor = r.body["next_cursor"].as_str().unwrap().to_owned();
    let r = server
        .get(
            &format!("{PATH}?name=order_update&limit=1&cursor={cursor}"),
            k,
        )
        .await
        .expect(200);
    assert_eq!(uuids(&r), vec![approved.clone()]);
    assert_eq!(r.body["has_more"], false);
    server
        .get(&format!("{PATH}?name=welcome&limit=1&cursor={cursor}"), k)
        .await
        .expect_error(400, "invalid_cursor");

    // Bad input is a 400 naming the parameter; the scope is templates:read.
    for (query, param) in [
        ("status=bogus", "status"),
        ("channel_id=x", "channel_id"),
        ("name=", "name"),
        ("nmae=order_update", "nmae"),
        ("limit=0", "limit"),
    ] {
        let r = server
            .get(&format!("{PATH}?{query}"), k)
            .await
            .expect_error(400, "invalid_request");
        assert_eq!(
            r.body["error"]["details"]["param"], param,
            "{query}: {}",
            r.text
        );
    }
    let sender = env.key(seed.org_id, "messages:write").await;
    server
        .get(PATH, &sender)
        .await
        .expect_error(403, "insufficient_scope");
    // Another organization sees its own catalogue only.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    let r = server.get(PATH, &other_key).await.expect(200);
    assert!(uuids(&r).is_empty());
}

/// A template as the Graph API lists a Business Account's templates.
fn graph_template(name: &str, language: &str, category: &str, status: &str, id: u64) -> Value {
    json!({
        "name": name,
        "language": language,
        "category": category,
        "status": status,
        "id": id.to_string(),
        "components": [{"type": "BODY", "text": "Hi {{1}}, welcome."}],
    })
}

/// `admin template sync` and the periodic sync bring the catalogue in line with the WhatsApp
/// Business Account's templates (every page): create, update, disable what is gone.
async fn templates_sync_from_the_business_account(backend: Backend) {
    const PATH: &str = "/api/v1/integrations/templates";
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "WhatsApp",
            "--slug",
            "wa-synced",
            "--provider-config",
            &json!({
                "phone_number_id": "1098765",
                "waba_id": "102938475610",
                "access_token": WA_TOKEN,
                "app_secret": "app-secret",
                "verify_token": "verify-me",
                "api_base_url": graph.base_url,
            })
            .to_string(),
        ])
        .await["id"]
        .as_i64()
        .unwrap();
    // The catalogue before: one template the account no longer has, one it has (changed).
    catalog_template(&env, wa, "order_update", &[]).await;
    let t0 = env
        .admin(&[
            "template",
            "create",
            "--channel",
            &wa.to_string(),
            "--name",
            "t_000",
            "--language",
            "en_US",
            "--category",
            "marketing",
            "--status",
            "pending",
        ])
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    // The account: 120 utility templates (two pages of 100), a paused marketing one, and one
    // of a category Switchboard does not know.
    let mut account: Vec<Value> = (0..120)
        .map(|i| {
            graph_template(
                &format!("t_{i:03}"),
                "en_US",
                "UTILITY",
                "APPROVED",
                5000 + i,
            )
        })
        .collect();
    account.push(graph_template("promo", "de", "MARKETING", "PAUSED", 7001));
    account.push(graph_template(
        "odd",
        "en_US",
        "SOMETHING_NEW",
        "APPROVED",
        7002,
    ));
    graph.set_templates(account.clone()).await;

    let sync = ["template", "sync", "--channel", &wa.to_string()];
    let o = env.admin(&sync).await;
    assert_eq!(o["remote"], 122, "{o}");
    assert_eq!(o["created"], 120, "t_001..t_119 and promo: {o}");
    assert_eq!(o["updated"], 1, "t_000: {o}");
    assert_eq!(o["disabled"], 1, "order_update: {o}");
    assert_eq!(o["skipped"], 1, "odd: {o}");
    assert!(o["problems"][0].as_str().unwrap().contains("odd"), "{o}");
    assert!(graph.template_pages() >= 2, "every page is read");

    let server = env.start(&fast()).await;
    let k = &seed.key;
    let one = |name: &'static str| {
        let server = &server;
        async move {
            let r = server
                .get(&format!("{PATH}?name={name}"), k)
                .await
                .expect(200);
            r.body["data"][0].clone()
        }
    };
    let t = one("t_000").await;
    assert_eq!(t["uuid"], t0.as_str(), "updated in place");
    assert_eq!(
        (t["status"].as_str(), t["category"].as_str()),
        (Some("approved"), Some("utility"))
    );
    assert_eq!(t["body_parameters"], 1);
    assert_eq!(t["provider_template_id"], "5000");
    let promo = one("promo").await;
    assert_eq!(
        (
            promo["status"].as_str(),
            promo["language"].as_str(),
            promo["category"].as_str()
        ),
        (Some("paused"), Some("de"), Some("marketing"))
    );
    assert_eq!(one("order_update").await["status"], "disabled");
    let all = server
        .get(&format!("{PATH}?channel_id={wa}&limit=200"), k)
        .await
        .expect(200);
    assert_eq!(all.body["data"].as_array().unwrap().len(), 122);

    // Again: nothing to do.
    let o = env.admin(&sync).await;
    assert_eq!(
        (
            o["created"].as_i64(),
            o["updated"].as_i64(),
            o["disabled"].as_i64()
        ),
        (Some(0), Some(0), Some(0)),
        "{o}"
    );
    assert_eq!(o["unchanged"], 121, "{o}");
    drop(server);

    // The periodic sync of `serve` picks up a change in the account.
    account[120] = graph_template("promo", "de", "MARKETING", "APPROVED", 7001);
    graph.set_templates(account).await;
    let mut config = fast();
    config.push(("SWITCHBOARD_TEMPLATE_SYNC_INTERVAL", "200ms"));
    let server = env.start(&config).await;
    let mut status = Value::Null;
    for _ in 0..200 {
        let r = server
            .get(&format!("{PATH}?name=promo"), k)
            .await
            .expect(200);
        status = r.body["data"][0]["status"].clone();
        if status == "approved" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, "approved", "{}", server.logs());

    // Channels that cannot be synced say why.
    let sandbox = env
        .admin_raw(&[
            "template",
            "sync",
            "--channel",
            &seed.channel_id.to_string(),
        ])
        .await;
    assert!(!sandbox.success);
    assert!(
        sandbox.stderr.contains("whatsapp_cloud"),
        "{}",
        sandbox.stderr
    );
    let plain = whatsapp_channel(&env, seed.org_id, &graph).await;
    let no_waba = env
        .admin_raw(&["template", "sync", "--channel", &plain.to_string()])
        .await;
    assert!(!no_waba.success);
    assert!(no_waba.stderr.contains("waba_id"), "{}", no_waba.stderr);
}

fn consent(purpose: &str, reference: &str) -> Value {
    json!({
        "confirmed": true,
        "purpose": purpose,
        "source": "customer_request",
        "reference": reference,
        "captured_at": (chrono::Utc::now() - chrono::Duration::minutes(3))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

fn tpl_params() -> Value {
    json!({"name": "order_update", "language": "en_US", "components": [
        {"type": "body", "parameters": [{"type": "text", "text": "Ada"}, {"type": "text", "text": "A-42"}]}
    ]})
}

/// Polls the campaign until it is no longer running (with a deadline).
async fn wait_done(server: &Server, key: &str, id: &str) -> Value {
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = server
            .get(&format!("/api/campaigns/{id}"), key)
            .await
            .expect(200);
        if r.body["status"] != "running" {
            return r.body;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "campaign still running: {}",
            r.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct CampaignWorld {
    env: TestEnv,
    seed: Seed,
    graph: Fake,
    wa: i64,
    tpl: String,
    server: Server,
    receiver: Receiver,
    contacts: Vec<String>,
}

async fn campaign_world(backend: Backend) -> CampaignWorld {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let tpl = catalog_template(&env, wa, "order_update", &[]).await;
    let server = env.start(&fast()).await;
    let receiver = Receiver::start().await;
    receiver_endpoint(&server, &seed.key, &receiver, &["campaign.*"]).await;
    let mut contacts = Vec::new();
    for i in 0..3 {
        let r = server
            .post(
                "/api/contacts",
                &seed.key,
                &json!({"phone": format!("+4915123457{i:03}")}),
            )
            .await
            .expect(201);
        contacts.push(r.body["uuid"].as_str().unwrap().to_owned());
    }
    CampaignWorld {
        env,
        seed,
        graph,
        wa,
        tpl,
        server,
        receiver,
        contacts,
    }
}

async fn campaigns_send_every_recipient_in_the_background(backend: Backend) {
    let w = campaign_world(backend).await;
    let k = &w.seed.key;
    // A group of two, plus per-recipient consent for one of them.
    let g = w
        .server
        .post("/api/groups", k, &json!({"name": "Buyers"}))
        .await
        .expect(201)
        .body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    w.server
        .post(
            &format!("/api/groups/{g}/contacts"),
            k,
            &json!({"contact_uuids": [w.contacts[0], w.contacts[1]]}),
        )
        .await
        .expect(200);
    let r = w
        .server
        .post(
            "/api/campaigns",
            k,
            &json!({
                "name": "Shipping",
                "channel_id": w.wa,
                "template_uuid": w.tpl,
                "template": tpl_params(),
                "group_id": g,
                "consent": consent("utility", "default-ref"),
                "consents": { (w.contacts[1].clone()): consent("utility", "special-ref") },
            }),
        )
        .await
        .expect(202);
    assert_eq!(r.body["counts"]["total"], 2);
    let id = r.body["uuid"].as_str().unwrap().to_owned();
    let done = wait_done(&w.server, k, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"]["sent"], 2);
    assert_eq!(done["counts"]["pending"], 0);
    let recipients = done["recipients"].as_array().unwrap();
    assert!(
        recipients
            .iter()
            .all(|r| r["message_id"].is_i64() && r["status"] == "sent")
    );
    assert_eq!(
        w.graph.received().await.len(),
        2,
        "each recipient sent once"
    );

    // The messages carry the consent evidence (the per-recipient one where given).
    let r = w
        .server
        .get("/api/v1/integrations/messages", k)
        .await
        .expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    let audit = w
        .server
        .get(
            "/api/v1/integrations/events?type=campaign_send.validated",
            k,
        )
        .await;
    assert_eq!(audit.status.as_u16(), 200, "{}", audit.text);

    events_named(&w.receiver, "campaign.scheduled", 1).await;
    events_named(&w.receiver, "campaign.started", 1).await;
    let completed = events_named(&w.receiver, "campaign.completed", 1).await;
    assert_eq!(completed[0]["data"]["campaign_uuid"], id.as_str());
    assert_eq!(completed[0]["data"]["campaign"]["counts"]["sent"], 2);

    // A campaign whose every recipient the provider rejects ends failed, with the failed
    // message's id and the code per recipient, and emits campaign.failed.
    w.graph
        .then(crate::fake_providers::Behaviour::Reject {
            status: 400,
            code: 131026,
            message: "Message undeliverable".into(),
            details: None,
        })
        .await;
    let r = w
        .server
        .post(
            "/api/campaigns",
            k,
            &json!({
                "name": "Rejected",
                "channel_id": w.wa,
                "template_uuid": w.tpl,
                "template": tpl_params(),
                "contact_uuids": [w.contacts[2]],
                "consent": consent("utility", "ref"),
            }),
        )
        .await
        .expect(202);
    let id2 = r.body["uuid"].as_str().unwrap().to_owned();
    let done = wait_done(&w.server, k, &id2).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["counts"]["failed"], 1);
    let rec = &done["recipients"][0];
    assert_eq!(rec["status"], "failed");
    assert_eq!(rec["error_code"], "provider_rejected");
    assert!(rec["message_id"].is_i64(), "{done}");
    let failed = events_named(&w.receiver, "campaign.failed", 1).await;
    assert_eq!(failed[0]["data"]["campaign_uuid"], id2.as_str());

    // A contact deleted after the request was accepted is refused at send time (the rules of
    // campaign sends run again for each recipient).
    let r = w
        .server
        .post(
            "/api/campaigns",
            k,
            &json!({
                "name": "Late",
                "channel_id": w.wa,
                "template_uuid": w.tpl,
                "template": tpl_params(),
                "contact_uuids": [w.contacts[2], w.contacts[0]],
                "consent": consent("utility", "ref"),
            }),
        )
        .await
        .expect(202);
    let id3 = r.body["uuid"].as_str().unwrap().to_owned();
    delete(
        &w.server,
        &format!("/api/contacts/{}", w.contacts[2]),
        k,
        None,
    )
    .await
    .expect(204);
    let done = wait_done(&w.server, k, &id3).await;
    // The worker may have sent to it before the deletion: either outcome is consistent.
    let rec = &done["recipients"][0];
    assert!(
        rec["status"] == "sent" || (rec["status"] == "refused" && rec["error_code"].is_string()),
        "{done}"
    );
    assert_eq!(done["recipients"][1]["status"], "sent");
    assert_eq!(done["status"], "completed");
    w.server
        .get(&format!("/api/campaigns/{}", uuid::Uuid::new_v4()), k)
        .await
        .expect_error(404, "not_found");
    w.server
        .get("/api/campaigns/nope", k)
        .await
        .expect_error(404, "not_found");
    drop(w.env);
}

async fn campaign_request_validation(backend: Backend) {
    let w = campaign_world(backend).await;
    let k = &w.seed.key;
    let base = json!({
        "name": "C",
        "channel_id": w.wa,
        "template_uuid": w.tpl,
        "template": tpl_params(),
        "contact_uuids": [w.contacts[0]],
        "consent": consent("utility", "ref"),
    });
    let with = |patch: Value| {
        let mut b = base.clone();
        for (key, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(key);
            } else {
                b[key] = v.clone();
            }
        }
        b
    };
    let post = |body: Value| {
        let server = &w.server;
        async move { server.post("/api/campaigns", k, &body).await }
    };
    post(with(json!({"name": null})))
        .await
        .expect_error(422, "validation_failed");
    post(with(json!({"channel_id": 999_999})))
        .await
        .expect_error(422, "invalid_channel");
    post(with(json!({"channel_id": w.seed.channel_id})))
        .await
        .expect_error(422, "invalid_channel");
    post(with(
        json!({"template_uuid": uuid::Uuid::new_v4().to_string()}),
    ))
    .await
    .expect_error(422, "invalid_template");
    post(with(json!({"template": {"name": "other"}})))
        .await
        .expect_error(422, "invalid_template");
    post(with(json!({"contact_uuids": null})))
        .await
        .expect_error(422, "validation_failed");
    post(with(json!({"contact_uuids": []})))
        .await
        .expect_error(422, "validation_failed");
    post(with(
        json!({"contact_uuids": [uuid::Uuid::new_v4().to_string()]}),
    ))
    .await
    .expect_error(422, "validation_failed");
    post(with(
        json!({"group_id": uuid::Uuid::new_v4().to_string(), "contact_uuids": null}),
    ))
    .await
    .expect_error(422, "validation_failed");
    post(with(json!({"group_id": "x"})))
        .await
        .expect_error(422, "validation_failed");
    // A group of another organization.
    let other = w.env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = w.env.key(other["id"].as_i64().unwrap(), "*").await;
    let og = w
        .server
        .post("/api/groups", &other_key, &json!({"name": "Theirs"}))
        .await
        .expect(201)
        .body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = post(with(json!({"group_id": og, "contact_uuids": null})))
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["group_id"]);
    // An empty group of this organization.
    let g = w
        .server
        .post("/api/groups", k, &json!({"name": "Empty"}))
        .await
        .expect(201)
        .body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    post(with(json!({"group_id": g, "contact_uuids": null})))
        .await
        .expect_error(422, "validation_failed");
    // Consent: missing, malformed, wrong purpose, per-recipient map with a stray key.
    let r = post(with(json!({"consent": null})))
        .await
        .expect_error(422, "consent_required");
    assert!(fields(&r)[0].starts_with("consent"), "{}", r.text);
    post(with(json!({"consent": {"confirmed": true}})))
        .await
        .expect_error(422, "consent_required");
    post(with(json!({"consent": consent("marketing", "ref")})))
        .await
        .expect_error(422, "consent_required");
    let r = post(with(json!({
        "consent": null,
        "consents": { (w.contacts[0].clone()): {"confirmed": false} },
    })))
    .await
    .expect_error(422, "consent_required");
    assert!(
        fields(&r)[0].starts_with(&format!("consents.{}", w.contacts[0])),
        "{}",
        r.text
    );
    post(with(
        json!({"consents": {"not-a-uuid": consent("utility", "r")}}),
    ))
    .await
    .expect_error(422, "validation_failed");
    post(with(
        json!({"consents": { (w.contacts[1].clone()): consent("utility", "r") }}),
    ))
    .await
    .expect_error(422, "validation_failed");
    malformed(&w.server, Method::POST, "/api/campaigns", k).await;
    post(json!([1, 2]))
        .await
        .expect_error(422, "validation_failed");
    // Nothing was sent.
    assert_eq!(w.graph.received().await.len(), 0);
}

async fn flows_list_and_trigger(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let tpl = catalog_template(&env, wa, "order_update", &[]).await;
    let org = seed.org_id.to_string();
    let ch = seed.channel_id.to_string();
    let text_flow = env
        .admin(&[
            "flow",
            "create",
            "--org",
            &org,
            "--name",
            "Welcome",
            "--channel",
            &ch,
            "--text",
            "Welcome aboard!",
        ])
        .await;
    let params = json!([{"type": "body", "parameters": [{"type": "text", "text": "Ada"}, {"type": "text", "text": "A-1"}]}]).to_string();
    let wa_s = wa.to_string();
    let tpl_flow = env
        .admin(&[
            "flow",
            "create",
            "--org",
            &org,
            "--name",
            "Shipped",
            "--channel",
            &wa_s,
            "--template-uuid",
            &tpl,
            "--params",
            &params,
        ])
        .await;
    let off = env
        .admin(&[
            "flow",
            "create",
            "--org",
            &org,
            "--name",
            "Off",
            "--channel",
            &ch,
            "--text",
            "x",
            "--inactive",
        ])
        .await;
    // Bad admin input fails with a message, not a crash.
    let bad = env
        .admin_raw(&[
            "flow",
            "create",
            "--org",
            &org,
            "--name",
            "B",
            "--channel",
            "999999",
            "--text",
            "x",
        ])
        .await;
    assert!(!bad.success, "an unknown channel is refused");
    let server = env.start(&fast()).await;
    let k = &seed.key;

    let r = server.get("/api/flows", k).await.expect(200);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[0]["uuid"], off["uuid"], "newest first");
    assert_eq!(data[0]["active"], false);
    let r = server.get("/api/flows?limit=2", k).await.expect(200);
    assert_eq!(r.body["has_more"], true);

    // A text flow by phone on the sandbox channel: 201 with the send response.
    let text_id = text_flow["uuid"].as_str().unwrap();
    let path = format!("/api/flows/{text_id}/trigger");
    let r = server
        .post(&path, k, &json!({"phone": "0049 151 23456789"}))
        .await
        .expect(201);
    assert_eq!(r.body["message"]["type"], "text");
    assert_eq!(r.body["channel"]["id"], seed.channel_id);
    assert_eq!(r.body["contact"]["phone"], PHONE);
    let contact = r.body["contact"]["uuid"].as_str().unwrap().to_owned();
    // Idempotency-Key honoured: the same key replays.
    let a = server
        .post_with(
            &path,
            k,
            &json!({"contact_uuid": contact}),
            &[("Idempotency-Key", "flow-1")],
        )
        .await
        .expect(201);
    let b = server
        .post_with(
            &path,
            k,
            &json!({"contact_uuid": contact}),
            &[("Idempotency-Key", "flow-1")],
        )
        .await
        .expect(201);
    assert_eq!(a.body["message"]["id"], b.body["message"]["id"]);
    assert_eq!(b.header("idempotency-replayed"), Some("true"));
    server
        .post_with(
            &path,
            k,
            &json!({"phone": PHONE}),
            &[("Idempotency-Key", "flow-1")],
        )
        .await
        .expect_error(409, "idempotency_conflict");
    // Rate-limit class: sends.
    assert!(
        a.header("ratelimit-policy")
            .unwrap_or_default()
            .contains("\"sends\""),
        "{:?}",
        a.headers
    );

    // A template flow: sent through the provider.
    let tpl_id = tpl_flow["uuid"].as_str().unwrap();
    let r = server
        .post(
            &format!("/api/flows/{tpl_id}/trigger"),
            k,
            &json!({"contact_uuid": contact}),
        )
        .await
        .expect(201);
    assert_eq!(r.body["message"]["type"], "template");
    assert_eq!(graph.received().await.len(), 1);

    // Refusals: inactive 422, unknown 404, bad bodies 4xx.
    let off_id = off["uuid"].as_str().unwrap();
    server
        .post(
            &format!("/api/flows/{off_id}/trigger"),
            k,
            &json!({"phone": PHONE}),
        )
        .await
        .expect_error(422, "validation_failed");
    server
        .post(
            &format!("/api/flows/{}/trigger", uuid::Uuid::new_v4()),
            k,
            &json!({"phone": PHONE}),
        )
        .await
        .expect_error(404, "not_found");
    server
        .post("/api/flows/nope/trigger", k, &json!({"phone": PHONE}))
        .await
        .expect_error(404, "not_found");
    server
        .post(&path, k, &json!({}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(&path, k, &json!({"phone": "12"}))
        .await
        .expect_error(422, "validation_failed");
    server
        .post(
            &path,
            k,
            &json!({"contact_uuid": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    let r = server
        .post(
            &path,
            k,
            &json!({"contact_uuid": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.text);
    malformed(&server, Method::POST, &path, k).await;
    server
        .post_with(
            &path,
            k,
            &json!({"phone": PHONE}),
            &[("Idempotency-Key", "")],
        )
        .await
        .expect_error(400, "idempotency_key_invalid");
}

async fn scopes_and_legacy_keys_on_every_route(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let ch = seed.channel_id.to_string();
    let flow = env
        .admin(&[
            "flow",
            "create",
            "--org",
            &org,
            "--name",
            "F",
            "--channel",
            &ch,
            "--text",
            "hi",
        ])
        .await;
    let legacy_key = format!("legacy-{}", uuid::Uuid::new_v4().simple());
    env.admin(&["key", "import-legacy", "--org", &org, "--key", &legacy_key])
        .await;
    let server = env.start(&fast()).await;
    let any = uuid::Uuid::new_v4().to_string();
    let flow_id = flow["uuid"].as_str().unwrap();
    let routes: Vec<(Method, String, &str, Option<Value>)> = vec![
        (Method::GET, "/api/contacts".into(), "contacts:read", None),
        (
            Method::GET,
            format!("/api/contacts/{any}"),
            "contacts:read",
            None,
        ),
        (
            Method::POST,
            "/api/contacts".into(),
            "contacts:write",
            Some(json!({"phone": PHONE})),
        ),
        (
            Method::PUT,
            format!("/api/contacts/{any}"),
            "contacts:write",
            Some(json!({})),
        ),
        (
            Method::DELETE,
            format!("/api/contacts/{any}"),
            "contacts:write",
            None,
        ),
        (Method::GET, "/api/groups".into(), "groups:read", None),
        (
            Method::GET,
            format!("/api/groups/{any}"),
            "groups:read",
            None,
        ),
        (
            Method::GET,
            format!("/api/groups/{any}/contacts"),
            "groups:read",
            None,
        ),
        (
            Method::POST,
            "/api/groups".into(),
            "groups:write",
            Some(json!({"name": "G"})),
        ),
        (
            Method::PUT,
            format!("/api/groups/{any}"),
            "groups:write",
            Some(json!({"name": "G"})),
        ),
        (
            Method::DELETE,
            format!("/api/groups/{any}"),
            "groups:write",
            None,
        ),
        (
            Method::POST,
            format!("/api/groups/{any}/contacts"),
            "groups:write",
            Some(json!({"contact_uuids": [any]})),
        ),
        (
            Method::DELETE,
            format!("/api/groups/{any}/contacts"),
            "groups:write",
            Some(json!({"contact_uuids": [any]})),
        ),
        (
            Method::GET,
            "/api/canned-replies".into(),
            "canned_replies:read",
            None,
        ),
        (
            Method::POST,
            "/api/canned-replies".into(),
            "canned_replies:write",
            Some(json!({"shortcut": "/a", "text": "b"})),
        ),
        (
            Method::PUT,
            format!("/api/canned-replies/{any}"),
            "canned_replies:write",
            Some(json!({"text": "b"})),
        ),
        (
            Method::DELETE,
            format!("/api/canned-replies/{any}"),
            "canned_replies:write",
            None,
        ),
        (Method::GET, "/api/templates".into(), "templates:read", None),
        (
            Method::POST,
            "/api/campaigns".into(),
            "campaigns:write",
            Some(json!({})),
        ),
        (
            Method::GET,
            format!("/api/campaigns/{any}"),
            "campaigns:write",
            None,
        ),
        (Method::GET, "/api/flows".into(), "flow:read", None),
        (
            Method::POST,
            format!("/api/flows/{flow_id}/trigger"),
            "flow:write",
            Some(json!({"phone": PHONE})),
        ),
    ];
    // A key with every scope but the route's: 403 insufficient_scope naming it.
    for (method, path, scope, body) in &routes {
        let others: Vec<&str> = routes.iter().map(|r| r.2).filter(|s| s != scope).collect();
        let key = env.key(seed.org_id, &others.join(",")).await;
        let r = server
            .call(method.clone(), path, Some(&key), body.as_ref())
            .await
            .expect_error(403, "insufficient_scope");
        assert_eq!(
            r.body["error"]["details"]["required_scope"], *scope,
            "{method} {path}"
        );
        // The scope alone opens it (any answer but 401/403).
        let key = env.key(seed.org_id, scope).await;
        let r = server
            .call(method.clone(), path, Some(&key), body.as_ref())
            .await;
        assert!(
            r.status.as_u16() != 403 && r.status.as_u16() != 401 && r.status.as_u16() < 500,
            "{method} {path} with {scope}: {}",
            r.text
        );
        // The imported legacy key is a wildcard key.
        let r = server
            .call(method.clone(), path, Some(&legacy_key), body.as_ref())
            .await;
        assert!(
            r.status.as_u16() != 403 && r.status.as_u16() != 401 && r.status.as_u16() < 500,
            "{method} {path} with the legacy key: {}",
            r.text
        );
    }
    // Every route is in the OpenAPI document, tagged legacy, with its scope.
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200);
    for (method, path, scope, _) in &routes {
        let template = path
            .replace(&any, "{id}")
            .replace(flow_id, "{id}")
            .replace("/api/contacts/{id}", "/api/contacts/{uuid}");
        let op = &doc.body["paths"][&template][method.as_str().to_lowercase()];
        assert!(op.is_object(), "{method} {template} is documented");
        assert_eq!(op["tags"][0], "legacy", "{method} {template}");
        assert_eq!(
            op["security"][0]["bearer"][0], *scope,
            "{method} {template}"
        );
    }
    // No key: 401.
    server
        .call(Method::GET, "/api/contacts", None, None)
        .await
        .expect_error(401, "missing_api_key");
}

async fn two_instances_send_each_campaign_recipient_once(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let tpl = catalog_template(&env, wa, "order_update", &[]).await;
    let a = env.start(&fast()).await;
    let b = env.start(&fast()).await;
    let k = &seed.key;
    let n = 40;
    let mut contacts = Vec::new();
    for i in 0..n {
        let server = if i % 2 == 0 { &a } else { &b };
        let r = server
            .post(
                "/api/contacts",
                k,
                &json!({"phone": format!("+491512345{i:04}")}),
            )
            .await
            .expect(201);
        contacts.push(r.body["uuid"].as_str().unwrap().to_owned());
    }
    let r = a
        .post(
            "/api/campaigns",
            k,
            &json!({
                "name": "Both",
                "channel_id": wa,
                "template_uuid": tpl,
                "template": tpl_params(),
                "contact_uuids": contacts,
                "consent": consent("utility", "ref"),
            }),
        )
        .await
        .expect(202);
    let id = r.body["uuid"].as_str().unwrap().to_owned();
    let done = wait_done(&b, k, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"]["sent"], n);
    let received = graph.received().await;
    assert_eq!(
        received.len(),
        n as usize,
        "each recipient sent exactly once"
    );
    let r = a
        .get("/api/v1/integrations/messages?limit=200", k)
        .await
        .expect(200);
    assert_eq!(r.body["data"].as_array().unwrap().len(), n as usize);
}

async fn a_stopped_instances_recipients_are_taken_over(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph).await;
    let tpl = catalog_template(&env, wa, "order_update", &[]).await;
    let mut settings = fast();
    settings.push(("SWITCHBOARD_IDEMPOTENCY_LEASE", "1500ms"));
    settings.push(("SWITCHBOARD_PROVIDER_TIMEOUT", "1s"));
    let mut a = env.start(&settings).await;
    let k = &seed.key;
    let mut contacts = Vec::new();
    for i in 0..2 {
        let r = a
            .post(
                "/api/contacts",
                k,
                &json!({"phone": format!("+491512346{i:04}")}),
            )
            .await
            .expect(201);
        contacts.push(r.body["uuid"].as_str().unwrap().to_owned());
    }
    // The first provider call hangs; the instance is killed during it.
    graph.then(crate::fake_providers::Behaviour::Hold).await;
    let r = a
        .post(
            "/api/campaigns",
            k,
            &json!({
                "name": "Crash",
                "channel_id": wa,
                "template_uuid": tpl,
                "template": tpl_params(),
                "contact_uuids": contacts,
                "consent": consent("utility", "ref"),
            }),
        )
        .await
        .expect(202);
    let id = r.body["uuid"].as_str().unwrap().to_owned();
    graph.wait_for_arrivals(1).await;
    a.kill().await;
    // Another instance takes the claims over when their lease ends and finishes the campaign.
    let b = env.start(&settings).await;
    let done = wait_done(&b, k, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"]["sent"], 2);
    let recipients = done["recipients"].as_array().unwrap();
    assert!(
        recipients
            .iter()
            .all(|r| r["attempts"].as_i64().unwrap() >= 2),
        "both were claimed by the stopped instance first: {done}"
    );
    // The interrupted provider call is the one window of a second call (documented).
    assert_eq!(
        graph.arrivals(),
        3,
        "one held call, then one call per recipient"
    );
}
