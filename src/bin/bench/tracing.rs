//! `--scenario tracing`: what span export costs. The same closed loops (GET /channels, POST
//! /messages with a subscribed endpoint) against a server without `SWITCHBOARD_OTLP_ENDPOINT`
//! and one exporting every span to a stub OTLP/HTTP collector, alternated over two rounds so
//! that drift of the machine falls on both; with `--baseline-bin`, an earlier build too (the
//! cost of the trace context itself when nothing is exported).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::receiver::Receiver;
use crate::report::Rate;
use crate::server::{self, Backend, Database, Server};
use crate::{Args, load};

#[derive(Debug, serde::Serialize)]
pub struct TracingResults {
    pub rounds: usize,
    /// The `--baseline-bin` build, without export.
    pub channels_per_sec_baseline: Option<f64>,
    pub sends_per_sec_baseline: Option<f64>,
    pub channels_per_sec_without_export: f64,
    pub channels_per_sec_with_export: f64,
    pub channels_ratio: f64,
    pub sends_per_sec_without_export: f64,
    pub sends_per_sec_with_export: f64,
    pub sends_ratio: f64,
    /// What the collector received during the runs with export.
    pub export_requests: u64,
    pub export_bytes: u64,
}

/// A collector that answers every export with 200 and counts what it got.
async fn collector() -> anyhow::Result<(String, Arc<AtomicU64>, Arc<AtomicU64>)> {
    let requests = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (r, b) = (requests.clone(), bytes.clone());
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (r, b) = (r.clone(), b.clone());
            async move {
                r.fetch_add(1, Ordering::Relaxed);
                b.fetch_add(body.len() as u64, Ordering::Relaxed);
                [("content-type", "application/x-protobuf")]
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, requests, bytes))
}

async fn measure(
    args: &Args,
    bin: &std::path::Path,
    db: &Database,
    seed: &server::Seed,
    receiver: &Receiver,
    env: &[(&str, String)],
) -> anyhow::Result<(Rate, Rate)> {
    let srv = Server::start_with(bin, db, env).await?;
    let client = load::client();
    let (url, k) = (srv.url("/api/v1/integrations/channels"), seed.key.clone());
    let channels = load::closed_loop(&client, args, move |_, _| {
        load::Req::get(url.clone(), Some(&k))
    })
    .await;
    receiver.reset();
    let (url, k, body) = (
        srv.url("/api/v1/integrations/messages"),
        seed.key.clone(),
        load::send_body(seed),
    );
    let sends = load::closed_loop(&client, args, move |task, i| {
        load::Req::post(
            url.clone(),
            &k,
            format!("trace-{task}-{i}-{}", uuid::Uuid::new_v4()),
            body.clone(),
        )
    })
    .await;
    // The deliveries drain before the next server starts.
    receiver
        .wait_for(sends.ok, std::time::Duration::from_secs(600))
        .await;
    drop(srv);
    Ok((channels, sends))
}

/// A fresh database seeded by `bin`, with one endpoint subscribed to `message.sent`.
async fn prepare(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
    receiver: &Receiver,
) -> anyhow::Result<(Database, server::Seed)> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let srv = Server::start(bin, &db).await?;
    srv.create_endpoint(
        &load::client(),
        &seed.key,
        &receiver.url(0),
        &["message.sent"],
    )
    .await
    .ok_or_else(|| anyhow::anyhow!("the webhook endpoint was not created"))?;
    drop(srv);
    Ok((db, seed))
}

pub async fn tracing(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<TracingResults> {
    let receiver = Receiver::start().await?;
    let (db, seed) = prepare(args, bin, backend, &receiver).await?;
    // The baseline build gets a database of its own (it does not know the newer migrations).
    let baseline = match &args.baseline_bin {
        Some(b) => Some((b, prepare(args, b, backend, &receiver).await?)),
        None => None,
    };
    let (collector_url, requests, bytes) = collector().await?;
    let with = [("SWITCHBOARD_OTLP_ENDPOINT", collector_url)];
    let rounds = 2;
    let (mut off, mut on, mut base) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        if let Some((bin, (db, seed))) = &baseline {
            eprintln!("  round {}: the baseline build", round + 1);
            base.push(measure(args, bin, db, seed, &receiver, &[]).await?);
        }
        eprintln!("  round {}: without export", round + 1);
        off.push(measure(args, bin, &db, &seed, &receiver, &[]).await?);
        eprintln!("  round {}: exporting spans", round + 1);
        on.push(measure(args, bin, &db, &seed, &receiver, &with).await?);
    }
    let mean = |runs: &[(Rate, Rate)], pick: fn(&(Rate, Rate)) -> f64| {
        runs.iter().map(pick).sum::<f64>() / runs.len() as f64
    };
    let channels_off = mean(&off, |r| r.0.per_sec);
    let channels_on = mean(&on, |r| r.0.per_sec);
    let sends_off = mean(&off, |r| r.1.per_sec);
    let sends_on = mean(&on, |r| r.1.per_sec);
    db.drop_database().await;
    if let Some((_, (db, _))) = baseline {
        db.drop_database().await;
    }
    Ok(TracingResults {
        rounds,
        channels_per_sec_baseline: (!base.is_empty()).then(|| mean(&base, |r| r.0.per_sec)),
        sends_per_sec_baseline: (!base.is_empty()).then(|| mean(&base, |r| r.1.per_sec)),
        channels_per_sec_without_export: channels_off,
        channels_per_sec_with_export: channels_on,
        channels_ratio: channels_on / channels_off,
        sends_per_sec_without_export: sends_off,
        sends_per_sec_with_export: sends_on,
        sends_ratio: sends_on / sends_off,
        export_requests: requests.load(Ordering::Relaxed),
        export_bytes: bytes.load(Ordering::Relaxed),
    })
}
