//! The load generator: closed-loop request loops, paced sends, a send backlog, and a plain
//! HTTP client as the floor for webhook delivery rates.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Args;
use crate::receiver::Receiver;
use crate::report::{Latency, Rate};
use crate::server::{Seed, Server};

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

pub enum Req {
    Get {
        url: String,
        key: Option<String>,
    },
    Post {
        url: String,
        key: String,
        idempotency_key: String,
        body: serde_json::Value,
    },
    /// Raw bytes with one header (a provider's signed callback).
    Signed {
        url: String,
        header: (&'static str, String),
        body: Vec<u8>,
    },
}

impl Req {
    pub fn get(url: String, key: Option<&str>) -> Req {
        Req::Get {
            url,
            key: key.map(str::to_owned),
        }
    }

    pub fn post(url: String, key: &str, idempotency_key: String, body: serde_json::Value) -> Req {
        Req::Post {
            url,
            key: key.to_owned(),
            idempotency_key,
            body,
        }
    }

    pub async fn send(self, client: &reqwest::Client) -> Result<u16, reqwest::Error> {
        let builder = match self {
            Req::Get { url, key } => {
                let b = client.get(url);
                match key {
                    Some(k) => b.bearer_auth(k),
                    None => b,
                }
            }
            Req::Post {
                url,
                key,
                idempotency_key,
                body,
            } => client
                .post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", idempotency_key)
                .json(&body),
            Req::Signed { url, header, body } => client
                .post(url)
                .header(header.0, header.1)
                .header("content-type", "application/json")
                .body(body),
        };
        let resp = builder.send().await?;
        let status = resp.status().as_u16();
        resp.bytes().await?;
        Ok(status)
    }
}

/// `connections` tasks each send requests back to back for `duration`.
pub async fn closed_loop<F>(client: &reqwest::Client, args: &Args, make: F) -> Rate
where
    F: Fn(usize, usize) -> Req + Send + Sync + 'static + Clone,
{
    let deadline = Instant::now() + args.duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..args.connections {
        let client = client.clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let (mut ok, mut failed) = (0usize, 0usize);
            let mut i = 0;
            while Instant::now() < deadline {
                let t = Instant::now();
                match make(task, i).send(&client).await {
                    Ok(s) if (200..300).contains(&s) => {
                        ok += 1;
                        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    _ => failed += 1,
                }
                i += 1;
            }
            (latencies, ok, failed)
        }));
    }
    let mut all = Vec::new();
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (l, o, f) = t.await.expect("load task");
        all.extend(l);
        ok += o;
        failed += f;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Rate {
        per_sec: ok as f64 / elapsed,
        ok,
        failed,
        latency: Latency::from_samples(all),
    }
}

pub fn send_body(seed: &Seed) -> serde_json::Value {
    match &seed.contact_uuid {
        Some(c) => serde_json::json!({ "contact_uuid": c, "message": "benchmark message" }),
        None => serde_json::json!({ "phone": seed.phone, "message": "benchmark message" }),
    }
}

/// Sends at a steady `per_sec` for `duration`, one at a time.
pub async fn paced_sends(
    client: &reqwest::Client,
    srv: &Server,
    seed: &Seed,
    per_sec: f64,
    duration: Duration,
) -> usize {
    let interval = Duration::from_secs_f64(1.0 / per_sec);
    let mut tick = tokio::time::interval(interval);
    let end = Instant::now() + duration;
    let mut ok = 0;
    while Instant::now() < end {
        tick.tick().await;
        let r = Req::post(
            srv.url("/api/v1/integrations/messages"),
            &seed.key,
            uuid::Uuid::new_v4().to_string(),
            send_body(seed),
        )
        .send(client)
        .await;
        if matches!(r, Ok(s) if (200..300).contains(&s)) {
            ok += 1;
        }
    }
    ok
}

/// Sends `n` messages as fast as possible, each fanned out to `endpoints` endpoints, and
/// measures the rate at which the deliveries arrive (first arrival to last).
pub async fn backlog(
    client: &reqwest::Client,
    srv: &Server,
    seed: &Seed,
    receiver: &Receiver,
    n: usize,
    endpoints: usize,
    connections: usize,
) -> Option<Rate> {
    let next = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, next, sent) = (client.clone(), next.clone(), sent.clone());
        let url = srv.url("/api/v1/integrations/messages");
        let key = seed.key.clone();
        let body = send_body(seed);
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < n {
                if let Ok(s) = Req::post(
                    url.clone(),
                    &key,
                    uuid::Uuid::new_v4().to_string(),
                    body.clone(),
                )
                .send(&client)
                .await
                {
                    if (200..300).contains(&s) {
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let expected = sent.load(Ordering::SeqCst) * endpoints;
    let complete = receiver.wait_for(expected, Duration::from_secs(600)).await;
    let got = receiver.count();
    if !complete {
        eprintln!("  only {got} of {expected} deliveries arrived");
    }
    Some(Rate {
        per_sec: receiver.arrival_rate()?,
        ok: got,
        failed: expected.saturating_sub(got),
        latency: None,
    })
}

/// A plain client posting the same body to the same receivers, with the dispatcher's default
/// concurrency: the floor for delivery rates.
pub async fn plain_posts(
    client: &reqwest::Client,
    args: &Args,
    urls: &[String],
    body: Vec<u8>,
) -> Rate {
    let body = bytes::Bytes::from(body);
    let deadline = Instant::now() + args.duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..args.plain_concurrency {
        let client = client.clone();
        let url = urls[task % urls.len()].clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut ok = 0usize;
            while Instant::now() < deadline {
                if let Ok(r) = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                {
                    if r.status().is_success() && r.bytes().await.is_ok() {
                        ok += 1;
                    }
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap_or(0);
    }
    Rate {
        per_sec: ok as f64 / started.elapsed().as_secs_f64(),
        ok,
        failed: 0,
        latency: None,
    }
}
