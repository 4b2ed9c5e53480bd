//! `--scenario media`: WhatsApp media sends of large documents through the whole pipeline
//! (fetch with the URL rules, sniff, hash, upload as multipart, send by id) against a loopback
//! file server and a fake Graph API that both answer at once (they stream and count, never
//! buffer), so the figures are the server's own: MB/s one document at a time, MB/s for a
//! document already uploaded (fetch and hash only), and the server's peak resident memory
//! (VmHWM) while `--media-docs` different documents of `--media-mb` MB are sent at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use hmac::{Hmac, Mac};
use http_body_util::BodyExt;
use serde_json::json;

use crate::Args;
use crate::server::{Backend, Database, Server};

#[derive(Debug, serde::Serialize)]
pub struct MediaResults {
    pub document_mb: u64,
    /// One document at a time, each new (fetched, sniffed, hashed, uploaded, sent).
    pub sequential_documents: usize,
    pub sequential_mb_per_sec: f64,
    /// The same documents again (fetched and hashed; the upload is reused).
    pub reused_mb_per_sec: f64,
    /// Peak resident memory after the one-at-a-time sends.
    pub peak_rss_mb_sequential: Option<f64>,
    /// `media_docs` different documents sent at once.
    pub concurrent_documents: usize,
    pub concurrent_seconds: f64,
    pub concurrent_mb_per_sec: f64,
    pub idle_rss_mb: Option<f64>,
    /// Peak resident memory of the whole run (VmHWM), after the concurrent sends.
    pub peak_rss_mb: Option<f64>,
    /// What the fake Graph API received.
    pub uploads: u64,
    pub upload_mb: f64,
}

const MIB: u64 = 1024 * 1024;
const TOKEN: &str = "bench-graph-token";
const APP_SECRET: &str = "bench-app-secret";
const PHONE_NUMBER_ID: &str = "1098765";

#[derive(Default)]
struct Counters {
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    sends: AtomicU64,
}

/// `GET /doc/{n}`: `size` bytes, a PDF header and `n` first (every `n` is different bytes),
/// streamed from one shared pattern with a `Content-Length`.
async fn files(size: u64) -> anyhow::Result<String> {
    let pattern = Bytes::from(vec![b'x'; MIB as usize]);
    let app = axum::Router::new().route(
        "/doc/{n}",
        axum::routing::get(move |Path(n): Path<u64>| {
            let pattern = pattern.clone();
            async move {
                let head = Bytes::from(format!("%PDF-1.7\n% document {n:020}\n").into_bytes());
                let mut left = size - head.len() as u64;
                let mut chunks = vec![head];
                while left > 0 {
                    let take = left.min(MIB);
                    chunks.push(pattern.slice(..take as usize));
                    left -= take;
                }
                let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
                (
                    [
                        ("content-type", "application/pdf".to_owned()),
                        ("content-length", size.to_string()),
                    ],
                    Body::from_stream(stream),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// A Graph API that counts upload bytes as they stream in and accepts every send.
async fn graph(counters: Arc<Counters>) -> anyhow::Result<String> {
    async fn upload(State(c): State<Arc<Counters>>, body: Body) -> impl IntoResponse {
        let mut body = body;
        let mut n = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                n += data.len() as u64;
            }
        }
        c.upload_bytes.fetch_add(n, Ordering::Relaxed);
        let id = c.uploads.fetch_add(1, Ordering::Relaxed) + 1;
        axum::Json(json!({ "id": format!("{}", 770_000_000 + id) }))
    }
    async fn messages(State(c): State<Arc<Counters>>, _body: Bytes) -> impl IntoResponse {
        let n = c.sends.fetch_add(1, Ordering::Relaxed) + 1;
        axum::Json(json!({
            "messaging_product": "whatsapp",
            "messages": [{ "id": format!("wamid.BENCH{n:08}") }],
        }))
    }
    let app = axum::Router::new()
        .route(
            "/v21.0/{pnid}/media",
            axum::routing::post(upload).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/v21.0/{pnid}/messages", axum::routing::post(messages))
        .with_state(counters);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v21.0", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

pub async fn media(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<MediaResults> {
    let size = args.media_mb * MIB;
    let counters = Arc::new(Counters::default());
    let files = files(size).await?;
    let graph = graph(counters.clone()).await?;
    let db = Database::create(backend, &args.postgres_url).await?;
    let (channel_uuid, key) = seed(bin, &db, &graph).await?;
    let srv = Server::start_with(
        bin,
        &db,
        &[
            ("SWITCHBOARD_MEDIA_TIMEOUT", "300s".into()),
            ("SWITCHBOARD_IDEMPOTENCY_LEASE", "900s".into()),
            // One recipient throughout: the media pipeline is measured, not the pacing.
            ("SWITCHBOARD_RECIPIENT_INTERVAL", "0s".into()),
        ],
    )
    .await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(900))
        .build()?;

    // The contact writes first: the customer-service window opens.
    let phone_digits = "4915112345678";
    open_window(&client, &srv, &channel_uuid, phone_digits).await?;
    let idle_rss_mb = srv.rss_mb();

    let send = |n: u64| {
        let (client, key) = (client.clone(), key.clone());
        let url = srv.url("/api/v1/integrations/messages/media");
        let media_url = format!("{files}/doc/{n}");
        async move {
            let r = client
                .post(url)
                .bearer_auth(&key)
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(
                    &json!({"channel_slug": "wa", "phone": format!("+{phone_digits}"),
                    "media_type": "document", "media_url": media_url,
                    "file_name": format!("doc-{n}.pdf")}),
                )
                .send()
                .await?;
            let status = r.status();
            let text = r.text().await?;
            anyhow::ensure!(status.as_u16() == 201, "send {n}: {status} {text}");
            Ok::<_, anyhow::Error>(())
        }
    };

    let sequential = 3usize;
    eprintln!("  {sequential} x {} MB, one at a time", args.media_mb);
    let started = Instant::now();
    for n in 0..sequential as u64 {
        send(n).await?;
    }
    let sequential_mb_per_sec =
        (sequential as u64 * args.media_mb) as f64 / started.elapsed().as_secs_f64();
    eprintln!("  the same {sequential} again (uploads reused)");
    let started = Instant::now();
    for n in 0..sequential as u64 {
        send(n).await?;
    }
    let reused_mb_per_sec =
        (sequential as u64 * args.media_mb) as f64 / started.elapsed().as_secs_f64();
    let peak_rss_mb_sequential = srv.peak_rss_mb();

    eprintln!("  {} x {} MB at once", args.media_docs, args.media_mb);
    let started = Instant::now();
    let all: Vec<_> = (0..args.media_docs as u64)
        .map(|i| send(1000 + i))
        .collect();
    for r in futures::future::join_all(all).await {
        r?;
    }
    let concurrent_seconds = started.elapsed().as_secs_f64();
    let peak_rss_mb = srv.peak_rss_mb();
    drop(srv);
    db.drop_database().await;
    Ok(MediaResults {
        document_mb: args.media_mb,
        sequential_documents: sequential,
        sequential_mb_per_sec,
        reused_mb_per_sec,
        peak_rss_mb_sequential,
        concurrent_documents: args.media_docs,
        concurrent_seconds,
        concurrent_mb_per_sec: (args.media_docs as u64 * args.media_mb) as f64 / concurrent_seconds,
        idle_rss_mb,
        peak_rss_mb,
        uploads: counters.uploads.load(Ordering::Relaxed),
        upload_mb: counters.upload_bytes.load(Ordering::Relaxed) as f64 / MIB as f64,
    })
}

/// An organization with a WhatsApp Cloud channel on the fake Graph API, and a wildcard key:
/// the channel's uuid and the key.
async fn seed(
    bin: &std::path::Path,
    db: &Database,
    graph: &str,
) -> anyhow::Result<(String, String)> {
    let org = db.admin(bin, &["org", "create", "--name", "Bench"]).await?;
    let org_id = org["id"].to_string();
    let channel = db
        .admin(
            bin,
            &[
                "channel",
                "create",
                "--org",
                &org_id,
                "--type",
                "whatsapp_cloud",
                "--name",
                "WhatsApp",
                "--slug",
                "wa",
                "--provider-config",
                &json!({
                    "phone_number_id": PHONE_NUMBER_ID,
                    "access_token": TOKEN,
                    "app_secret": APP_SECRET,
                    "api_base_url": graph,
                })
                .to_string(),
            ],
        )
        .await?;
    let key = db
        .admin(bin, &["key", "create", "--org", &org_id, "--scopes", "*"])
        .await?["key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uuid = channel["uuid"].as_str().unwrap_or_default().to_owned();
    Ok((uuid, key))
}

/// A signed inbound text from the contact, which opens the customer-service window.
async fn open_window(
    client: &reqwest::Client,
    srv: &Server,
    channel_uuid: &str,
    phone_digits: &str,
) -> anyhow::Result<()> {
    let callback = serde_json::to_vec(&json!({
        "object": "whatsapp_business_account",
        "entry": [{ "id": "WABA", "changes": [{ "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": { "display_phone_number": "15550001111", "phone_number_id": PHONE_NUMBER_ID },
            "contacts": [{ "profile": { "name": "Bench" }, "wa_id": phone_digits }],
            "messages": [{ "from": phone_digits, "id": "wamid.IN", "type": "text",
                "timestamp": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs().to_string(),
                "text": { "body": "hi" } }],
        }}]}],
    }))?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(APP_SECRET.as_bytes())?;
    mac.update(&callback);
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let r = client
        .post(srv.url(&format!("/inbound/{channel_uuid}")))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", signature)
        .body(callback)
        .send()
        .await?;
    anyhow::ensure!(
        r.status().is_success(),
        "the inbound callback failed: {}",
        r.status()
    );
    Ok(())
}
