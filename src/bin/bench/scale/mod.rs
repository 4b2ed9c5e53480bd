//! `--scenario scale`: the delivery rate and the history pages when the tables are large.
//!
//! * **Pending deliveries**: for each count N of `--scale-pending` (default 10 000 and
//!   1 000 000), a fresh database gets `--endpoints` webhook endpoints on the local receiver
//!   (through the API); then, with the server stopped, N `message.sent` events and one delivery
//!   each (the endpoints in turn: N / 8 each) are written with one bulk statement per table in
//!   one transaction, as the fan-out writes them (`pending`, no attempt, due at the event's
//!   time, no chain). The server is started again and the deliveries arriving at the receiver
//!   are counted: the rate over the first min(20 000, 90 % of N) arrivals (or those of the first
//!   two minutes), so that the large table is measured large (it is not drained).
//!   `--scale-same-due` makes every delivery due at one time instead, as the held deliveries of
//!   an endpoint are when it is enabled again.
//! * **History**: `--scale-messages` messages (default 10 000 000) of the organization, copies
//!   of one real send (its channel, contact, conversation, content and journey) spread over a
//!   year with mixed directions and statuses, written the same way. Then closed loops of
//!   `--connections` clients for `--duration` each: the first page of
//!   `GET /messages?limit=50`; walks of ten pages following `next_cursor`; and (2 clients)
//!   pages after a cursor at a random position in the history (signed with the key the server
//!   derives from the run's master key, as it signs its own cursors).
//!
//! Both record the seeding time and the database's size, and run copies of the dispatcher's
//! claim query and of the history page query against the seeded tables: their plans (EXPLAIN
//! on PostgreSQL, EXPLAIN QUERY PLAN on SQLite) and their time alone (median of 5).

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{ConnectOptions, Connection};

use crate::Args;
use crate::load::{self, Req};
use crate::receiver::Receiver;
use crate::report::{Latency, Rate};
use crate::server::{self, Backend, Database, Server};

mod print;
mod probes;
pub(crate) mod seed;

pub use print::print;
use probes::{claim_query, page_query, probe};
use seed::{database_mb, write_messages, write_pending};

/// Arrivals counted at most for one delivery rate...
const WINDOW: i64 = 20_000;
/// ...and the longest it waits for them (from the server's start).
const WINDOW_TIME: Duration = Duration::from_secs(120);
/// Clients of the loop of pages after a random cursor: one per core, as such a page can take
/// seconds.
const DEEP_CONNECTIONS: usize = 2;
/// Pages in each walk by `next_cursor`, the first page included.
const CURSOR_DEPTH: usize = 10;
const MESSAGES_PATH: &str = "/api/v1/integrations/messages";
const YEAR_MS: i64 = 365 * 24 * 3_600_000;

#[derive(Debug, serde::Serialize)]
pub struct ScaleResults {
    pub pending: Vec<PendingResults>,
    /// Deliveries per second with the most pending over those with the fewest.
    pub pending_ratio: Option<f64>,
    pub history: Option<HistoryResults>,
}

/// A query run alone against the seeded tables.
#[derive(Debug, serde::Serialize)]
pub struct QueryProbe {
    pub ms_median: f64,
    pub plan: Vec<String>,
}

#[derive(Debug, serde::Serialize)]
pub struct PendingResults {
    pub pending: i64,
    pub endpoints: usize,
    /// Whether every delivery was due at one time (`--scale-same-due`).
    pub same_due: bool,
    /// Writing the events and deliveries (and, on PostgreSQL, ANALYZE and a checkpoint).
    pub seed_s: f64,
    pub database_mb: Option<f64>,
    pub startup_ms: f64,
    /// The arrivals counted and the time from the first to the last of them.
    pub window_deliveries: usize,
    pub window_s: f64,
    pub deliveries_per_sec: f64,
    pub peak_rss_mb: Option<f64>,
    /// The dispatcher's claim query (a scan of 256 candidates) with every endpoint free...
    pub claim: QueryProbe,
    /// ...and with all endpoints but one at their limit (excluded by `NOT IN`).
    pub claim_saturated: QueryProbe,
}

#[derive(Debug, serde::Serialize)]
pub struct HistoryResults {
    pub messages: i64,
    /// Writing the messages (and, on PostgreSQL, ANALYZE and a checkpoint).
    pub seed_s: f64,
    pub database_mb: Option<f64>,
    pub startup_ms: f64,
    /// `GET /messages?limit=50`.
    pub first_page: Rate,
    /// Walks of ten pages by `next_cursor`: the rate counts every page, the latencies are
    /// those of pages 2 to 10.
    pub cursor_pages: Rate,
    /// A page after a cursor at a random position in the history (2 clients).
    pub deep_pages: Rate,
    pub peak_rss_mb: Option<f64>,
    /// The history page query: the first page, and after a cursor half-way down the history.
    pub page_query_first: QueryProbe,
    pub page_query_deep: QueryProbe,
}

pub async fn scale(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<ScaleResults> {
    let mut pending = Vec::new();
    for &n in args.scale_pending.iter().filter(|n| **n > 0) {
        eprintln!("  {n} pending deliveries");
        let r = pending_deliveries(args, bin, backend, n).await?;
        eprintln!(
            "    seeded in {:.1} s; {:.0} deliveries/s",
            r.seed_s, r.deliveries_per_sec
        );
        pending.push(r);
    }
    let pending_ratio = match (pending.first(), pending.last()) {
        (Some(a), Some(b)) if pending.len() > 1 && a.deliveries_per_sec > 0.0 => {
            Some(b.deliveries_per_sec / a.deliveries_per_sec)
        }
        _ => None,
    };
    let history = if args.scale_messages > 0 {
        eprintln!("  history of {} messages", args.scale_messages);
        Some(history(args, bin, backend).await?)
    } else {
        None
    };
    Ok(ScaleResults {
        pending,
        pending_ratio,
        history,
    })
}

async fn pending_deliveries(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
    n: i64,
) -> anyhow::Result<PendingResults> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let receiver = Receiver::start().await?;
    let srv = Server::start(bin, &db).await?;
    let client = load::client();
    for i in 0..args.endpoints {
        srv.create_endpoint(&client, &seed.key, &receiver.url(i), &["message.sent"])
            .await
            .context("create a webhook endpoint")?;
    }
    srv.stop().await;

    let started = Instant::now();
    let endpoints = write_pending(&db, backend, n, args.scale_same_due).await?;
    let seed_s = started.elapsed().as_secs_f64();
    let database_mb = database_mb(&db, backend).await;

    let now = chrono::Utc::now().timestamp_millis();
    let claim = probe(&db, backend, &claim_query(backend, now, &[])).await?;
    let busy = &endpoints[..endpoints.len().saturating_sub(1)];
    let claim_saturated = probe(&db, backend, &claim_query(backend, now, busy)).await?;

    let srv = Server::start(bin, &db).await?;
    let startup_ms = srv.startup.as_secs_f64() * 1000.0;
    let window = WINDOW.min(n * 9 / 10).max(2) as usize;
    if !receiver.wait_for(window, WINDOW_TIME).await {
        eprintln!(
            "    {} of the {window} deliveries arrived in {} s",
            receiver.count(),
            WINDOW_TIME.as_secs()
        );
    }
    let (count, span) = receiver.arrivals();
    let peak_rss_mb = srv.peak_rss_mb();
    srv.stop().await;
    db.drop_database().await;
    let window_s = span.as_secs_f64();
    Ok(PendingResults {
        pending: n,
        endpoints: endpoints.len(),
        same_due: args.scale_same_due,
        seed_s,
        database_mb,
        startup_ms,
        window_deliveries: count,
        window_s,
        deliveries_per_sec: if window_s > 0.0 {
            count.saturating_sub(1) as f64 / window_s
        } else {
            0.0
        },
        peak_rss_mb,
        claim,
        claim_saturated,
    })
}

async fn history(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<HistoryResults> {
    let n = args.scale_messages;
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let srv = Server::start(bin, &db).await?;
    let client = load::client();
    // One real send: the row that the seeded messages copy.
    let status = Req::post(
        srv.url(MESSAGES_PATH),
        &seed.key,
        uuid::Uuid::new_v4().to_string(),
        load::send_body(&seed),
    )
    .send(&client)
    .await?;
    anyhow::ensure!(
        (200..300).contains(&status),
        "the send was refused: {status}"
    );
    srv.stop().await;

    // Oldest first, `step` ms apart, all older than the real send.
    let first = chrono::Utc::now().timestamp_millis() - YEAR_MS - 1000;
    let step = (YEAR_MS / n).max(1);
    let started = Instant::now();
    let template = write_messages(&db, backend, n, first, step).await?;
    let seed_s = started.elapsed().as_secs_f64();
    let database_mb = database_mb(&db, backend).await;
    eprintln!(
        "    seeded in {seed_s:.1} s, {:.0} MiB",
        database_mb.unwrap_or(0.0)
    );
    // The position of the k-th seeded message (ids follow the order of the insert).
    let position = move |k: i64| (first + k * step, template.id + k);
    let page_query_first = probe(&db, backend, &page_query(template.org_id, None)).await?;
    let page_query_deep = probe(
        &db,
        backend,
        &page_query(template.org_id, Some(position(n / 2))),
    )
    .await?;

    let srv = Server::start(bin, &db).await?;
    let startup_ms = srv.startup.as_secs_f64() * 1000.0;
    let url = srv.url(&format!("{MESSAGES_PATH}?limit=50"));
    for _ in 0..20 {
        Req::get(url.clone(), Some(&seed.key)).send(&client).await?;
    }

    eprintln!("    GET /messages?limit=50");
    let (u, k) = (url.clone(), seed.key.clone());
    let first_page =
        load::closed_loop(&client, args, move |_, _| Req::get(u.clone(), Some(&k))).await;

    eprintln!("    {CURSOR_DEPTH} pages by next_cursor");
    let cursor_pages = cursor_walks(&client, args, &url, &seed.key).await;

    eprintln!("    pages after a random cursor ({DEEP_CONNECTIONS} clients)");
    let master =
        switchboard::crypto::MasterKey::from_hex(&db.master_key).map_err(anyhow::Error::msg)?;
    let cursor_key = *switchboard::crypto::SecretBox::new(&master).cursor_key();
    let (u, k) = (url.clone(), seed.key.clone());
    let deep_args = Args {
        connections: DEEP_CONNECTIONS,
        ..args.clone()
    };
    let deep_pages = load::closed_loop(&client, &deep_args, move |_, _| {
        let at = 1 + (uuid::Uuid::new_v4().as_u128() % n as u128) as i64;
        let (time, id) = position(at);
        let cursor = switchboard::http::cursor::sign(
            &cursor_key,
            MESSAGES_PATH,
            "",
            &format!("v1.{time}.{id}"),
        );
        Req::get(format!("{u}&cursor={cursor}"), Some(&k))
    })
    .await;

    let peak_rss_mb = srv.peak_rss_mb();
    srv.stop().await;
    if args.scale_keep {
        eprintln!("    kept: {}", db.keep());
    } else {
        db.drop_database().await;
    }
    Ok(HistoryResults {
        messages: n,
        seed_s,
        database_mb,
        startup_ms,
        first_page,
        cursor_pages,
        deep_pages,
        peak_rss_mb,
        page_query_first,
        page_query_deep,
    })
}

/// `connections` clients each walk the history from the first page by `next_cursor`,
/// `CURSOR_DEPTH` pages at a time, for `duration`.
async fn cursor_walks(client: &reqwest::Client, args: &Args, url: &str, key: &str) -> Rate {
    let deadline = Instant::now() + args.duration;
    let started = Instant::now();
    let (url, key) = (Arc::new(url.to_owned()), Arc::new(key.to_owned()));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut ok, mut failed) = (Vec::new(), 0usize, 0usize);
            'walk: while Instant::now() < deadline {
                let mut cursor: Option<String> = None;
                for page in 0..CURSOR_DEPTH {
                    if Instant::now() >= deadline {
                        break 'walk;
                    }
                    let target = match &cursor {
                        Some(c) => format!("{url}&cursor={c}"),
                        None => url.to_string(),
                    };
                    let t = Instant::now();
                    let body = match client.get(target).bearer_auth(key.as_str()).send().await {
                        Ok(r) if r.status().is_success() => {
                            r.json::<serde_json::Value>().await.ok()
                        }
                        _ => None,
                    };
                    let Some(body) = body else {
                        failed += 1;
                        continue 'walk;
                    };
                    ok += 1;
                    if page > 0 {
                        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    cursor = body["next_cursor"].as_str().map(str::to_owned);
                    if cursor.is_none() {
                        continue 'walk;
                    }
                }
            }
            (latencies, ok, failed)
        }));
    }
    let (mut all, mut ok, mut failed) = (Vec::new(), 0, 0);
    for t in tasks {
        if let Ok((l, o, f)) = t.await {
            all.extend(l);
            ok += o;
            failed += f;
        }
    }
    Rate {
        per_sec: ok as f64 / started.elapsed().as_secs_f64(),
        ok,
        failed,
        latency: Latency::from_samples(all),
    }
}
