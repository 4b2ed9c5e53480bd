//! Issue 4: conversation initiation with catalog templates and consent evidence. The template
//! catalogue (admin tools, WhatsApp status callbacks), initiation on the template endpoint
//! with every refusal code and nothing written, free text waiting for the contact, concurrent
//! initiations, campaign recipient sends with their audit entries, the OpenAPI document.

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::db_peek;
use crate::fake_providers::{Behaviour, Fake, hub_signature, wa_text, wa_webhook};
use crate::support::{Backend, Resp, Seed, Server, TestEnv};

both_backends!(
    initiation_opens_a_conversation_with_a_new_contact,
    initiation_reuses_the_contact_and_the_open_conversation,
    free_text_waits_until_the_contact_writes,
    initiation_channel_rules,
    initiation_template_rules,
    initiation_consent_rules,
    initiation_phone_and_field_rules,
    concurrent_initiations_for_one_new_number,
    provider_failures_during_initiation,
    template_admin_tools,
    template_status_callbacks_update_the_catalogue,
    campaign_sends_are_validated_and_audited,
    the_openapi_document_describes_initiation,
);

const TEMPLATE: &str = "/api/v1/integrations/messages/template";
const TEXT: &str = "/api/v1/integrations/messages";
const MEDIA: &str = "/api/v1/integrations/messages/media";

const PHONE: &str = "+4915123456789";
const PHONE_DIGITS: &str = "4915123456789";
const WA_TOKEN: &str = "EAAG-fake-access-token";
const APP_SECRET: &str = "app-secret-for-tests";
const PHONE_NUMBER_ID: &str = "1098765";
const BODY: &str = "Hi {{1}}, your order {{2}} has shipped.";

fn ikey() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn send(server: &Server, key: &str, path: &str, body: &Value) -> Resp {
    server
        .post_with(path, key, body, &[("Idempotency-Key", &ikey())])
        .await
}

fn field_names(r: &Resp) -> Vec<String> {
    r.body["error"]["details"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no field details in {}", r.text))
        .iter()
        .map(|f| f["field"].as_str().unwrap().to_owned())
        .collect()
}

fn rfc3339(offset: chrono::Duration) -> String {
    (chrono::Utc::now() + offset).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn consent(purpose: &str) -> Value {
    json!({
        "confirmed": true,
        "purpose": purpose,
        "source": "customer_request",
        "reference": "web-form-2026-0042",
        "captured_at": rfc3339(chrono::Duration::minutes(-3)),
    })
}

fn params(a: &str, b: &str) -> Value {
    json!([{"type": "body", "parameters": [{"type": "text", "text": a}, {"type": "text", "text": b}]}])
}

async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake, slug: &str) -> Value {
    env.admin(&[
        "channel",
        "create",
        "--org",
        &org_id.to_string(),
        "--type",
        "whatsapp_cloud",
        "--name",
        &format!("WhatsApp {slug}"),
        "--slug",
        slug,
        "--provider-config",
        &json!({
            "phone_number_id": PHONE_NUMBER_ID,
            "access_token": WA_TOKEN,
            "app_secret": APP_SECRET,
            "verify_token": "verify-me",
            "api_base_url": graph.base_url,
        })
        .to_string(),
    ])
    .await
}

async fn template(
    env: &TestEnv,
    channel_id: i64,
    name: &str,
    category: &str,
    extra: &[&str],
) -> Value {
    let channel = channel_id.to_string();
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
        category,
    ];
    args.extend_from_slice(extra);
    env.admin(&args).await
}

/// An organization (sandbox default channel, wildcard key), a WhatsApp channel on a fake Graph
/// API with a utility template of two body parameters, and a running server.
struct World {
    env: TestEnv,
    seed: Seed,
    graph: Fake,
    wa_id: i64,
    wa_uuid: String,
    tpl: String,
    server: Server,
}

async fn world(backend: Backend) -> World {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let wa_id = wa["id"].as_i64().unwrap();
    let components = json!([{"type": "BODY", "text": BODY}]).to_string();
    let tpl = template(
        &env,
        wa_id,
        "order_update",
        "utility",
        &["--components", &components],
    )
    .await;
    // Many sends per test: lift the per-minute send limit.
    let server = env
        // Allow-private: media is fetched from a loopback server (media sends on WhatsApp).
        .start(&[
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "100000"),
            ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ])
        .await;
    World {
        wa_uuid: wa["uuid"].as_str().unwrap().to_owned(),
        tpl: tpl["uuid"].as_str().unwrap().to_owned(),
        env,
        seed,
        graph,
        wa_id,
        server,
    }
}

impl World {
    fn initiation(&self, phone: &str) -> Value {
        json!({
            "channel_id": self.wa_id,
            "phone": phone,
            "first_name": "Ada",
            "template_uuid": self.tpl,
            "ensure_conversation": true,
            "template": {"name": "order_update", "language": "en_US", "components": params("Ada", "A-42")},
            "consent": consent("utility"),
        })
    }

    async fn post(&self, body: &Value) -> Resp {
        send(&self.server, &self.seed.key, TEMPLATE, body).await
    }

    async fn log(&self, query: &str) -> Vec<Value> {
        let r = self
            .server
            .get(
                &format!("/api/v1/integrations/events?limit=200&{query}"),
                &self.seed.key,
            )
            .await
            .expect(200);
        r.body["data"].as_array().unwrap().clone()
    }
}

/// Row counts that a refused request must leave unchanged.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Counts {
    contacts: i64,
    conversations: i64,
    messages: i64,
    consents: i64,
    outbox: i64,
    log: i64,
}

async fn count(env: &TestEnv, sql: &str) -> i64 {
    match env.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&env.database_url).await.unwrap();
            let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            n
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
            let n: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            n
        }
    }
}

async fn counts(env: &TestEnv) -> Counts {
    Counts {
        contacts: count(env, "SELECT COUNT(*) FROM contacts").await,
        conversations: count(env, "SELECT COUNT(*) FROM conversations").await,
        messages: count(env, "SELECT COUNT(*) FROM messages").await,
        consents: count(env, "SELECT COUNT(*) FROM consents").await,
        outbox: count(env, "SELECT COUNT(*) FROM events").await,
        log: count(env, "SELECT COUNT(*) FROM org_events").await,
    }
}

// ---------------------------------------------------------------------------------------------

async fn initiation_opens_a_conversation_with_a_new_contact(backend: Backend) {
    let w = world(backend).await;
    let before = counts(&w.env).await;
    let events_before = db_peek::events(&w.env, w.seed.org_id).await.len();
    let mut body = w.initiation("+49 151 2345-6789");
    body["template"]["language"] = json!({"code": "en_US"});
    let idem = ikey();
    let r = w
        .server
        .post_with(TEMPLATE, &w.seed.key, &body, &[("Idempotency-Key", &idem)])
        .await
        .expect(201);
    let b = &r.body;
    // The canonical resources.
    assert_eq!(b["contact"]["phone"], PHONE, "normalized to E.164");
    assert_eq!(b["contact"]["name"], "Ada");
    assert_eq!(b["conversation"]["status"], "open");
    assert_eq!(b["conversation"]["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(b["conversation"]["channel_id"], w.wa_id);
    assert!(b["conversation"]["last_inbound_at"].is_null());
    assert_eq!(b["message"]["type"], "template");
    assert_eq!(b["message"]["direction"], "outbound");
    assert_eq!(b["message"]["status"], "sent");
    assert_eq!(b["message"]["provider_message_id"], "wamid.FAKE000001");
    assert_eq!(b["message"]["conversation_uuid"], b["conversation"]["uuid"]);
    assert_eq!(b["message"]["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(b["message"]["template"]["name"], "order_update");
    assert_eq!(b["message"]["template"]["template_uuid"], w.tpl.as_str());
    assert_eq!(b["message"]["template"]["category"], "utility");
    assert_eq!(
        b["channel"],
        json!({"id": w.wa_id, "uuid": w.wa_uuid, "slug": "wa", "type": "whatsapp_cloud",
               "name": "WhatsApp wa", "identifier": PHONE_NUMBER_ID})
    );
    // The consent evidence, stored and linked from the message and the conversation.
    let c = &b["consent"];
    assert!(c["uuid"].is_string());
    assert_eq!(c["confirmed"], true);
    assert_eq!(c["purpose"], "utility");
    assert_eq!(c["source"], "customer_request");
    assert_eq!(c["reference"], "web-form-2026-0042");
    assert!(c["captured_at"].as_str().unwrap().ends_with('Z'));
    assert!(c["recorded_at"].is_string());
    assert_eq!(b["message"]["consent_uuid"], c["uuid"]);
    assert_eq!(b["conversation"]["consent_uuid"], c["uuid"]);
    assert_eq!(b["template"]["uuid"], w.tpl.as_str());
    assert_eq!(b["template"]["status"], "approved");
    assert_eq!(b["template"]["body_parameters"], 2);

    // The provider got the catalog template with the parameters.
    let received = w.graph.received().await;
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].body,
        json!({"messaging_product": "whatsapp", "recipient_type": "individual", "to": PHONE_DIGITS,
               "type": "template", "template": {"name": "order_update", "language": {"code": "en_US"},
               "components": params("Ada", "A-42")}})
    );

    // The history shows the message and its consent.
    let h = w
        .server
        .get(
            &format!(
                "{TEXT}?conversation_uuid={}",
                b["conversation"]["uuid"].as_str().unwrap()
            ),
            &w.seed.key,
        )
        .await
        .expect(200);
    assert_eq!(h.body["data"][0]["uuid"], b["message"]["uuid"]);
    assert_eq!(h.body["data"][0]["consent_uuid"], c["uuid"]);

    // Outbox: contact.created, conversation.created, message.sent and the audit.recorded of
    // conversation.initiated, written together.
    let after = counts(&w.env).await;
    assert_eq!(
        (
            after.contacts,
            after.conversations,
            after.messages,
            after.consents
        ),
        (
            before.contacts + 1,
            before.conversations + 1,
            before.messages + 1,
            before.consents + 1
        )
    );
    let names: Vec<String> = db_peek::events(&w.env, w.seed.org_id)
        .await
        .into_iter()
        .skip(events_before)
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec![
            "contact.created",
            "conversation.created",
            "message.sent",
            "audit.recorded"
        ]
    );
    let sent = &db_peek::events_named(&w.env, w.seed.org_id, "message.sent").await[0];
    assert_eq!(sent.data["message_id"], b["message"]["id"]);
    assert_eq!(sent.data["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(sent.data["status"], "sent");
    assert_eq!(sent.channel["id"], w.wa_id);
    let audit = &db_peek::events_named(&w.env, w.seed.org_id, "audit.recorded").await[0];
    assert_eq!(audit.data["type"], "conversation.initiated");

    // The audit entry: who (the key) initiated what under which consent; never the body.
    let log = w.log("type=conversation.initiated").await;
    assert_eq!(log.len(), 1);
    let e = &log[0];
    assert_eq!(e["category"], "audit");
    assert_eq!(e["actor"]["type"], "api_key");
    assert_eq!(e["actor"]["api_key_id"], w.seed.key_id);
    assert_eq!(
        e["subject"],
        json!({"type": "conversation", "id": b["conversation"]["uuid"]})
    );
    let d = &e["details"];
    assert_eq!(d["conversation_uuid"], b["conversation"]["uuid"]);
    assert_eq!(d["conversation_created"], true);
    assert_eq!(d["contact_uuid"], b["contact"]["uuid"]);
    assert_eq!(d["contact_created"], true);
    assert_eq!(d["channel_id"], w.wa_id);
    assert_eq!(d["message_uuid"], b["message"]["uuid"]);
    assert_eq!(
        d["template"],
        json!({"uuid": w.tpl, "name": "order_update", "language": "en_US", "category": "utility"})
    );
    assert_eq!(d["consent"]["uuid"], c["uuid"]);
    assert_eq!(d["consent"]["purpose"], "utility");
    assert_eq!(d["consent"]["source"], "customer_request");
    assert_eq!(d["consent"]["reference"], "web-form-2026-0042");
    assert_eq!(d["consent"]["captured_at"], c["captured_at"]);
    assert!(
        !e.to_string().contains("A-42"),
        "no message content in the log: {e}"
    );
    assert_eq!(
        w.log("actor=api_key").await.len(),
        1,
        "filterable by the key"
    );

    // Idempotency as for every send: the same key and body replays, nothing more is sent.
    let replay = w
        .server
        .post_with(TEMPLATE, &w.seed.key, &body, &[("Idempotency-Key", &idem)])
        .await
        .expect(201);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(replay.body, r.body);
    assert_eq!(w.graph.arrivals(), 1);
    assert_eq!(counts(&w.env).await, after);
    let mut changed = body.clone();
    changed["first_name"] = json!("Bob");
    w.server
        .post_with(
            TEMPLATE,
            &w.seed.key,
            &changed,
            &[("Idempotency-Key", &idem)],
        )
        .await
        .expect_error(409, "idempotency_conflict");
}

async fn initiation_reuses_the_contact_and_the_open_conversation(backend: Backend) {
    let w = world(backend).await;
    let known = w
        .env
        .admin(&[
            "contact",
            "create",
            "--org",
            &w.seed.org_id.to_string(),
            "--phone",
            PHONE,
            "--name",
            "Ada Lovelace",
        ])
        .await;
    let first = w.post(&w.initiation(PHONE)).await.expect(201);
    assert_eq!(first.body["contact"]["uuid"], known["uuid"], "reused");
    assert_eq!(
        first.body["contact"]["name"], "Ada Lovelace",
        "first_name only names new contacts"
    );
    let conversation = first.body["conversation"]["uuid"].clone();
    // A second initiation continues the open conversation.
    let mut again = w.initiation("0049 151 23456789");
    again["consent"]["source"] = json!("phone_call");
    let second = w.post(&again).await.expect(201);
    assert_eq!(second.body["conversation"]["uuid"], conversation);
    assert_eq!(second.body["contact"]["uuid"], known["uuid"]);
    assert_ne!(
        second.body["consent"]["uuid"],
        first.body["consent"]["uuid"]
    );
    assert_eq!(
        second.body["message"]["consent_uuid"],
        second.body["consent"]["uuid"]
    );
    assert_eq!(
        second.body["conversation"]["consent_uuid"], first.body["consent"]["uuid"],
        "the conversation keeps the consent it was initiated under"
    );
    // By contact_uuid, too.
    let mut by_uuid = w.initiation(PHONE);
    by_uuid.as_object_mut().unwrap().remove("phone");
    by_uuid["contact_uuid"] = known["uuid"].clone();
    let third = w.post(&by_uuid).await.expect(201);
    assert_eq!(third.body["conversation"]["uuid"], conversation);

    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM contacts").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM conversations").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM consents").await, 3);
    // contact.created came from `admin contact create` only; one conversation.created.
    assert_eq!(
        db_peek::events_named(&w.env, w.seed.org_id, "contact.created")
            .await
            .len(),
        1
    );
    assert_eq!(
        db_peek::events_named(&w.env, w.seed.org_id, "conversation.created")
            .await
            .len(),
        1
    );
    assert_eq!(
        db_peek::events_named(&w.env, w.seed.org_id, "message.sent")
            .await
            .len(),
        3
    );
    let log = w.log("type=conversation.initiated").await;
    assert_eq!(log.len(), 3);
    // Newest first.
    assert_eq!(log[0]["details"]["conversation_created"], false);
    assert_eq!(log[0]["details"]["contact_created"], false);
    assert_eq!(log[1]["details"]["consent"]["source"], "phone_call");
    assert_eq!(log[2]["details"]["conversation_created"], true);
    assert_eq!(log[2]["details"]["contact_created"], false);
}

async fn free_text_waits_until_the_contact_writes(backend: Backend) {
    let w = world(backend).await;
    let key = &w.seed.key;
    let text = json!({"channel_id": w.wa_id, "phone": PHONE, "message": "Hello"});
    let interactive = json!({"channel_id": w.wa_id, "phone": PHONE, "type": "interactive",
        "interactive": {"type": "button", "body": {"text": "Ready?"},
        "action": {"buttons": [{"type": "reply", "reply": {"id": "y", "title": "Yes"}}]}}});
    let files = crate::media_server::MediaServer::start().await;
    files.file("/a.png", crate::media_server::PNG.to_vec(), "image/png");
    let media = json!({"channel_id": w.wa_id, "phone": PHONE, "media_type": "image",
        "media_url": files.url("/a.png")});

    // Free text is never a first message.
    for (path, body) in [(TEXT, &text), (TEXT, &interactive), (MEDIA, &media)] {
        send(&w.server, key, path, body)
            .await
            .expect_error(422, "conversation_required");
    }
    assert_eq!(w.graph.arrivals(), 0);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM contacts").await, 0);

    // After the initiation, free text waits until the contact writes.
    let init = w.post(&w.initiation(PHONE)).await.expect(201);
    let conversation = init.body["conversation"]["uuid"].clone();
    for (path, body) in [(TEXT, &text), (TEXT, &interactive), (MEDIA, &media)] {
        let r = send(&w.server, key, path, body)
            .await
            .expect_error(422, "outside_service_window");
        assert_eq!(
            r.body["error"]["details"]["conversation_uuid"],
            conversation
        );
        assert!(r.body["error"]["details"]["last_inbound_at"].is_null());
    }
    assert_eq!(
        w.graph.arrivals(),
        1,
        "only the template reached the provider"
    );

    // The contact answers (a signed WhatsApp callback): the window opens.
    let now = chrono::Utc::now().timestamp();
    let raw = serde_json::to_vec(&wa_webhook(
        PHONE_NUMBER_ID,
        vec![wa_text(PHONE_DIGITS, "wamid.REPLY1", now, "Thanks!")],
        vec![],
    ))
    .unwrap();
    let sig = hub_signature(APP_SECRET, &raw);
    let cb = w
        .server
        .client
        .post(w.server.url(&format!("/inbound/{}", w.wa_uuid)))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", sig)
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(cb.status().as_u16(), 200);
    for (path, body) in [(TEXT, &text), (TEXT, &interactive), (MEDIA, &media)] {
        let r = send(&w.server, key, path, body).await.expect(201);
        assert_eq!(r.body["conversation"]["uuid"], conversation);
        assert!(r.body["conversation"]["last_inbound_at"].is_string());
        assert_eq!(
            r.body["conversation"]["consent_uuid"],
            init.body["consent"]["uuid"]
        );
    }
    assert_eq!(w.graph.arrivals(), 4);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM conversations").await, 1);
}

/// Asserts a refusal with its code, and that nothing was written or sent.
async fn refused(w: &World, body: &Value, code: &str) -> Resp {
    let before = counts(&w.env).await;
    let arrivals = w.graph.arrivals();
    let r = w.post(body).await.expect_error(422, code);
    assert_eq!(counts(&w.env).await, before, "nothing written: {}", r.text);
    assert_eq!(w.graph.arrivals(), arrivals, "nothing sent: {}", r.text);
    r
}

async fn initiation_channel_rules(backend: Backend) {
    let w = world(backend).await;
    let org = w.seed.org_id.to_string();
    let reason = |r: &Resp| {
        r.body["error"]["details"]["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // channel_id is required; channel_slug and default channels do not count.
    let mut no_channel = w.initiation(PHONE);
    no_channel.as_object_mut().unwrap().remove("channel_id");
    let r = refused(&w, &no_channel, "invalid_channel").await;
    assert_eq!(reason(&r), "channel_id_required");
    assert_eq!(field_names(&r), ["channel_id"]);
    let mut by_slug = no_channel.clone();
    by_slug["channel_slug"] = json!("wa");
    let r = refused(&w, &by_slug, "invalid_channel").await;
    assert_eq!(reason(&r), "channel_id_required");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("channel_slug")
    );
    let mut both = w.initiation(PHONE);
    both["channel_slug"] = json!("wa");
    refused(&w, &both, "channel_conflict").await;
    // A key whose default channel is the WhatsApp channel still needs channel_id.
    let with_default = w
        .env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "messages:write",
            "--default-channel",
            &w.wa_id.to_string(),
        ])
        .await;
    let r = send(
        &w.server,
        with_default["key"].as_str().unwrap(),
        TEMPLATE,
        &no_channel,
    )
    .await
    .expect_error(422, "invalid_channel");
    assert_eq!(reason(&r), "channel_id_required");

    // Unknown, foreign, inactive, and channels of other types.
    let mut unknown = w.initiation(PHONE);
    unknown["channel_id"] = json!(999_999);
    assert_eq!(
        reason(&refused(&w, &unknown, "invalid_channel").await),
        "not_found"
    );
    let other_org = w.env.admin(&["org", "create", "--name", "Other"]).await;
    let foreign = whatsapp_channel(
        &w.env,
        other_org["id"].as_i64().unwrap(),
        &w.graph,
        "theirs",
    )
    .await;
    let mut theirs = w.initiation(PHONE);
    theirs["channel_id"] = foreign["id"].clone();
    assert_eq!(
        reason(&refused(&w, &theirs, "invalid_channel").await),
        "not_found"
    );
    let inactive = whatsapp_channel(&w.env, w.seed.org_id, &w.graph, "sleepy").await;
    w.env
        .admin(&[
            "channel",
            "update",
            &inactive["id"].to_string(),
            "--inactive",
        ])
        .await;
    let mut asleep = w.initiation(PHONE);
    asleep["channel_id"] = inactive["id"].clone();
    assert_eq!(
        reason(&refused(&w, &asleep, "invalid_channel").await),
        "inactive"
    );
    let telegram = w
        .env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "telegram", "--name", "Bot",
        ])
        .await;
    let leads = w
        .env
        .admin(&[
            "channel",
            "create",
            "--org",
            &org,
            "--type",
            "lead_ingestion",
            "--name",
            "Leads",
        ])
        .await;
    for channel in [
        json!(w.seed.channel_id),
        telegram["id"].clone(),
        leads["id"].clone(),
    ] {
        let mut wrong_type = w.initiation(PHONE);
        wrong_type["channel_id"] = channel;
        let r = refused(&w, &wrong_type, "invalid_channel").await;
        assert_eq!(reason(&r), "not_template_capable", "{}", r.text);
    }
    // A wrong type for channel_id is a shape error.
    let mut text_id = w.initiation(PHONE);
    text_id["channel_id"] = json!("wa");
    assert_eq!(
        field_names(&refused(&w, &text_id, "validation_failed").await),
        ["channel_id"]
    );
    assert!(w.log("type=conversation.initiated").await.is_empty());
}

async fn initiation_template_rules(backend: Backend) {
    let w = world(backend).await;
    let reason = |r: &Resp| {
        r.body["error"]["details"]["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let with_uuid = |uuid: &Value| {
        let mut b = w.initiation(PHONE);
        b["template_uuid"] = uuid.clone();
        b
    };
    // Missing, malformed, unknown.
    let mut missing = w.initiation(PHONE);
    missing.as_object_mut().unwrap().remove("template_uuid");
    let r = refused(&w, &missing, "invalid_template").await;
    assert_eq!(reason(&r), "template_uuid_required");
    assert_eq!(field_names(&r), ["template_uuid"]);
    assert_eq!(
        reason(&refused(&w, &with_uuid(&json!("not-a-uuid")), "invalid_template").await),
        "not_found"
    );
    assert_eq!(
        reason(
            &refused(
                &w,
                &with_uuid(&json!(uuid::Uuid::new_v4().to_string())),
                "invalid_template"
            )
            .await
        ),
        "not_found"
    );
    // Another organization's template is not found either.
    let other_org = w.env.admin(&["org", "create", "--name", "Other"]).await;
    let foreign_channel = whatsapp_channel(
        &w.env,
        other_org["id"].as_i64().unwrap(),
        &w.graph,
        "theirs",
    )
    .await;
    let foreign = template(
        &w.env,
        foreign_channel["id"].as_i64().unwrap(),
        "order_update",
        "utility",
        &[],
    )
    .await;
    assert_eq!(
        reason(&refused(&w, &with_uuid(&foreign["uuid"]), "invalid_template").await),
        "not_found"
    );
    // A template of another channel of the organization.
    let second = whatsapp_channel(&w.env, w.seed.org_id, &w.graph, "wa2").await;
    let elsewhere = template(
        &w.env,
        second["id"].as_i64().unwrap(),
        "order_update",
        "utility",
        &[],
    )
    .await;
    let r = refused(&w, &with_uuid(&elsewhere["uuid"]), "invalid_template").await;
    assert_eq!(reason(&r), "wrong_channel");
    assert_eq!(
        r.body["error"]["details"]["template_channel_id"],
        second["id"]
    );
    // Inactive, and every status but approved.
    let inactive = template(&w.env, w.wa_id, "sleeping", "utility", &["--inactive"]).await;
    assert_eq!(
        reason(&refused(&w, &with_uuid(&inactive["uuid"]), "invalid_template").await),
        "inactive"
    );
    for status in ["pending", "rejected", "paused", "disabled"] {
        let t = template(
            &w.env,
            w.wa_id,
            &format!("t_{status}"),
            "utility",
            &["--status", status],
        )
        .await;
        let r = refused(&w, &with_uuid(&t["uuid"]), "invalid_template").await;
        assert_eq!(reason(&r), "not_approved");
        assert_eq!(r.body["error"]["details"]["status"], status);
    }
    // An approved template turned inactive by the admin tools, then active again.
    w.env
        .admin(&["template", "update", &w.tpl, "--inactive"])
        .await;
    assert_eq!(
        reason(&refused(&w, &w.initiation(PHONE), "invalid_template").await),
        "inactive"
    );
    w.env
        .admin(&["template", "update", &w.tpl, "--active"])
        .await;

    // name and language must agree with the catalog template.
    let mut wrong_name = w.initiation(PHONE);
    wrong_name["template"]["name"] = json!("order_updated");
    let r = refused(&w, &wrong_name, "invalid_template").await;
    assert_eq!(reason(&r), "mismatch");
    assert_eq!(field_names(&r), ["template.name"]);
    let mut wrong_language = w.initiation(PHONE);
    wrong_language["template"]["language"] = json!("de");
    assert_eq!(
        field_names(&refused(&w, &wrong_language, "invalid_template").await),
        ["template.language"]
    );

    // The parameters must fit: count, kind, and a body component when one is needed.
    for (components, field) in [
        (
            json!([{"type": "body", "parameters": [{"type": "text", "text": "Ada"}]}]),
            "template.components[0].parameters",
        ),
        (
            json!([{"type": "body", "parameters": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]),
            "template.components[0].parameters",
        ),
        (json!([]), "template.components"),
        (
            json!([{"type": "body", "parameters": [{"type": "text", "text": ""}, {"type": "text", "text": "b"}]}]),
            "template.components[0].parameters[0].text",
        ),
        (
            json!([{"type": "body", "parameters": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"type": "header", "parameters": [{"type": "text", "text": "x"}]}]),
            "template.components[1].parameters",
        ),
    ] {
        let mut b = w.initiation(PHONE);
        b["template"]["components"] = components;
        let r = refused(&w, &b, "invalid_template").await;
        assert_eq!(reason(&r), "parameters_mismatch");
        assert_eq!(field_names(&r), [field], "{}", r.text);
    }
    // A malformed component is a shape error.
    let mut malformed = w.initiation(PHONE);
    malformed["template"]["components"] = json!([{"type": "carousel"}]);
    assert_eq!(
        field_names(&refused(&w, &malformed, "validation_failed").await),
        ["template.components[0].type"]
    );

    // Without a `template` object the catalog gives name and language; parameters are still
    // checked (this template needs two).
    let mut bare = w.initiation(PHONE);
    bare.as_object_mut().unwrap().remove("template");
    assert_eq!(
        reason(&refused(&w, &bare, "invalid_template").await),
        "parameters_mismatch"
    );
    // A template whose components were not given takes what is sent, unchecked.
    let free = template(&w.env, w.wa_id, "hello_world", "utility", &[]).await;
    assert!(free["body_parameters"].is_null());
    let mut b = w.initiation(PHONE);
    b["template_uuid"] = free["uuid"].clone();
    b.as_object_mut().unwrap().remove("template");
    let ok = w.post(&b).await.expect(201);
    assert_eq!(ok.body["message"]["template"]["name"], "hello_world");
    assert_eq!(ok.body["message"]["template"]["language"], "en_US");
    let sent = w.graph.received().await.pop().unwrap();
    assert_eq!(
        sent.body["template"],
        json!({"name": "hello_world", "language": {"code": "en_US"}})
    );
}

async fn initiation_consent_rules(backend: Backend) {
    let w = world(backend).await;
    let with_consent = |c: Value| {
        let mut b = w.initiation(PHONE);
        b["consent"] = c;
        b
    };
    let mut missing = w.initiation(PHONE);
    missing.as_object_mut().unwrap().remove("consent");
    assert_eq!(
        field_names(&refused(&w, &missing, "consent_required").await),
        ["consent"]
    );
    assert_eq!(
        field_names(&refused(&w, &with_consent(json!(null)), "consent_required").await),
        ["consent"]
    );
    assert_eq!(
        field_names(&refused(&w, &with_consent(json!("yes")), "consent_required").await),
        ["consent"]
    );
    assert_eq!(
        field_names(&refused(&w, &with_consent(json!({})), "consent_required").await),
        [
            "consent.confirmed",
            "consent.purpose",
            "consent.source",
            "consent.reference",
            "consent.captured_at"
        ]
    );
    for (key, value) in [
        ("confirmed", json!(false)),
        ("confirmed", json!("true")),
        ("confirmed", Value::Null),
        ("purpose", json!("newsletter")),
        ("purpose", json!("UTILITY")),
        ("source", json!("carrier_pigeon")),
        ("source", json!(3)),
        ("reference", json!("")),
        ("reference", json!("   ")),
        ("reference", json!("x".repeat(257))),
        ("captured_at", json!("yesterday")),
        ("captured_at", json!("2026-13-45T00:00:00Z")),
        ("captured_at", json!(1786000000)),
        ("captured_at", json!(rfc3339(chrono::Duration::hours(1)))),
        ("captured_at", json!(rfc3339(chrono::Duration::days(400)))),
    ] {
        let mut c = consent("utility");
        c[key] = value.clone();
        let r = refused(&w, &with_consent(c), "consent_required").await;
        assert_eq!(
            field_names(&r),
            [format!("consent.{key}")],
            "{key} = {value}"
        );
    }
    // By default no clock skew is allowed: half a minute ahead is in the future too.
    let mut ahead = consent("utility");
    ahead["captured_at"] = json!(rfc3339(chrono::Duration::seconds(30)));
    let r = refused(&w, &with_consent(ahead), "consent_required").await;
    assert_eq!(field_names(&r), ["consent.captured_at"]);
    // A time just past is accepted.
    let mut just_now = consent("utility");
    just_now["captured_at"] = json!(rfc3339(chrono::Duration::seconds(-1)));
    w.post(&with_consent(just_now)).await.expect(201);

    // The purpose must match the template's category.
    let marketing = template(
        &w.env,
        w.wa_id,
        "spring_sale",
        "marketing",
        &[
            "--components",
            r#"[{"type":"BODY","text":"Spring sale: {{1}} off"}]"#,
        ],
    )
    .await;
    let promo = |purpose: &str| {
        let mut b = w.initiation("+4915223456789");
        b["template_uuid"] = marketing["uuid"].clone();
        b["template"] = json!({"name": "spring_sale", "language": "en_US",
            "components": [{"type": "body", "parameters": [{"type": "text", "text": "20%"}]}]});
        b["consent"] = consent(purpose);
        b
    };
    for purpose in ["utility", "authentication"] {
        let r = refused(&w, &promo(purpose), "consent_required").await;
        assert_eq!(field_names(&r), ["consent.purpose"]);
        assert_eq!(r.body["error"]["details"]["template_category"], "marketing");
    }
    w.post(&promo("marketing")).await.expect(201);
    // Marketing consent does not cover a utility template either.
    refused(&w, &with_consent(consent("marketing")), "consent_required").await;
    // Authentication templates need authentication consent; every source is accepted.
    let otp = template(
        &w.env,
        w.wa_id,
        "login_code",
        "authentication",
        &["--components", r#"[{"type":"BODY","text":"{{1}} is your code."},{"type":"BUTTONS","buttons":[{"type":"URL","text":"Copy","url":"https://x.test/otp/{{1}}"}]}]"#],
    )
    .await;
    for (i, source) in [
        "customer_request",
        "website_form",
        "checkout",
        "in_person",
        "phone_call",
        "import",
    ]
    .iter()
    .enumerate()
    {
        let mut c = consent("authentication");
        c["source"] = json!(source);
        let b = json!({
            "channel_id": w.wa_id, "phone": format!("+49176123456{:02}", 10 + i), "ensure_conversation": true,
            "template_uuid": otp["uuid"], "consent": c,
            "template": {"components": [
                {"type": "body", "parameters": [{"type": "text", "text": "123456"}]},
                {"type": "button", "sub_type": "url", "index": "0", "parameters": [{"type": "text", "text": "123456"}]}]},
        });
        let r = w.post(&b).await.expect(201);
        assert_eq!(r.body["consent"]["source"], *source);
        assert_eq!(r.body["consent"]["purpose"], "authentication");
    }
}

async fn initiation_phone_and_field_rules(backend: Backend) {
    let w = world(backend).await;
    for phone in [
        json!("not a phone"),
        json!("+49 151 ABC 6789"),
        json!("123"),
        json!("+4915123456789012345"),
        json!("+1 555 0100"),
        json!(""),
        json!(4915123456789_i64),
    ] {
        let mut b = w.initiation(PHONE);
        b["phone"] = phone.clone();
        let r = refused(&w, &b, "validation_failed").await;
        assert_eq!(field_names(&r), ["phone"], "{phone}: {}", r.text);
    }
    let mut no_phone = w.initiation(PHONE);
    no_phone.as_object_mut().unwrap().remove("phone");
    assert_eq!(
        field_names(&refused(&w, &no_phone, "validation_failed").await),
        ["phone"]
    );
    let mut unknown_contact = no_phone.clone();
    unknown_contact["contact_uuid"] = json!(uuid::Uuid::new_v4().to_string());
    assert_eq!(
        field_names(&refused(&w, &unknown_contact, "validation_failed").await),
        ["contact_uuid"]
    );
    for name in [
        json!(""),
        json!("x".repeat(201)),
        json!("a\u{7}b"),
        json!(5),
    ] {
        let mut b = w.initiation(PHONE);
        b["first_name"] = name.clone();
        assert_eq!(
            field_names(&refused(&w, &b, "validation_failed").await),
            ["first_name"],
            "{name}"
        );
    }
    let mut flag = w.initiation(PHONE);
    flag["ensure_conversation"] = json!("yes");
    assert_eq!(
        field_names(&refused(&w, &flag, "validation_failed").await),
        ["ensure_conversation"]
    );
    let mut bad_template = w.initiation(PHONE);
    bad_template["template"] = json!("order_update");
    assert_eq!(
        field_names(&refused(&w, &bad_template, "validation_failed").await),
        ["template"]
    );
    // Several problems are reported together.
    let mut many = w.initiation("letters");
    many["first_name"] = json!("");
    assert_eq!(
        field_names(&refused(&w, &many, "validation_failed").await),
        ["phone", "first_name"]
    );
    // Malformed JSON and a missing Idempotency-Key are as for every send.
    let r = w
        .server
        .client
        .post(w.server.url(TEMPLATE))
        .bearer_auth(&w.seed.key)
        .header("content-type", "application/json")
        .header("idempotency-key", ikey())
        .body("{\"ensure_conversation\": true,")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    w.server
        .post(TEMPLATE, &w.seed.key, &w.initiation(PHONE))
        .await
        .expect_error(400, "idempotency_key_missing");
    // The scope is checked first.
    let reader = w.env.key(w.seed.org_id, "messages:read").await;
    send(&w.server, &reader, TEMPLATE, &w.initiation(PHONE))
        .await
        .expect_error(403, "insufficient_scope");
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM contacts").await, 0);
}

async fn concurrent_initiations_for_one_new_number(backend: Backend) {
    let w = world(backend).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = w.server.client.clone();
        let url = w.server.url(TEMPLATE);
        let key = w.seed.key.clone();
        let mut body = w.initiation(PHONE);
        body["first_name"] = json!(format!("Caller {i}"));
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .header("idempotency-key", ikey())
                .json(&body)
                .send()
                .await
                .unwrap();
            Server::read(r).await
        }));
    }
    let mut contacts = std::collections::HashSet::new();
    let mut conversations = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await.unwrap().expect(201);
        contacts.insert(r.body["contact"]["uuid"].as_str().unwrap().to_owned());
        conversations.insert(r.body["conversation"]["uuid"].as_str().unwrap().to_owned());
    }
    assert_eq!(contacts.len(), 1, "one contact");
    assert_eq!(conversations.len(), 1, "one conversation");
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM contacts").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM conversations").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM messages").await, 6);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM consents").await, 6);
    let created = |name: &'static str| {
        let env = &w.env;
        let org = w.seed.org_id;
        async move { db_peek::events_named(env, org, name).await.len() }
    };
    assert_eq!(created("contact.created").await, 1);
    assert_eq!(created("conversation.created").await, 1);
    assert_eq!(created("message.sent").await, 6);
    let log = w.log("type=conversation.initiated").await;
    assert_eq!(log.len(), 6);
    assert_eq!(
        log.iter()
            .filter(|e| e["details"]["conversation_created"] == true)
            .count(),
        1
    );
}

async fn provider_failures_during_initiation(backend: Backend) {
    let w = world(backend).await;
    // Unavailable: nothing written; a retry with the same key succeeds.
    w.graph.then(Behaviour::Unavailable).await;
    let idem = ikey();
    let body = w.initiation(PHONE);
    let before = counts(&w.env).await;
    w.server
        .post_with(TEMPLATE, &w.seed.key, &body, &[("Idempotency-Key", &idem)])
        .await
        .expect_error(503, "provider_unavailable");
    assert_eq!(counts(&w.env).await, before);
    let ok = w
        .server
        .post_with(TEMPLATE, &w.seed.key, &body, &[("Idempotency-Key", &idem)])
        .await
        .expect(201);
    assert!(ok.header("idempotency-replayed").is_none());

    // Rejected (e.g. the template does not exist at Meta): the failed message is recorded with
    // its evidence, but no conversation is opened and no initiation is audited.
    w.graph
        .then(Behaviour::Reject {
            status: 404,
            code: 132001,
            message: "(#132001) Template name does not exist in the translation".into(),
            details: Some("template name (order_update) does not exist in en_US".into()),
        })
        .await;
    let r = w
        .post(&w.initiation("+4915223456789"))
        .await
        .expect_error(422, "provider_rejected");
    assert_eq!(r.body["error"]["details"]["provider_code"], 132001);
    assert_eq!(r.body["error"]["details"]["message"]["status"], "failed");
    assert!(r.body["error"]["details"]["message"]["consent_uuid"].is_string());
    assert!(r.body["error"]["details"]["message"]["conversation_uuid"].is_null());
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM conversations").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM consents").await, 2);
    assert_eq!(w.log("type=conversation.initiated").await.len(), 1);
}

async fn template_admin_tools(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa").await;
    let wa_id = wa["id"].to_string();
    let components = json!([
        {"type": "HEADER", "format": "TEXT", "text": "Order {{1}}"},
        {"type": "BODY", "text": BODY},
        {"type": "FOOTER", "text": "Acme"},
        {"type": "BUTTONS", "buttons": [{"type": "URL", "text": "Track", "url": "https://x.test/t/{{1}}"}]}
    ]);
    let t = env
        .admin(&[
            "template",
            "create",
            "--channel",
            &wa_id,
            "--name",
            "order_update",
            "--language",
            "en_US",
            "--category",
            "utility",
            "--components",
            &components.to_string(),
            "--provider-template-id",
            "594425479261596",
        ])
        .await;
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
        assert!(t.get(key).is_some(), "{key} in {t}");
    }
    assert_eq!(t["channel_id"], wa["id"]);
    assert_eq!(t["status"], "approved", "the default status");
    assert_eq!(t["active"], true);
    assert_eq!(t["components"], components);
    assert_eq!(t["body_parameters"], 2);
    assert_eq!(t["header_parameters"], 1);
    assert_eq!(t["button_parameters"], 1);
    assert_eq!(t["provider_template_id"], "594425479261596");
    let uuid = t["uuid"].as_str().unwrap().to_owned();

    // Bad input: one line on standard error, non-zero exit, nothing created.
    let sandbox = seed.channel_id.to_string();
    for (args, needle) in [
        (
            vec![
                "--channel",
                "999999",
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
            ],
            "does not exist",
        ),
        (
            vec![
                "--channel",
                &sandbox,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
            ],
            "whatsapp_cloud",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "promo",
            ],
            "--category",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--status",
                "ok",
            ],
            "--status",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "english please",
                "--category",
                "utility",
            ],
            "--language",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                " ",
                "--language",
                "en",
                "--category",
                "utility",
            ],
            "--name",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--components",
                "[{",
            ],
            "--components",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--components",
                r#"[{"type":"FOOTER","text":"x"}]"#,
            ],
            "BODY",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--components",
                r#"[{"type":"BODY","text":"{{1}} {{3}}"}]"#,
            ],
            "gaps",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--components",
                r#"[{"type":"BODY","text":"Hi {{name}}"}]"#,
            ],
            "numbered",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "x",
                "--language",
                "en",
                "--category",
                "utility",
                "--components",
                r#"[{"type":"STICKER"}]"#,
            ],
            "type",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "order_update",
                "--language",
                "en_US",
                "--category",
                "utility",
            ],
            "already has",
        ),
        (
            vec![
                "--channel",
                &wa_id,
                "--name",
                "y",
                "--language",
                "en",
                "--category",
                "utility",
                "--provider-template-id",
                "594425479261596",
            ],
            "provider id",
        ),
    ] {
        let mut full = vec!["template", "create"];
        full.extend(args.iter().copied());
        let out = env.admin_raw(&full).await;
        assert!(!out.success, "{full:?} must fail");
        assert!(
            out.stdout.trim().is_empty(),
            "{full:?} printed {}",
            out.stdout
        );
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "one line: {}",
            out.stderr
        );
        assert!(out.stderr.contains(needle), "{full:?}: {}", out.stderr);
    }
    let list = env.admin(&["template", "list", "--channel", &wa_id]).await;
    assert_eq!(
        list["data"].as_array().unwrap().len(),
        1,
        "nothing created by bad input"
    );

    // Updates.
    let paused = env
        .admin(&[
            "template",
            "update",
            &uuid,
            "--status",
            "paused",
            "--inactive",
        ])
        .await;
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["active"], false);
    assert_eq!(paused["components"], components, "unchanged");
    let reworded = env
        .admin(&[
            "template",
            "update",
            &uuid,
            "--active",
            "--components",
            r#"[{"type":"BODY","text":"Hello {{1}}"}]"#,
        ])
        .await;
    assert_eq!(reworded["active"], true);
    assert_eq!(reworded["body_parameters"], 1);
    assert_eq!(reworded["header_parameters"], 0);
    for (args, needle) in [
        (vec!["template", "update", &uuid], "nothing to change"),
        (
            vec!["template", "update", &uuid, "--status", "great"],
            "--status",
        ),
        (
            vec![
                "template",
                "update",
                &uuid,
                "--components",
                r#"[{"type":"BODY"}]"#,
            ],
            "text",
        ),
        (vec!["template", "update", "not-a-uuid", "--active"], "UUID"),
        (
            vec![
                "template",
                "update",
                "0190a0d0-0000-7000-8000-000000000000",
                "--active",
            ],
            "does not exist",
        ),
        (
            vec!["template", "list", "--channel", "999999"],
            "does not exist",
        ),
    ] {
        let out = env.admin_raw(&args).await;
        assert!(!out.success, "{args:?} must fail");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let shown = env.admin(&["template", "list", "--channel", &wa_id]).await;
    assert_eq!(
        shown["data"][0]["status"], "paused",
        "the refused updates changed nothing"
    );
    assert_eq!(shown["data"][0]["body_parameters"], 1);
    // Without --json: a readable line.
    let plain = env
        .run(&["admin", "template", "list", "--channel", &wa_id], &[])
        .await;
    assert!(
        plain.success && plain.stdout.contains("order_update"),
        "{}",
        plain.stdout
    );

    // Every change is in the organization log (admin).
    let server = env.start(&[]).await;
    let r = server
        .get("/api/v1/integrations/events?type=template.*", &seed.key)
        .await
        .expect(200);
    let types: Vec<&str> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["template.updated", "template.updated", "template.created"]
    );
    let newest = &r.body["data"][0];
    assert_eq!(newest["category"], "admin");
    assert_eq!(newest["actor"]["type"], "admin");
    assert_eq!(newest["subject"], json!({"type": "template", "id": uuid}));
    assert_eq!(
        newest["details"]["changed"],
        json!(["active", "components"])
    );
    assert_eq!(r.body["data"][1]["details"]["previous_status"], "approved");
}

async fn template_status_callbacks_update_the_catalogue(backend: Backend) {
    let w = world(backend).await;
    // The world's template has no provider id; this one has.
    let known = template(
        &w.env,
        w.wa_id,
        "shipping_notice",
        "utility",
        &["--provider-template-id", "594425479261596"],
    )
    .await;
    let post = |value: Value, secret: &'static str| {
        let raw = serde_json::to_vec(&json!({"object": "whatsapp_business_account",
            "entry": [{"id": "WABA_ID", "time": 1786000000,
                       "changes": [{"field": "message_template_status_update", "value": value}]}]}))
        .unwrap();
        let sig = hub_signature(secret, &raw);
        let req = w
            .server
            .client
            .post(w.server.url(&format!("/inbound/{}", w.wa_uuid)))
            .header("content-type", "application/json")
            .header("x-hub-signature-256", sig)
            .body(raw);
        async move { Server::read(req.send().await.unwrap()).await }
    };
    let status_of = |uuid: String| {
        let env = &w.env;
        let wa = w.wa_id.to_string();
        async move {
            let list = env.admin(&["template", "list", "--channel", &wa]).await;
            list["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["uuid"] == uuid.as_str())
                .unwrap()
                .clone()
        }
    };

    // A bad signature changes nothing.
    post(
        json!({"event": "PAUSED", "message_template_id": 594425479261596_i64}),
        "wrong-secret",
    )
    .await
    .expect_error(401, "invalid_signature");
    assert_eq!(
        status_of(known["uuid"].as_str().unwrap().into()).await["status"],
        "approved"
    );

    // By the provider id (sent as a number).
    let r = post(
        json!({"event": "PAUSED", "message_template_id": 594425479261596_i64,
               "message_template_name": "shipping_notice", "message_template_language": "en_US",
               "reason": "Quality rating dropped"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    assert_eq!(r.body["templates_updated"], 1);
    assert_eq!(r.body["skipped"], 0);
    assert_eq!(
        status_of(known["uuid"].as_str().unwrap().into()).await["status"],
        "paused"
    );

    // By name and language, for a template without a provider id: it takes the id.
    let r = post(
        json!({"event": "REJECTED", "message_template_id": "777000111",
               "message_template_name": "order_update", "message_template_language": "en_US",
               "reason": "INCORRECT_CATEGORY"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    assert_eq!(r.body["templates_updated"], 1);
    let rejected = status_of(w.tpl.clone()).await;
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(rejected["provider_template_id"], "777000111");
    // Initiation with it is refused now.
    let r = refused(&w, &w.initiation(PHONE), "invalid_template").await;
    assert_eq!(r.body["error"]["details"]["reason"], "not_approved");
    assert_eq!(r.body["error"]["details"]["status"], "rejected");
    // Approved again (by id): initiation works.
    post(
        json!({"event": "APPROVED", "message_template_id": "777000111"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    w.post(&w.initiation(PHONE)).await.expect(201);

    // Unknown templates and events that change no status are ignored.
    let r = post(
        json!({"event": "APPROVED", "message_template_id": "123", "message_template_name": "nope",
               "message_template_language": "en_US"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    assert_eq!(
        (
            r.body["templates_updated"].as_i64(),
            r.body["templates_ignored"].as_i64()
        ),
        (Some(0), Some(1))
    );
    let r = post(
        json!({"event": "FLAGGED", "message_template_id": "777000111"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    assert_eq!(r.body["skipped"], 1);
    // The same status again changes nothing.
    let r = post(
        json!({"event": "APPROVED", "message_template_id": "777000111"}),
        APP_SECRET,
    )
    .await
    .expect(200);
    assert_eq!(r.body["templates_ignored"], 1);

    // Each change is in the log, by the system.
    let log = w.log("type=template.status_changed").await;
    assert_eq!(log.len(), 3);
    assert_eq!(log[0]["actor"]["type"], "system");
    assert_eq!(log[0]["category"], "admin");
    assert_eq!(log[0]["details"]["status"], "approved");
    assert_eq!(log[0]["details"]["previous_status"], "rejected");
    assert_eq!(log[1]["details"]["provider_event"], "REJECTED");
    assert_eq!(log[1]["details"]["reason"], "INCORRECT_CATEGORY");
    assert_eq!(log[2]["details"]["template_uuid"], known["uuid"]);
}

async fn campaign_sends_are_validated_and_audited(backend: Backend) {
    let w = world(backend).await;
    let marketing = template(
        &w.env,
        w.wa_id,
        "spring_sale",
        "MARKETING",
        &[
            "--components",
            r#"[{"type":"BODY","text":"Spring sale: {{1}} off"}]"#,
        ],
    )
    .await;
    assert_eq!(marketing["category"], "marketing", "flags in any case");
    let campaign = |phone: &str, purpose: &str| {
        json!({
            "channel_slug": "wa",
            "phone": phone,
            "template_uuid": marketing["uuid"],
            "template": {"name": "spring_sale", "language": "en_US",
                         "components": [{"type": "body", "parameters": [{"type": "text", "text": "20%"}]}]},
            "consent": consent(purpose),
        })
    };

    // A valid recipient: sent, no conversation opened, evidence stored, audited.
    let ok = w.post(&campaign(PHONE, "marketing")).await.expect(201);
    assert!(ok.body["conversation"].is_null());
    assert_eq!(ok.body["message"]["type"], "template");
    assert_eq!(
        ok.body["message"]["consent_uuid"],
        ok.body["consent"]["uuid"]
    );
    assert_eq!(ok.body["consent"]["purpose"], "marketing");
    assert_eq!(ok.body["template"]["category"], "marketing");
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM conversations").await, 0);
    let log = w.log("type=campaign_send.validated").await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["category"], "audit");
    assert_eq!(log[0]["actor"]["api_key_id"], w.seed.key_id);
    assert_eq!(log[0]["subject"]["type"], "message");
    assert_eq!(
        log[0]["details"]["message_uuid"],
        ok.body["message"]["uuid"]
    );
    assert_eq!(log[0]["details"]["template"]["category"], "marketing");
    assert_eq!(
        log[0]["details"]["consent"]["uuid"],
        ok.body["consent"]["uuid"]
    );
    assert_eq!(log[0]["details"]["phone"], PHONE);

    // Refused recipients: the code, nothing sent, and a campaign_send.refused entry each.
    let before_sent = w.graph.arrivals();
    let mut refusals = Vec::new();
    let wrong_purpose = w
        .post(&campaign("+4915223456789", "utility"))
        .await
        .expect_error(422, "consent_required");
    refusals.push(("consent_required", wrong_purpose));
    let mut no_consent = campaign("+4915223456789", "marketing");
    no_consent["consent"]["confirmed"] = json!(false);
    refusals.push((
        "consent_required",
        w.post(&no_consent)
            .await
            .expect_error(422, "consent_required"),
    ));
    let mut unknown_template = campaign("+4915223456789", "marketing");
    unknown_template["template_uuid"] = json!(uuid::Uuid::new_v4().to_string());
    refusals.push((
        "invalid_template",
        w.post(&unknown_template)
            .await
            .expect_error(422, "invalid_template"),
    ));
    let mut paused = campaign("+4915223456789", "marketing");
    let p = template(
        &w.env,
        w.wa_id,
        "paused_sale",
        "marketing",
        &["--status", "paused"],
    )
    .await;
    paused["template_uuid"] = p["uuid"].clone();
    paused.as_object_mut().unwrap().remove("template");
    refusals.push((
        "invalid_template",
        w.post(&paused).await.expect_error(422, "invalid_template"),
    ));
    // Normal channel selection applies: the organization's default is the sandbox channel,
    // which is not template-capable.
    let mut by_default = campaign("+4915223456789", "marketing");
    by_default.as_object_mut().unwrap().remove("channel_slug");
    let r = w
        .post(&by_default)
        .await
        .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "not_template_capable");
    refusals.push(("invalid_channel", r));
    let mut unknown_slug = campaign("+4915223456789", "marketing");
    unknown_slug["channel_slug"] = json!("nope");
    refusals.push((
        "invalid_channel",
        w.post(&unknown_slug)
            .await
            .expect_error(422, "invalid_channel"),
    ));
    // A WhatsApp channel without its provider settings refuses at the provider step.
    let bare = w
        .env
        .admin(&[
            "channel",
            "create",
            "--org",
            &w.seed.org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "Bare",
            "--slug",
            "bare",
        ])
        .await;
    let bare_template = template(
        &w.env,
        bare["id"].as_i64().unwrap(),
        "spring_sale",
        "marketing",
        &[],
    )
    .await;
    let mut unconfigured = campaign("+4915223456789", "marketing");
    unconfigured["channel_slug"] = json!("bare");
    unconfigured["template_uuid"] = bare_template["uuid"].clone();
    let r = w
        .post(&unconfigured)
        .await
        .expect_error(422, "invalid_channel");
    assert_eq!(r.body["error"]["details"]["reason"], "not_configured");
    refusals.push(("invalid_channel", r));
    // template_uuid without consent is a campaign send missing its consent.
    let mut only_uuid = campaign("+4915223456789", "marketing");
    only_uuid.as_object_mut().unwrap().remove("consent");
    refusals.push((
        "consent_required",
        w.post(&only_uuid)
            .await
            .expect_error(422, "consent_required"),
    ));
    assert_eq!(w.graph.arrivals(), before_sent, "nothing sent");
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM messages").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM consents").await, 1);
    assert_eq!(count(&w.env, "SELECT COUNT(*) FROM contacts").await, 1);

    let log = w.log("type=campaign_send.refused").await;
    assert_eq!(log.len(), refusals.len());
    for (entry, (code, _)) in log.iter().rev().zip(&refusals) {
        assert_eq!(entry["category"], "audit");
        assert_eq!(entry["actor"]["type"], "api_key");
        assert_eq!(entry["details"]["code"], *code, "{entry}");
        assert_eq!(entry["details"]["phone"], "+4915223456789");
    }
    let first = log.last().unwrap();
    assert_eq!(first["details"]["fields"][0]["field"], "consent.purpose");
    assert_eq!(first["details"]["consent"]["purpose"], "utility");
    assert_eq!(first["details"]["channel_id"], w.wa_id);
    assert_eq!(first["details"]["template_uuid"], marketing["uuid"]);
    // Each audit entry went to the outbox as audit.recorded.
    let audits = db_peek::events_named(&w.env, w.seed.org_id, "audit.recorded").await;
    assert_eq!(audits.len(), 1 + refusals.len());
    // A refusal is decided before execution, so it is not stored under its Idempotency-Key
    // (CONVENTIONS "Idempotency"): the same request is evaluated, refused and audited again.
    let idem = ikey();
    let body = campaign("+4915223456789", "utility");
    for _ in 0..2 {
        w.server
            .post_with(TEMPLATE, &w.seed.key, &body, &[("Idempotency-Key", &idem)])
            .await
            .expect_error(422, "consent_required");
    }
    assert_eq!(
        w.log("type=campaign_send.refused").await.len(),
        refusals.len() + 2
    );

    // A campaign send to a contact with an open conversation continues it.
    let init = w.post(&w.initiation(PHONE)).await.expect(201);
    let continued = w.post(&campaign(PHONE, "marketing")).await.expect(201);
    assert_eq!(
        continued.body["conversation"]["uuid"],
        init.body["conversation"]["uuid"]
    );

    // A plain template send (no template_uuid, no consent) keeps its earlier behaviour and
    // writes no audit entry.
    let plain = w
        .post(&json!({"channel_slug": "wa", "phone": "+4917612345678",
                      "template": {"name": "anything_goes", "language": "en"}}))
        .await
        .expect(201);
    assert!(plain.body.get("consent").is_none());
    assert!(plain.body["message"].get("consent_uuid").is_none());
    assert_eq!(
        w.log("type=campaign_send.*").await.len(),
        refusals.len() + 2 + 2
    );
}

async fn the_openapi_document_describes_initiation(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let server = env.start(&[]).await;
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    let op = &doc["paths"]["/api/v1/integrations/messages/template"]["post"];
    let unprocessable = op["responses"]["422"]["description"].as_str().unwrap();
    for code in [
        "validation_failed",
        "invalid_channel",
        "invalid_template",
        "consent_required",
        "provider_rejected",
    ] {
        assert!(unprocessable.contains(code), "{code} documented");
    }
    let request = &doc["components"]["schemas"]["SendTemplateRequest"]["properties"];
    for field in [
        "channel_id",
        "phone",
        "first_name",
        "template_uuid",
        "ensure_conversation",
        "template",
        "consent",
    ] {
        assert!(request.get(field).is_some(), "{field} documented");
    }
    let consent = &doc["components"]["schemas"]["ConsentInput"]["properties"];
    for field in ["confirmed", "purpose", "source", "reference", "captured_at"] {
        assert!(consent.get(field).is_some(), "consent.{field} documented");
    }
    assert!(doc["components"]["schemas"].get("TemplateOut").is_some());
}
