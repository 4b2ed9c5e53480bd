//! WhatsApp media (CONVENTIONS "WhatsApp depth"): the service fetches `media_url` itself with
//! the webhook URL rules, checks the sniffed type and size against WhatsApp's limits, uploads
//! the file (`POST /{phone_number_id}/media`, multipart) and sends by media id, reusing an
//! upload of the same bytes on the same channel for up to 29 days; refusals are 422
//! `invalid_media` before any send, with nothing recorded or stored for idempotency.

use serde_json::{Value, json};
use sha2::Digest;

use crate::both_backends;
use crate::fake_providers::{Fake, hub_signature, wa_text, wa_webhook};
use crate::media_server::{MediaServer, PNG, pdf, webp};
use crate::support::{Backend, Resp, Server, TestEnv};

both_backends!(
    whatsapp_media_is_uploaded_once_and_sent_by_id,
    whatsapp_media_refusals_come_before_any_send,
    media_urls_follow_the_webhook_url_rules,
    an_upload_the_provider_refuses_fails_the_message,
    batch_media_items_are_uploaded_by_the_send_worker,
);

const MESSAGES: &str = "/api/v1/integrations/messages";
const MEDIA: &str = "/api/v1/integrations/messages/media";
const PHONE: &str = "+4915123456789";
const PHONE_DIGITS: &str = "4915123456789";
const WA_TOKEN: &str = "EAAG-fake-media-token";
const APP_SECRET: &str = "app-secret-for-media-tests";
const ALLOW_PRIVATE: (&str, &str) = ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true");

async fn send(server: &Server, key: &str, body: &Value) -> Resp {
    send_with(server, key, body, &uuid::Uuid::new_v4().to_string()).await
}

async fn send_with(server: &Server, key: &str, body: &Value, idem: &str) -> Resp {
    server
        .post_with(MEDIA, key, body, &[("Idempotency-Key", idem)])
        .await
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A whatsapp_cloud channel on the fake Graph API with this phone number id.
async fn whatsapp_channel(env: &TestEnv, org_id: i64, graph: &Fake, slug: &str, id: &str) -> Value {
    whatsapp_channel_with_token(env, org_id, graph, slug, id, WA_TOKEN).await
}

async fn whatsapp_channel_with_token(
    env: &TestEnv,
    org_id: i64,
    graph: &Fake,
    slug: &str,
    id: &str,
    token: &str,
) -> Value {
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
            "phone_number_id": id,
            "access_token": token,
            "app_secret": APP_SECRET,
            "verify_token": "verify",
            "api_base_url": graph.base_url,
        })
        .to_string(),
    ])
    .await
}

/// The contact writes to the channel: its customer-service window opens.
async fn contact_writes(server: &Server, channel: &Value, phone_number_id: &str) {
    let body = wa_webhook(
        phone_number_id,
        vec![wa_text(
            PHONE_DIGITS,
            &format!("wamid.IN-{phone_number_id}"),
            unix_now(),
            "Hi!",
        )],
        vec![],
    );
    let raw = serde_json::to_vec(&body).unwrap();
    let resp = server
        .client
        .post(server.url(&format!("/inbound/{}", channel["uuid"].as_str().unwrap())))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", hub_signature(APP_SECRET, &raw))
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

async fn outbound_messages(server: &Server, key: &str) -> Vec<Value> {
    let r = server
        .get(&format!("{MESSAGES}?limit=200&direction=outbound"), key)
        .await
        .expect(200);
    r.body["data"].as_array().unwrap().clone()
}

/// Makes every upload of the database `days` older (the service's clock is the real one).
async fn age_uploads(env: &TestEnv, days: i64) {
    match env.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&env.database_url).await.unwrap();
            sqlx::query("UPDATE media_uploads SET uploaded_at = uploaded_at - $1")
                .bind(days * 86_400_000)
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
            sqlx::query(
                "UPDATE media_uploads SET uploaded_at = uploaded_at - make_interval(days => $1)",
            )
            .bind(days as i32)
            .execute(&pool)
            .await
            .unwrap();
            pool.close().await;
        }
    }
}

/// The media object of the last send the fake Graph API received.
async fn last_media_sent(graph: &Fake) -> (String, Value) {
    let call = graph.received().await.pop().expect("a send");
    let kind = call.body["type"].as_str().unwrap().to_owned();
    (kind.clone(), call.body[kind.as_str()].clone())
}

async fn whatsapp_media_is_uploaded_once_and_sent_by_id(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let files = MediaServer::start().await;
    files.file("/p.png", PNG.to_vec(), "image/png");
    let invoice = pdf(10_000);
    files.file("/invoice", invoice.clone(), "application/pdf");
    files.file(
        "/notes",
        b"plain text notes\n".to_vec(),
        "text/plain; charset=utf-8",
    );
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa", "1098765").await;
    let wa2 = whatsapp_channel(&env, seed.org_id, &graph, "wa2", "2098765").await;
    let server = env.start(&[ALLOW_PRIVATE]).await;
    contact_writes(&server, &wa, "1098765").await;
    contact_writes(&server, &wa2, "2098765").await;
    let image = |slug: &str| {
        json!({"channel_slug": slug, "phone": PHONE, "media_type": "image",
               "media_url": files.url("/p.png"), "caption": "Look"})
    };

    // Fetched, checked, uploaded (multipart), then sent by the upload's id.
    let r = send(&server, &seed.key, &image("wa")).await.expect(201);
    assert_eq!(r.body["message"]["status"], "sent");
    let uploads = graph.uploads().await;
    assert_eq!(uploads.len(), 1);
    let u = &uploads[0];
    assert_eq!(u.phone_number_id, "1098765");
    assert_eq!(u.mime, "image/png");
    assert_eq!(u.file_content_type.as_deref(), Some("image/png"));
    assert_eq!(u.size, PNG.len() as u64);
    assert_eq!(u.sha256, sha256_hex(PNG));
    assert_eq!(
        last_media_sent(&graph).await,
        ("image".into(), json!({"id": u.id, "caption": "Look"}))
    );
    // The stored message keeps the request's content (the link), not the provider's id.
    assert_eq!(
        r.body["message"]["media"],
        json!({"media_type": "image", "media_url": files.url("/p.png"), "caption": "Look"})
    );

    // The same bytes on the same channel: fetched again (to know they are the same), not
    // uploaded again.
    send(&server, &seed.key, &image("wa")).await.expect(201);
    assert_eq!(files.hits("/p.png"), 2);
    assert_eq!(graph.uploads().await.len(), 1);
    assert_eq!(last_media_sent(&graph).await.1["id"], u.id.as_str());

    // Another channel: its own upload.
    send(&server, &seed.key, &image("wa2")).await.expect(201);
    let uploads = graph.uploads().await;
    assert_eq!(uploads.len(), 2);
    assert_eq!(uploads[1].phone_number_id, "2098765");
    assert_eq!(uploads[1].sha256, u.sha256);
    assert_ne!(uploads[1].id, u.id);
    assert_eq!(
        last_media_sent(&graph).await.1["id"],
        uploads[1].id.as_str()
    );

    // Documents: any type; caption and file name kept; a type that cannot be sniffed goes as
    // the server said.
    send(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "media_type": "document",
        "media_url": files.url("/invoice"), "file_name": "invoice.pdf", "caption": "Your invoice"}),
    )
    .await
    .expect(201);
    let doc = graph.uploads().await.pop().unwrap();
    assert_eq!((doc.mime.as_str(), doc.size), ("application/pdf", 10_000));
    assert_eq!(doc.file_name.as_deref(), Some("invoice.pdf"));
    assert_eq!(doc.sha256, sha256_hex(&invoice));
    assert_eq!(
        last_media_sent(&graph).await,
        (
            "document".into(),
            json!({"id": doc.id, "caption": "Your invoice", "filename": "invoice.pdf"})
        )
    );
    send(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE, "media_type": "document",
        "media_url": files.url("/notes"), "file_name": "notes.txt"}),
    )
    .await
    .expect(201);
    assert_eq!(graph.uploads().await.pop().unwrap().mime, "text/plain");
    assert_eq!(graph.uploads().await.len(), 4);

    // An upload is reused for 29 days: 28 days old, still; 30 days old, uploaded again.
    age_uploads(&env, 28).await;
    send(&server, &seed.key, &image("wa")).await.expect(201);
    assert_eq!(graph.uploads().await.len(), 4);
    assert_eq!(last_media_sent(&graph).await.1["id"], u.id.as_str());
    age_uploads(&env, 2).await;
    send(&server, &seed.key, &image("wa")).await.expect(201);
    let uploads = graph.uploads().await;
    assert_eq!(uploads.len(), 5);
    let fresh = uploads.last().unwrap();
    assert_eq!(
        (fresh.phone_number_id.as_str(), fresh.sha256.as_str()),
        ("1098765", u.sha256.as_str())
    );
    assert_eq!(last_media_sent(&graph).await.1["id"], fresh.id.as_str());
    // And the new upload is the one reused next.
    send(&server, &seed.key, &image("wa")).await.expect(201);
    assert_eq!(graph.uploads().await.len(), 5);
    assert_eq!(last_media_sent(&graph).await.1["id"], fresh.id.as_str());
    assert_eq!(outbound_messages(&server, &seed.key).await.len(), 8);
}

async fn whatsapp_media_refusals_come_before_any_send(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let files = MediaServer::start().await;
    // An image that never ends (no Content-Length): the cap is enforced while reading.
    files.endless("/endless.png", PNG, 1 << 30);
    // A sticker over 500 KB, announced by its Content-Length.
    files.file("/big.webp", webp(600 * 1024), "image/webp");
    files.file("/still.png", PNG.to_vec(), "video/mp4");
    files.file("/notes.txt", b"not an image\n".to_vec(), "image/png");
    files.status("/gone.png", 404);
    files.status("/broken.png", 500);
    files.hang("/slow.png");
    files.file("/ok.png", PNG.to_vec(), "image/png");
    // A port nothing listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa", "1098765").await;
    // A short media time limit: the file server that never answers is cut off by it (long
    // enough that streaming the endless image up to its cap fits in it on a loaded machine).
    let server = env
        .start(&[ALLOW_PRIVATE, ("SWITCHBOARD_MEDIA_TIMEOUT", "6s")])
        .await;
    contact_writes(&server, &wa, "1098765").await;
    let body = |media_type: &str, url: String| json!({"channel_slug": "wa", "phone": PHONE, "media_type": media_type, "media_url": url});

    let cases = [
        (body("image", files.url("/endless.png")), "too_large"),
        (body("sticker", files.url("/big.webp")), "too_large"),
        (body("video", files.url("/still.png")), "unsupported_type"),
        (body("image", files.url("/notes.txt")), "unsupported_type"),
        (body("image", files.url("/gone.png")), "unreachable"),
        (body("image", files.url("/broken.png")), "unreachable"),
        (
            body("image", format!("http://127.0.0.1:{closed}/a.png")),
            "unreachable",
        ),
        (body("image", files.url("/slow.png")), "unreachable"),
    ];
    let mut first_key = None;
    for (request, reason) in &cases {
        let key = uuid::Uuid::new_v4().to_string();
        first_key.get_or_insert(key.clone());
        let r = send_with(&server, &seed.key, request, &key)
            .await
            .expect_error(422, "invalid_media");
        let details = &r.body["error"]["details"];
        assert_eq!(details["reason"], *reason, "{request}: {}", r.text);
        assert_eq!(details["media_type"], request["media_type"]);
        assert_eq!(details["fields"][0]["field"], "media_url");
        assert!(r.header("idempotency-replayed").is_none());
    }
    // What the refusals say.
    let r = send(&server, &seed.key, &cases[0].0).await;
    assert_eq!(
        r.body["error"]["details"]["limit_bytes"],
        5 * 1024 * 1024,
        "{}",
        r.text
    );
    let r = send(&server, &seed.key, &cases[1].0).await;
    assert_eq!(r.body["error"]["details"]["limit_bytes"], 500 * 1024);
    let r = send(&server, &seed.key, &cases[2].0).await;
    assert_eq!(r.body["error"]["details"]["sniffed_type"], "image/png");
    assert_eq!(
        r.body["error"]["details"]["accepted_types"],
        json!(["video/mp4", "video/3gpp"])
    );
    let r = send(&server, &seed.key, &cases[3].0).await;
    assert_eq!(r.body["error"]["details"]["sniffed_type"], Value::Null);
    for (case, says) in [
        (4, "HTTP 404"),
        (5, "HTTP 500"),
        (6, "connection"),
        (7, "timed out"),
    ] {
        let r = send(&server, &seed.key, &cases[case].0).await;
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains(says),
            "{says}: {}",
            r.text
        );
    }

    // Nothing reached the provider, nothing was recorded.
    assert_eq!(graph.arrivals(), 0);
    assert!(graph.uploads().await.is_empty());
    assert!(outbound_messages(&server, &seed.key).await.is_empty());

    // A refusal is not stored for idempotency: the corrected request may reuse the key.
    let r = send_with(
        &server,
        &seed.key,
        &body("image", files.url("/ok.png")),
        first_key.as_deref().unwrap(),
    )
    .await
    .expect(201);
    assert!(r.header("idempotency-replayed").is_none());
    assert_eq!(graph.uploads().await.len(), 1);
    assert_eq!(graph.arrivals(), 1);
    assert_eq!(outbound_messages(&server, &seed.key).await.len(), 1);
}

async fn media_urls_follow_the_webhook_url_rules(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let files = MediaServer::start().await;
    files.file("/p.png", PNG.to_vec(), "image/png");
    let port = files.base_url.rsplit(':').next().unwrap().to_owned();
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa", "1098765").await;
    // Without SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS: public https addresses only.
    let server = env.start(&[]).await;
    contact_writes(&server, &wa, "1098765").await;
    for url in [
        files.url("/p.png"),
        format!("https://127.0.0.1:{port}/p.png"),
        format!("https://localhost:{port}/p.png"),
        "https://10.1.2.3/p.png".to_owned(),
    ] {
        let r = send(
            &server,
            &seed.key,
            &json!({"channel_slug": "wa", "phone": PHONE,
            "media_type": "image", "media_url": url}),
        )
        .await
        .expect_error(422, "invalid_media");
        assert_eq!(r.body["error"]["details"]["reason"], "unreachable", "{url}");
    }
    // Never fetched, never sent, nothing recorded.
    assert_eq!(files.hits("/p.png"), 0);
    assert_eq!(graph.arrivals(), 0);
    assert!(graph.uploads().await.is_empty());
    assert!(outbound_messages(&server, &seed.key).await.is_empty());
}

async fn an_upload_the_provider_refuses_fails_the_message(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let files = MediaServer::start().await;
    files.file("/p.png", PNG.to_vec(), "image/png");
    // The Graph API refuses this channel's token (190): the upload is a provider rejection.
    let wa =
        whatsapp_channel_with_token(&env, seed.org_id, &graph, "wa", "1098765", "EAAG-revoked")
            .await;
    let server = env.start(&[ALLOW_PRIVATE]).await;
    contact_writes(&server, &wa, "1098765").await;
    let r = send(
        &server,
        &seed.key,
        &json!({"channel_slug": "wa", "phone": PHONE,
        "media_type": "image", "media_url": files.url("/p.png")}),
    )
    .await
    .expect_error(422, "provider_rejected");
    let details = &r.body["error"]["details"];
    assert_eq!(
        (
            details["provider_status"].as_u64(),
            details["provider_code"].as_i64()
        ),
        (Some(401), Some(190))
    );
    assert_eq!(details["message"]["status"], "failed");
    // The send itself never happened; the failed message is kept, as for a refused send.
    assert_eq!(graph.arrivals(), 0);
    assert!(graph.uploads().await.is_empty());
    let kept = outbound_messages(&server, &seed.key).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["status"], "failed");
    assert_eq!(kept[0]["error"]["provider_code"], 190);
}

/// Batch items are validated when the batch comes in and sent by the send worker: a media item
/// on WhatsApp is fetched, checked and uploaded (or its upload reused) by the worker, and one
/// that breaks the limits fails with `invalid_media` (the batch was already accepted).
async fn batch_media_items_are_uploaded_by_the_send_worker(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let files = MediaServer::start().await;
    files.file("/p.png", PNG.to_vec(), "image/png");
    files.file("/big.webp", webp(600 * 1024), "image/webp");
    let wa = whatsapp_channel(&env, seed.org_id, &graph, "wa", "1098765").await;
    let server = env
        .start(&[ALLOW_PRIVATE, ("SWITCHBOARD_RECIPIENT_INTERVAL", "0s")])
        .await;
    contact_writes(&server, &wa, "1098765").await;
    let item = |media_type: &str, path: &str| {
        json!({"path": "media", "channel_slug": "wa", "phone": PHONE,
               "media_type": media_type, "media_url": files.url(path)})
    };
    let r = server
        .post_with(
            "/api/v1/integrations/messages/batch",
            &seed.key,
            &json!({"messages": [item("image", "/p.png"), item("image", "/p.png"), item("sticker", "/big.webp")]}),
            &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
        )
        .await
        .expect(202);
    let id = r.body["batch_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let batch = loop {
        let b = server
            .get(
                &format!("/api/v1/integrations/messages/batches/{id}"),
                &seed.key,
            )
            .await
            .expect(200)
            .body;
        if b["status"] == "completed" || std::time::Instant::now() > deadline {
            break b;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(batch["status"], "completed", "{batch}");
    assert_eq!(batch["counts"]["sent"], 2, "{batch}");
    assert_eq!(batch["counts"]["failed"], 1, "{batch}");
    // The worker sends items in parallel: two items of the same bytes fetched at the same time
    // may both miss the cache and upload (each send then goes by its own upload's id).
    let uploads = graph.uploads().await;
    assert!((1..=2).contains(&uploads.len()), "{uploads:?}");
    assert!(uploads.iter().all(|u| u.sha256 == sha256_hex(PNG)));
    let sends = graph.received().await;
    assert_eq!(sends.len(), 2);
    for s in &sends {
        let id = s.body["image"]["id"].as_str().unwrap();
        assert!(uploads.iter().any(|u| u.id == id), "{id}");
    }
    let failed: Vec<Value> = outbound_messages(&server, &seed.key)
        .await
        .into_iter()
        .filter(|m| m["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["error"]["code"], "invalid_media");
    assert_eq!(failed[0]["error"]["details"]["reason"], "too_large");
}
