//! Scenarios of recovery and ordering (`--scenario recovery`, `--scenario ordering`):
//!
//! * recovery: `--kept-events` events are written straight into a fresh database (as a busy
//!   organization would have kept them), then the server pages the event feed (1 000 per page)
//!   and recovers the newest `--recovery-events` of them to a new endpoint: pages in ms, and
//!   events queued per second by the recovery job;
//! * ordering: the same sends (`--contacts` contacts x `--events-per-contact` messages) are
//!   delivered to an unordered endpoint, then, on a fresh database, to a `per_contact` one:
//!   deliveries per second of each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::Args;
use crate::load::{self, Req};
use crate::receiver::Receiver;
use crate::server::{self, Backend, Database, Server};

/// Writes `n` `message.sent` events of the organization, one millisecond apart, ending an hour
/// ago; returns the time of the first one (ms since the epoch).
async fn write_events(db: &Database, backend: Backend, n: i64) -> anyhow::Result<i64> {
    let first = chrono::Utc::now().timestamp_millis() - 3_600_000 - n;
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await?;
            sqlx::query(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $1)
                 INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope)
                 SELECT randomblob(16), (SELECT MIN(id) FROM organizations), 'message.sent',
                        '{\"n\":' || n || '}', NULL, $2 + n,
                        '{\"event\":\"message.sent\",\"data\":{\"n\":' || n || '},\"metadata\":{\"bench\":true}}'
                 FROM g",
            )
            .bind(n)
            .bind(first)
            .execute(&pool)
            .await
            .context("write the kept events")?;
            pool.close().await;
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await?;
            sqlx::query(
                "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope)
                 SELECT gen_random_uuid(), (SELECT MIN(id) FROM organizations), 'message.sent',
                        jsonb_build_object('n', g), NULL,
                        to_timestamp(($2 + g) / 1000.0),
                        '{\"event\":\"message.sent\",\"data\":{\"n\":' || g || '},\"metadata\":{\"bench\":true}}'
                 FROM generate_series(1, $1::bigint) g",
            )
            .bind(n)
            .bind(first)
            .execute(&pool)
            .await
            .context("write the kept events")?;
            sqlx::query("ANALYZE events").execute(&pool).await?;
            pool.close().await;
        }
    }
    Ok(first)
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What the recovery scenario measured on one backend.
#[derive(Debug, serde::Serialize)]
pub struct RecoveryResults {
    pub kept_events: i64,
    pub write_kept_events_s: f64,
    pub feed_pages: usize,
    pub feed_page_ms_mean: f64,
    pub feed_page_ms_p99: f64,
    pub recovered_events: i64,
    pub recovery_s: f64,
    pub recovery_events_per_sec: f64,
    pub peak_rss_mb: Option<f64>,
}

pub async fn recovery(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<RecoveryResults> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let started = Instant::now();
    let first = write_events(&db, backend, args.kept_events).await?;
    let write_kept_events_s = started.elapsed().as_secs_f64();
    eprintln!(
        "  {} events written in {write_kept_events_s:.1} s",
        args.kept_events
    );
    let srv = Server::start(bin, &db).await?;
    let client = load::client();

    // Feed pages of 1 000 from the oldest kept event, in order, each after the one before.
    let mut times = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..args.feed_pages {
        let mut url = srv.url("/api/v1/integrations/event-feed?limit=1000");
        if let Some(c) = &cursor {
            url.push_str(&format!("&after={c}"));
        }
        let t = Instant::now();
        let page: serde_json::Value = client
            .get(url)
            .bearer_auth(&seed.key)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if page["has_more"] != true {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    let feed_page_ms_mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let feed_page_ms_p99 = times
        .get(((times.len() as f64) * 0.99) as usize)
        .or(times.last())
        .copied()
        .unwrap_or_default();

    // Recover the newest `recovery_events` to a new endpoint.
    let receiver = Receiver::start().await?;
    let endpoint = srv
        .create_endpoint(&client, &seed.key, &receiver.url(0), &["message.sent"])
        .await
        .context("create the endpoint")?;
    let uuid = endpoint["uuid"].as_str().context("endpoint uuid")?;
    let since = first + 1 + (args.kept_events - args.recovery_events);
    let started = Instant::now();
    let job: serde_json::Value = client
        .post(srv.url(&format!(
            "/api/v1/integrations/webhook-endpoints/{uuid}/recover"
        )))
        .bearer_auth(&seed.key)
        .json(&serde_json::json!({ "since": rfc3339(since) }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = job["recovery_id"].as_str().context("recovery_id")?;
    let done = loop {
        let r: serde_json::Value = client
            .get(srv.url(&format!(
                "/api/v1/integrations/webhook-endpoints/{uuid}/recoveries/{id}"
            )))
            .bearer_auth(&seed.key)
            .send()
            .await?
            .json()
            .await?;
        if r["status"] != "running" {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let recovery_s = started.elapsed().as_secs_f64();
    anyhow::ensure!(done["status"] == "completed", "the recovery ended {done}");
    let queued = done["deliveries_queued"].as_i64().unwrap_or_default();
    let peak_rss_mb = srv.peak_rss_mb();
    drop(srv);
    db.drop_database().await;
    Ok(RecoveryResults {
        kept_events: args.kept_events,
        write_kept_events_s,
        feed_pages: times.len(),
        feed_page_ms_mean,
        feed_page_ms_p99,
        recovered_events: queued,
        recovery_s,
        recovery_events_per_sec: queued as f64 / recovery_s,
        peak_rss_mb,
    })
}

/// Deliveries per second to one endpoint of the given ordering, for the same sends.
#[derive(Debug, serde::Serialize)]
pub struct OrderingResults {
    pub contacts: usize,
    pub events_per_contact: usize,
    pub unordered_deliveries_per_sec: f64,
    pub per_contact_deliveries_per_sec: f64,
    pub ratio: f64,
}

async fn deliveries_per_sec(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
    ordering: &str,
) -> anyhow::Result<f64> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let srv = Server::start(bin, &db).await?;
    let client = load::client();
    let receiver = Receiver::start().await?;
    let endpoint = srv
        .create_endpoint(&client, &seed.key, &receiver.url(0), &["message.sent"])
        .await
        .context("create the endpoint")?;
    let uuid = endpoint["uuid"].as_str().context("endpoint uuid")?;
    client
        .put(srv.url(&format!("/api/v1/integrations/webhook-endpoints/{uuid}")))
        .bearer_auth(&seed.key)
        .json(&serde_json::json!({ "ordering": ordering }))
        .send()
        .await?
        .error_for_status()?;
    // Sends spread over the contacts, from `connections` clients at once.
    let total = args.contacts * args.events_per_contact;
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (client, next) = (client.clone(), next.clone());
        let (url, key) = (srv.url("/api/v1/integrations/messages"), seed.key.clone());
        let contacts = args.contacts;
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    break;
                }
                let phone = format!("+49151{:08}", i % contacts);
                let body = serde_json::json!({ "phone": phone, "message": format!("m{i}") });
                let _ = Req::post(url.clone(), &key, uuid::Uuid::new_v4().to_string(), body)
                    .send(&client)
                    .await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let complete = receiver.wait_for(total, Duration::from_secs(900)).await;
    anyhow::ensure!(
        complete,
        "only {} of {total} deliveries arrived",
        receiver.count()
    );
    let rate = receiver.arrival_rate().unwrap_or_default();
    drop(srv);
    db.drop_database().await;
    Ok(rate)
}

pub async fn ordering(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<OrderingResults> {
    let unordered = deliveries_per_sec(args, bin, backend, "none").await?;
    eprintln!("  unordered: {unordered:.0} deliveries/s");
    let ordered = deliveries_per_sec(args, bin, backend, "per_contact").await?;
    eprintln!("  per_contact: {ordered:.0} deliveries/s");
    Ok(OrderingResults {
        contacts: args.contacts,
        events_per_contact: args.events_per_contact,
        unordered_deliveries_per_sec: unordered,
        per_contact_deliveries_per_sec: ordered,
        ratio: ordered / unordered,
    })
}
