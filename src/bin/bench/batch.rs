//! `--scenario batch`: batch sends through the durable send queue. `--batches` batches of 1 000
//! text items (each to its own recipient, on the sandbox channel: the fastest provider there
//! is, so the figure is the queue's and the worker's), posted at once; measured: the time to
//! accept each batch (validation of every item and one transaction), items sent per second
//! until the last batch is completed, and the server's peak RSS.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::Args;
use crate::load;
use crate::server::{self, Backend, Database, Server};

#[derive(Debug, serde::Serialize)]
pub struct BatchResults {
    pub batches: usize,
    pub items: usize,
    /// Median and slowest time to answer `POST /messages/batch` (1 000 items).
    pub accept_ms_p50: f64,
    pub accept_ms_max: f64,
    /// From the first post to the last batch completed.
    pub items_per_sec: f64,
    pub seconds: f64,
    pub peak_rss_mb: Option<f64>,
}

pub async fn batch(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<BatchResults> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let srv = Server::start_with(
        bin,
        &db,
        &[("SWITCHBOARD_RATE_LIMIT_BATCH_ITEMS", "10000000".into())],
    )
    .await?;
    let client = load::client();
    let started = Instant::now();
    let mut ids = Vec::new();
    let mut accept_ms = Vec::new();
    for b in 0..args.batches {
        let items: Vec<serde_json::Value> = (0..1000)
            .map(|i| json!({"phone": format!("+49151{:08}", b * 1000 + i), "message": "benchmark batch item"}))
            .collect();
        let t = Instant::now();
        let resp = client
            .post(srv.url("/api/v1/integrations/messages/batch"))
            .bearer_auth(&seed.key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&json!({ "messages": items }))
            .send()
            .await?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await?;
        anyhow::ensure!(status.as_u16() == 202, "batch refused: {status} {body}");
        accept_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        ids.push(body["batch_id"].as_str().unwrap_or_default().to_owned());
    }
    for id in &ids {
        loop {
            let b: serde_json::Value = client
                .get(srv.url(&format!("/api/v1/integrations/messages/batches/{id}")))
                .bearer_auth(&seed.key)
                .send()
                .await?
                .json()
                .await?;
            if b["status"] == "completed" {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(1800),
                "batches did not complete: {b}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let peak_rss_mb = srv.peak_rss_mb();
    drop(srv);
    db.drop_database().await;
    accept_ms.sort_by(f64::total_cmp);
    let items = args.batches * 1000;
    Ok(BatchResults {
        batches: args.batches,
        items,
        accept_ms_p50: accept_ms[accept_ms.len() / 2],
        accept_ms_max: *accept_ms.last().unwrap_or(&0.0),
        items_per_sec: items as f64 / seconds,
        seconds,
        peak_rss_mb,
    })
}
