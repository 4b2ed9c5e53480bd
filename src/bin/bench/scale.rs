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

/// A SQLite connection for bulk writes, taken while no server runs: a rollback journal
/// instead of the WAL (a fresh table's pages are not journaled, where the WAL would hold every
/// one of them once more), no syncs, 1 GiB of page cache, and no foreign-key checks (every
/// reference is valid by construction). The server puts the database back in WAL mode.
async fn sqlite_bulk(db: &Database) -> anyhow::Result<sqlx::SqliteConnection> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    Ok(SqliteConnectOptions::from_str(&db.url)?
        .journal_mode(SqliteJournalMode::Delete)
        .synchronous(SqliteSynchronous::Off)
        .foreign_keys(false)
        .pragma("cache_size", "-1048576")
        .connect()
        .await?)
}

/// Writes the SQLite file to disk (the bulk connection did not sync): the seeding time
/// includes it, the server's start-up does not.
fn sqlite_sync(db: &Database) -> anyhow::Result<()> {
    std::fs::File::open(db.dir.path().join("bench.db"))?.sync_all()?;
    Ok(())
}

/// A PostgreSQL connection for bulk writes: no foreign-key triggers (every reference is valid
/// by construction; 10 million rows would queue 50 million trigger events).
async fn postgres_bulk(db: &Database) -> anyhow::Result<sqlx::PgConnection> {
    let mut c = sqlx::PgConnection::connect(&db.url).await?;
    if let Err(e) = sqlx::query("SET session_replication_role = replica")
        .execute(&mut c)
        .await
    {
        eprintln!("    (foreign-key triggers stay on: {e})");
    }
    Ok(c)
}

/// After a bulk write on PostgreSQL: fresh statistics, and the dirty pages written out so that
/// the measurement does not pay for them.
async fn postgres_settle(c: &mut sqlx::PgConnection, tables: &[&str]) -> anyhow::Result<()> {
    for t in tables {
        sqlx::query(&format!("ANALYZE {t}"))
            .execute(&mut *c)
            .await?;
    }
    let _ = sqlx::query("CHECKPOINT").execute(&mut *c).await;
    Ok(())
}

/// A time-ordered (version 7 layout) UUID from a time in ms and a unique number: the
/// server's UUIDs are version 7, so the unique indexes grow at their right edge as they do
/// in service. `variant` is the 17th hex digit (8 to b).
fn uuid_sql(backend: Backend, ms: &str, n: &str, variant: char) -> String {
    match backend {
        Backend::Sqlite => {
            format!("unhex(printf('%012x7%03x{variant}%015x', {ms}, ({n}) % 4096, {n}))")
        }
        Backend::Postgres => format!(
            "(lpad(to_hex({ms}), 12, '0') || '7' || lpad(to_hex(({n}) % 4096), 3, '0') || '{variant}' \
             || lpad(to_hex({n}), 15, '0'))::uuid"
        ),
    }
}

/// The envelope `outage::write_events` writes, for the event numbered by `n`.
fn envelope_sql(n: &str) -> String {
    format!(
        "'{{\"event\":\"message.sent\",\"data\":{{\"n\":' || {n} || '}},\"metadata\":{{\"bench\":true}}}}'"
    )
}

/// Writes `n` `message.sent` events, one millisecond apart and ending an hour ago, and one
/// pending delivery each to the organization's endpoints in turn, in one transaction. The
/// deliveries are due at their event's time, as the fan-out writes them, or with `same_due`
/// all at once (now), as an endpoint's held deliveries are when it is enabled again. Returns
/// the endpoints' ids.
async fn write_pending(
    db: &Database,
    backend: Backend,
    n: i64,
    same_due: bool,
) -> anyhow::Result<Vec<i64>> {
    let now = chrono::Utc::now().timestamp_millis();
    let first = now - 3_600_000 - n;
    let columns = "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status,
                        attempts, due_at, next_attempt_at, created_at, updated_at, trigger, order_key, sequence)";
    match backend {
        Backend::Sqlite => {
            let due = match same_due {
                true => now.to_string(),
                false => "e.occurred_at".to_owned(),
            };
            let mut c = sqlite_bulk(db).await?;
            let endpoints: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM webhook_endpoints ORDER BY id")
                    .fetch_all(&mut c)
                    .await?;
            anyhow::ensure!(!endpoints.is_empty(), "no webhook endpoint");
            let mut tx = c.begin().await?;
            let before: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(&format!(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $1)
                 INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope)
                 SELECT {}, (SELECT MIN(id) FROM organizations), 'message.sent', '{{\"n\":' || n || '}}',
                        NULL, $2 + n, {}
                 FROM g",
                uuid_sql(backend, "$2 + n", "n", '8'),
                envelope_sql("n"),
            ))
            .bind(n)
            .bind(first)
            .execute(&mut *tx)
            .await
            .context("write the events")?;
            sqlx::query(&format!(
                "{columns}
                 SELECT {}, e.org_id, e.id, json_extract($1, '$[' || (e.id % $2) || ']'), e.name, 'pending',
                        0, {due}, {due}, e.occurred_at, e.occurred_at, 'event', NULL, NULL
                 FROM events e WHERE e.id > $3 ORDER BY e.id",
                uuid_sql(backend, "e.occurred_at", "e.id", '9'),
            ))
            .bind(serde_json::to_string(&endpoints)?)
            .bind(endpoints.len() as i64)
            .bind(before)
            .execute(&mut *tx)
            .await
            .context("write the deliveries")?;
            tx.commit().await?;
            c.close().await?;
            sqlite_sync(db)?;
            Ok(endpoints)
        }
        Backend::Postgres => {
            let due = match same_due {
                true => format!("to_timestamp({now} / 1000.0)"),
                false => "e.occurred_at".to_owned(),
            };
            let mut c = postgres_bulk(db).await?;
            let endpoints: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM webhook_endpoints ORDER BY id")
                    .fetch_all(&mut c)
                    .await?;
            anyhow::ensure!(!endpoints.is_empty(), "no webhook endpoint");
            let mut tx = c.begin().await?;
            let before: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(&format!(
                "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope)
                 SELECT {}, (SELECT MIN(id) FROM organizations), 'message.sent', jsonb_build_object('n', g),
                        NULL, to_timestamp(($2::bigint + g) / 1000.0), {}
                 FROM generate_series(1, $1::bigint) g",
                uuid_sql(backend, "$2::bigint + g", "g", '8'),
                envelope_sql("g"),
            ))
            .bind(n)
            .bind(first)
            .execute(&mut *tx)
            .await
            .context("write the events")?;
            sqlx::query(&format!(
                "{columns}
                 SELECT {}, e.org_id, e.id, ($1::bigint[])[(1 + e.id % $2::bigint)::int], e.name, 'pending',
                        0, {due}, {due}, e.occurred_at, e.occurred_at, 'event', NULL, NULL
                 FROM events e WHERE e.id > $3 ORDER BY e.id",
                uuid_sql(
                    backend,
                    "(extract(epoch FROM e.occurred_at) * 1000)::bigint",
                    "e.id",
                    '9'
                ),
            ))
            .bind(&endpoints)
            .bind(endpoints.len() as i64)
            .bind(before)
            .execute(&mut *tx)
            .await
            .context("write the deliveries")?;
            tx.commit().await?;
            postgres_settle(&mut c, &["events", "webhook_deliveries"]).await?;
            c.close().await?;
            Ok(endpoints)
        }
    }
}

/// The real message the seeded ones copy.
#[derive(sqlx::FromRow)]
struct Template {
    id: i64,
    org_id: i64,
    channel_id: i64,
    contact_id: i64,
    conversation_id: Option<i64>,
    api_key_id: Option<i64>,
    #[sqlx(rename = "type")]
    message_type: String,
    content: String,
    journey: Option<String>,
}

/// Writes `n` copies of the first message, `step` ms apart from `first` on, in one
/// transaction: a fifth inbound (`received`), the rest outbound (`sent`, `delivered`, `read`).
async fn write_messages(
    db: &Database,
    backend: Backend,
    n: i64,
    first: i64,
    step: i64,
) -> anyhow::Result<Template> {
    let template_sql = |content: &str, journey: &str| {
        format!(
            "SELECT id, org_id, channel_id, contact_id, conversation_id, api_key_id, type,
                    {content} AS content, {journey} AS journey
             FROM messages ORDER BY id LIMIT 1"
        )
    };
    let mix = |g: &str| {
        (
            format!("CASE WHEN {g} % 10 < 2 THEN 'inbound' ELSE 'outbound' END"),
            format!(
                "CASE WHEN {g} % 10 < 2 THEN 'received' WHEN {g} % 10 = 2 THEN 'sent'
                      WHEN {g} % 10 < 7 THEN 'delivered' ELSE 'read' END"
            ),
        )
    };
    let columns = "INSERT INTO messages (uuid, org_id, channel_id, contact_id, conversation_id, api_key_id,
                        direction, type, status, content, provider_message_id, error, created_at, updated_at,
                        trace, journey)";
    match backend {
        Backend::Sqlite => {
            let mut c = sqlite_bulk(db).await?;
            let t: Template = sqlx::query_as(&template_sql("content", "journey"))
                .fetch_one(&mut c)
                .await
                .context("the message to copy")?;
            let (direction, status) = mix("n");
            let mut tx = c.begin().await?;
            sqlx::query(&format!(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $1)
                 {columns}
                 SELECT {}, $4, $5, $6, $7, CASE WHEN n % 10 < 2 THEN NULL ELSE $8 END, {direction}, $9,
                        {status}, $10, printf('sbx-bench-%010d', n), NULL, $2 + n * $3, $2 + n * $3, NULL, $11
                 FROM g",
                uuid_sql(backend, "$2 + n * $3", "n", '8'),
            ))
            .bind(n)
            .bind(first)
            .bind(step)
            .bind(t.org_id)
            .bind(t.channel_id)
            .bind(t.contact_id)
            .bind(t.conversation_id)
            .bind(t.api_key_id)
            .bind(&t.message_type)
            .bind(&t.content)
            .bind(&t.journey)
            .execute(&mut *tx)
            .await
            .context("write the messages")?;
            tx.commit().await?;
            c.close().await?;
            sqlite_sync(db)?;
            Ok(t)
        }
        Backend::Postgres => {
            let mut c = postgres_bulk(db).await?;
            let t: Template = sqlx::query_as(&template_sql("content::text", "journey::text"))
                .fetch_one(&mut c)
                .await
                .context("the message to copy")?;
            let (direction, status) = mix("g");
            let at = "to_timestamp(($2::bigint + g * $3::bigint) / 1000.0)";
            let mut tx = c.begin().await?;
            sqlx::query(&format!(
                "{columns}
                 SELECT {}, $4::bigint, $5::bigint, $6::bigint, $7::bigint,
                        CASE WHEN g % 10 < 2 THEN NULL ELSE $8::bigint END, {direction}, $9::text, {status},
                        $10::jsonb, 'sbx-bench-' || lpad(g::text, 10, '0'), NULL, {at}, {at}, NULL, $11::jsonb
                 FROM generate_series(1, $1::bigint) g",
                uuid_sql(backend, "$2::bigint + g * $3::bigint", "g", '8'),
            ))
            .bind(n)
            .bind(first)
            .bind(step)
            .bind(t.org_id)
            .bind(t.channel_id)
            .bind(t.contact_id)
            .bind(t.conversation_id)
            .bind(t.api_key_id)
            .bind(&t.message_type)
            .bind(&t.content)
            .bind(&t.journey)
            .execute(&mut *tx)
            .await
            .context("write the messages")?;
            tx.commit().await?;
            postgres_settle(&mut c, &["messages"]).await?;
            c.close().await?;
            Ok(t)
        }
    }
}

/// The database's size in MiB: the SQLite files, or `pg_database_size`.
async fn database_mb(db: &Database, backend: Backend) -> Option<f64> {
    let bytes: i64 = match backend {
        Backend::Sqlite => ["bench.db", "bench.db-wal", "bench.db-shm"]
            .iter()
            .filter_map(|f| std::fs::metadata(db.dir.path().join(f)).ok())
            .map(|m| m.len() as i64)
            .sum(),
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.ok()?;
            sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(&mut c)
                .await
                .ok()?
        }
    };
    Some(bytes as f64 / (1024.0 * 1024.0))
}

/// A value bound to a probed query, as the store binds it.
#[derive(Clone, Copy, Debug)]
enum Bind {
    Int(i64),
    /// A time in ms: an integer on SQLite, a `timestamptz` on PostgreSQL.
    Time(i64),
}

/// A probed query: its text with `$n` placeholders and their values.
struct Probe {
    sql: String,
    binds: Vec<Bind>,
}

impl Probe {
    fn new(sql: &str) -> Probe {
        Probe {
            sql: sql.to_owned(),
            binds: Vec::new(),
        }
    }

    /// Appends a placeholder for `b`.
    fn bind(&mut self, b: Bind) -> &mut Probe {
        self.binds.push(b);
        self.sql.push_str(&format!("${}", self.binds.len()));
        self
    }

    fn push(&mut self, s: &str) -> &mut Probe {
        self.sql.push_str(s);
        self
    }

    fn sqlite<'q>(
        &self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        let mut q = sqlx::query(sql);
        for b in &self.binds {
            q = match *b {
                Bind::Int(v) | Bind::Time(v) => q.bind(v),
            };
        }
        q
    }

    fn postgres<'q>(
        &self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let mut q = sqlx::query(sql);
        for b in &self.binds {
            q = match *b {
                Bind::Int(v) => q.bind(v),
                Bind::Time(ms) => q.bind(chrono::DateTime::from_timestamp_millis(ms)),
            };
        }
        q
    }
}

/// A copy of the dispatcher's claim query (`claim_deliveries` in
/// crates/store/src/shared/webhooks/deliveries.rs) for 64 free slots (a scan of 256), with
/// `busy` endpoints at their limit.
fn claim_query(backend: Backend, now: i64, busy: &[i64]) -> Probe {
    let mut p = Probe::new(
        "SELECT id, endpoint_id, attempts, lease_token, last_attempt_at FROM webhook_deliveries
         WHERE due_at IS NOT NULL AND due_at <= ",
    );
    p.bind(Bind::Time(now));
    p.push(" AND (lease_token IS NULL OR COALESCE(lease_until, due_at) <= ")
        .bind(Bind::Time(now))
        .push(")");
    if !busy.is_empty() {
        p.push(" AND (endpoint_id IS NULL OR endpoint_id NOT IN (");
        for (i, id) in busy.iter().enumerate() {
            if i > 0 {
                p.push(", ");
            }
            p.bind(Bind::Int(*id));
        }
        p.push("))");
    }
    p.push(" ORDER BY due_at, id LIMIT ").bind(Bind::Int(256));
    if let Backend::Postgres = backend {
        p.push(" FOR UPDATE SKIP LOCKED");
    }
    p
}

/// A copy of the history page query (`list_messages` in crates/store/src/shared/messages.rs)
/// without filters, for a page of 50 (51 rows fetched), after `after` (time in ms, id).
fn page_query(org_id: i64, after: Option<(i64, i64)>) -> Probe {
    let mut p = Probe::new(
        "SELECT m.id, m.uuid, m.org_id, m.channel_id, ch.uuid AS channel_uuid, ch.slug AS channel_slug,
                ch.type AS channel_type, ch.name AS channel_name, ch.identifier AS channel_identifier,
                m.contact_id, ct.uuid AS contact_uuid, m.conversation_id, cv.uuid AS conversation_uuid,
                m.api_key_id, m.direction, m.type, m.status, m.content, m.provider_message_id, m.error,
                m.created_at, m.updated_at, cs.uuid AS consent_uuid, m.trace
         FROM messages m
         JOIN channels ch ON ch.id = m.channel_id
         JOIN contacts ct ON ct.id = m.contact_id
         LEFT JOIN conversations cv ON cv.id = m.conversation_id
         LEFT JOIN consents cs ON cs.id = m.consent_id WHERE m.org_id = ",
    );
    p.bind(Bind::Int(org_id));
    if let Some((ms, id)) = after {
        p.push(" AND (m.created_at, m.id) < (")
            .bind(Bind::Time(ms))
            .push(", ")
            .bind(Bind::Int(id))
            .push(")");
    }
    p.push(" ORDER BY m.created_at DESC, m.id DESC LIMIT ")
        .bind(Bind::Int(51));
    p
}

/// The plan of a query and its median time over 5 runs (after one to warm the cache).
async fn probe(db: &Database, backend: Backend, p: &Probe) -> anyhow::Result<QueryProbe> {
    let mut times = Vec::new();
    let explain;
    let plan = match backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await?;
            explain = format!("EXPLAIN QUERY PLAN {}", p.sql);
            let rows = p.sqlite(&explain).fetch_all(&mut c).await?;
            // Indented by depth, as the sqlite3 shell shows it.
            let mut depth = std::collections::HashMap::new();
            let mut plan = Vec::new();
            for row in rows {
                use sqlx::Row;
                let (id, parent): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                let d = depth.get(&parent).map_or(0, |d| d + 1);
                depth.insert(id, d);
                plan.push(format!(
                    "{}{}",
                    "  ".repeat(d),
                    row.try_get::<String, _>(3)?
                ));
            }
            for _ in 0..6 {
                let t = Instant::now();
                p.sqlite(&p.sql).fetch_all(&mut c).await?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            c.close().await?;
            plan
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await?;
            explain = format!("EXPLAIN {}", p.sql);
            let rows = p.postgres(&explain).fetch_all(&mut c).await?;
            let plan = rows
                .iter()
                .map(|row| sqlx::Row::try_get::<String, _>(row, 0))
                .collect::<Result<Vec<_>, _>>()?;
            for _ in 0..6 {
                let t = Instant::now();
                p.postgres(&p.sql).fetch_all(&mut c).await?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            c.close().await?;
            plan
        }
    };
    times.remove(0);
    times.sort_by(f64::total_cmp);
    Ok(QueryProbe {
        ms_median: times[times.len() / 2],
        plan,
    })
}

/// One table for every backend measured.
pub fn print(runs: &[(&str, ScaleResults)]) {
    let rate = |r: &Rate| match r.per_sec < 10.0 {
        true => format!("{:.2}/s", r.per_sec),
        false => format!("{:.0}/s", r.per_sec),
    };
    let lat = |r: &Rate| {
        r.latency
            .as_ref()
            .map(|l| format!("{:.2}/{:.2} ms", l.p50_ms, l.p99_ms))
            .unwrap_or_else(|| "n/a".into())
    };
    let mb = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.0} MiB"));
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: String, f: &dyn Fn(&ScaleResults) -> Option<String>| {
        let cells: Vec<String> = runs
            .iter()
            .map(|(_, r)| f(r).unwrap_or_else(|| "n/a".into()))
            .collect();
        rows.push((label, cells));
    };
    let counts: Vec<i64> = runs
        .first()
        .map(|(_, r)| r.pending.iter().map(|p| p.pending).collect())
        .unwrap_or_default();
    for (i, n) in counts.iter().enumerate() {
        fn at(r: &ScaleResults, i: usize) -> Option<&PendingResults> {
            r.pending.get(i)
        }
        let same = runs
            .first()
            .and_then(|(_, r)| at(r, i))
            .is_some_and(|p| p.same_due);
        let label = match same {
            true => format!("{n} pending (one due_at): deliveries/s"),
            false => format!("{n} pending: deliveries/s"),
        };
        row(label, &|r| {
            at(r, i).map(|p| format!("{:.0}/s", p.deliveries_per_sec))
        });
        row("  window".into(), &|r| {
            at(r, i).map(|p| format!("{} in {:.1} s", p.window_deliveries, p.window_s))
        });
        row("  seeding, database".into(), &|r| {
            at(r, i).map(|p| format!("{:.1} s, {}", p.seed_s, mb(p.database_mb)))
        });
        row("  start-up".into(), &|r| {
            at(r, i).map(|p| format!("{:.0} ms", p.startup_ms))
        });
        row("  claim query alone / 7 of 8 busy".into(), &|r| {
            at(r, i).map(|p| {
                format!(
                    "{:.2} / {:.2} ms",
                    p.claim.ms_median, p.claim_saturated.ms_median
                )
            })
        });
    }
    if counts.len() > 1 {
        row(
            format!("deliveries/s {} vs {}", counts[counts.len() - 1], counts[0]),
            &|r| r.pending_ratio.map(|x| format!("{:.2}", x)),
        );
    }
    let history = runs
        .first()
        .and_then(|(_, r)| r.history.as_ref())
        .map(|h| h.messages);
    if let Some(n) = history {
        row(format!("history of {n} messages: seeding"), &|r| {
            r.history.as_ref().map(|h| format!("{:.1} s", h.seed_s))
        });
        row("  database size".into(), &|r| {
            r.history.as_ref().map(|h| mb(h.database_mb))
        });
        row("  start-up".into(), &|r| {
            r.history
                .as_ref()
                .map(|h| format!("{:.0} ms", h.startup_ms))
        });
        row("GET /messages?limit=50".into(), &|r| {
            r.history.as_ref().map(|h| rate(&h.first_page))
        });
        row("  p50/p99".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.first_page))
        });
        row(format!("{CURSOR_DEPTH} pages by next_cursor"), &|r| {
            r.history.as_ref().map(|h| rate(&h.cursor_pages))
        });
        row("  p50/p99 (pages 2+)".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.cursor_pages))
        });
        row(
            format!("page after a random cursor, {DEEP_CONNECTIONS} clients"),
            &|r| r.history.as_ref().map(|h| rate(&h.deep_pages)),
        );
        row("  p50/p99".into(), &|r| {
            r.history.as_ref().map(|h| lat(&h.deep_pages))
        });
        row("page query alone: first / half-way".into(), &|r| {
            r.history.as_ref().map(|h| {
                format!(
                    "{:.2} / {:.2} ms",
                    h.page_query_first.ms_median, h.page_query_deep.ms_median
                )
            })
        });
        row("  peak RSS".into(), &|r| {
            r.history.as_ref().map(|h| mb(h.peak_rss_mb))
        });
    }
    print!("{:<38}", "scale");
    for (name, _) in runs {
        print!(" {name:>24}");
    }
    println!();
    for (label, cells) in rows {
        print!("{label:<38}");
        for c in cells {
            print!(" {c:>24}");
        }
        println!();
    }
}
