//! Webhook delivery benchmark: deliveries per second to a local receiver, and the time from an
//! event's creation to its delivery (p50/p99), against a real `switchboard serve`.
//!
//! ```sh
//! cargo build --release --examples
//! # SQLite (a fresh database in a temporary directory):
//! target/release/examples/webhook_bench
//! # PostgreSQL (a fresh database is created and dropped):
//! BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres target/release/examples/webhook_bench
//! ```
//!
//! Settings (environment): `BENCH_ENDPOINTS` (16), `BENCH_RATE` (events per second of the
//! latency phase, 200), `BENCH_SECONDS` (10), `BENCH_BACKLOG` (events of the throughput phase,
//! 2000; each goes to every endpoint), `BENCH_SERVER` (the binary, `target/release/switchboard`),
//! and any `SWITCHBOARD_*` setting for the server (concurrency, ...).
//!
//! 1. **Latency**: `POST /webhook-endpoints/{uuid}/test` at a steady rate, round-robin over the
//!    endpoints; for each delivery, the receiver's arrival time minus the event's
//!    `metadata.occurred_at` (taken just before the event's transaction commits).
//! 2. **Throughput**: a backlog written straight into the database (50 events per
//!    transaction, each fanned out to every endpoint), then the time until the receiver has
//!    every delivery.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use switchboard::app::Runtime;
use switchboard::config::Config;
use switchboard_domain::Timestamp;
use switchboard_domain::event::{Actor, Effects, NewEvent};
use tokio::io::AsyncBufReadExt;

#[derive(Default)]
struct Arrivals {
    /// delivery id -> (arrival, occurred_at of the event)
    seen: HashMap<String, (SystemTime, Timestamp)>,
    requests: u64,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn receiver(arrivals: Arc<Mutex<Arrivals>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let arrivals = arrivals.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let arrivals = arrivals.clone();
                    async move {
                        let delivery = req
                            .headers()
                            .get("x-switchboard-delivery")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let body = req.into_body().collect().await?.to_bytes();
                        let now = SystemTime::now();
                        let v: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        let occurred = v["metadata"]["occurred_at"]
                            .as_str()
                            .and_then(|s| Timestamp::parse_rfc3339(s).ok())
                            .unwrap_or(Timestamp::from_millis(0));
                        let mut a = arrivals.lock().unwrap();
                        a.requests += 1;
                        a.seen.entry(delivery).or_insert((now, occurred));
                        drop(a);
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn latencies_ms(a: &Arrivals, ids: &[String]) -> Vec<f64> {
    let mut v: Vec<f64> = ids
        .iter()
        .filter_map(|id| a.seen.get(id))
        .map(|(arrived, occurred)| {
            let arrived_ms = arrived
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1000.0;
            arrived_ms - occurred.millis() as f64
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let endpoints = env_num("BENCH_ENDPOINTS", 16) as usize;
    let rate = env_num("BENCH_RATE", 200);
    let seconds = env_num("BENCH_SECONDS", 10);
    let backlog = env_num("BENCH_BACKLOG", 2000) as usize;
    let server_bin =
        std::env::var("BENCH_SERVER").unwrap_or_else(|_| "target/release/switchboard".into());

    let dir = tempfile::tempdir()?;
    let master_key = switchboard::crypto::MasterKey::generate().to_hex();
    let (database_url, pg) = match std::env::var("BENCH_POSTGRES_URL") {
        Ok(admin) if !admin.is_empty() => {
            use sqlx::Connection;
            let name = format!("sbbench_{}", uuid::Uuid::new_v4().simple());
            let mut c = sqlx::PgConnection::connect(&admin).await?;
            sqlx::query(&format!("CREATE DATABASE \"{name}\""))
                .execute(&mut c)
                .await?;
            let mut url = url::Url::parse(&admin)?;
            url.set_path(&name);
            (url.to_string(), Some((admin, name)))
        }
        _ => (
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            None,
        ),
    };
    let mut env: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SWITCHBOARD_"))
        .collect();
    env.insert("SWITCHBOARD_DATABASE_URL".into(), database_url.clone());
    env.insert("SWITCHBOARD_MASTER_KEY".into(), master_key.clone());
    env.insert("SWITCHBOARD_LISTEN".into(), "127.0.0.1:0".into());
    env.insert(
        "SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS".into(),
        "true".into(),
    );
    env.entry("SWITCHBOARD_RATE_LIMIT_TESTS".into())
        .or_insert_with(|| "1000000".into());
    env.entry("SWITCHBOARD_LOG".into())
        .or_insert_with(|| "warn".into());
    let config = Config::from_sources(&env, None, None).map_err(anyhow::Error::msg)?;
    let rt = Runtime::open(config.clone()).await?;

    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let port = receiver(arrivals.clone()).await;

    // An organization, a key and the endpoints, through the same operations as the API.
    let org =
        switchboard::ops::orgs::create_org(rt.store.as_ref(), rt.clock.as_ref(), "Bench", true)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = switchboard::ops::keys::create_key(
        rt.store.as_ref(),
        rt.clock.as_ref(),
        switchboard::ops::keys::CreateKey {
            org_id: org.id,
            name: Some("bench".into()),
            scopes: Some(switchboard_domain::scope::ScopeSet::Wildcard),
            expires_at: None,
            default_channel_id: None,
        },
        Actor::Admin,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let lookup = switchboard::url_safety::system_lookup();
    let deps = switchboard::ops::webhooks::Deps {
        store: rt.store.as_ref(),
        secrets: &rt.secrets,
        clock: rt.clock.as_ref(),
        policy: switchboard::url_safety::Policy {
            allow_private: true,
        },
        lookup: &lookup,
    };
    let mut uuids = Vec::new();
    for i in 0..endpoints {
        let (e, _) = switchboard::ops::webhooks::create_endpoint(
            &deps,
            org.id,
            switchboard::ops::webhooks::CreateEndpoint {
                name: Some(format!("bench {i}")),
                url: Some(format!("http://127.0.0.1:{port}/hook/{i}")),
                events: vec!["integration.test".into(), "security.*".into()],
                headers: Default::default(),
                ..Default::default()
            },
            Actor::Admin,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        uuids.push(e.uuid);
    }

    // The server.
    let mut cmd = tokio::process::Command::new(&server_bin);
    cmd.arg("serve")
        .env_clear()
        .envs(&env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the server did not start"))?;
        if let Some(b) = line.strip_prefix("switchboard listening on ") {
            break b.trim().to_owned();
        }
    };
    let client = reqwest::Client::new();
    println!(
        "backend={} endpoints={endpoints} concurrency={} per_endpoint={}",
        rt.store.backend(),
        config.webhook_concurrency,
        config.webhook_endpoint_concurrency
    );

    // 1. Latency at a steady rate through the API.
    let total = (rate * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let ids = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..total {
        tick.tick().await;
        let url = format!(
            "{base}/api/v1/integrations/webhook-endpoints/{}/test",
            uuids[i % uuids.len()]
        );
        let (client, token, ids) = (client.clone(), key.token.clone(), ids.clone());
        calls.spawn(async move {
            let r = client.post(url).bearer_auth(token).send().await?;
            let v: serde_json::Value = r.json().await?;
            if let Some(id) = v["delivery_id"].as_str() {
                ids.lock().unwrap().push(id.to_owned());
            }
            Ok::<_, reqwest::Error>(())
        });
    }
    while let Some(r) = calls.join_next().await {
        r??;
    }
    let sent_in = started.elapsed();
    let ids: Vec<String> = ids.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = {
            let a = arrivals.lock().unwrap();
            ids.iter().filter(|id| a.seen.contains_key(*id)).count()
        };
        if done == ids.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    {
        let a = arrivals.lock().unwrap();
        let lat = latencies_ms(&a, &ids);
        println!(
            "latency phase: {} test events in {:.1}s ({:.0}/s requested), delivered {}; event->delivery p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            ids.len(),
            sent_in.as_secs_f64(),
            rate,
            lat.len(),
            percentile(&lat, 50.0),
            percentile(&lat, 90.0),
            percentile(&lat, 99.0),
            lat.last().copied().unwrap_or(f64::NAN)
        );
    }

    // 2. Throughput: a backlog written straight to the database.
    let before = arrivals.lock().unwrap().seen.len();
    let expected = backlog * endpoints;
    let started = Instant::now();
    let mut written = 0;
    while written < backlog {
        let n = 50.min(backlog - written);
        let mut effects = Effects::none();
        let now = rt.clock.now();
        for i in 0..n {
            effects = effects.event(NewEvent::new(
                org.id,
                "security.api_key_created",
                json!({"bench": written + i}),
                None,
                now,
            ));
        }
        rt.store.write_effects(effects).await?;
        written += n;
    }
    let write_time = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let got = arrivals.lock().unwrap().seen.len() - before;
        if got >= expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    let (got, requests, lat) = {
        let a = arrivals.lock().unwrap();
        let got = a.seen.len() - before;
        let backlog_ids: Vec<String> = a
            .seen
            .iter()
            .filter(|(id, _)| !ids.contains(*id))
            .map(|(id, _)| id.clone())
            .collect();
        (got, a.requests, latencies_ms(&a, &backlog_ids))
    };
    println!(
        "throughput phase: {backlog} events x {endpoints} endpoints = {expected} deliveries; written in {:.2}s; all delivered in {:.2}s: {:.0} deliveries/s (received {got}, {} requests in all); event->delivery under this backlog p50 {:.0} ms, p99 {:.0} ms",
        write_time.as_secs_f64(),
        took.as_secs_f64(),
        got as f64 / took.as_secs_f64(),
        requests,
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
    );
    let _ = child.kill().await;
    drop(rt);
    if let Some((admin, name)) = pg {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .execute(&mut c)
            .await?;
    }
    Ok(())
}
