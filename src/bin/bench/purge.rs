//! `--scenario purge` (PostgreSQL): the purge of one day of `--purge-deliveries` deliveries
//! (default 10 000 000) past the retention, as rows and as a partition.
//!
//! Two runs, each on a fresh database with one endpoint on the local receiver. With the server
//! stopped, the day is written with one bulk statement per table: N events and one delivery
//! each, delivered at their first attempt (kept in the row), spread over the day that ended 91
//! days ago:
//!
//! * `rows`: the default tables (not partitioned), which the purge deletes 1 000 rows per
//!   transaction, as SQLite's does;
//! * `partitions`: the tables partitioned (`SWITCHBOARD_RETENTION_PARTITIONS`) and the day in a
//!   range partition of its own, closed, as rolls leave one (the bench makes it and the next,
//!   live, partition with the statements a roll runs), which the purge drops.
//!
//! The server then starts (retention 90 days, a purge every 200 ms) and, until no row of the
//! day is left (and for 5 s at least), sends a light load (20 sends a second) whose
//! event-to-delivery latency is measured; then 5 s of the same load after the purge, as the
//! baseline. The rows' purge starts with the server. The partition is held by one of its
//! deliveries, leased as an attempt in flight is, until the light load has run 5 s; then the
//! bench ends the lease. Reported: the time from the start (the server's, or the lease's end)
//! until no row of the day is left, the WAL written meanwhile (`pg_current_wal_lsn`, the light
//! load's included: its own rate is the baseline's), and the latencies during and after.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::Connection;

use crate::Args;
use crate::load;
use crate::receiver::Receiver;
use crate::report::Latency;
use crate::scale::seed::{envelope_sql, postgres_bulk, postgres_settle, uuid_sql};
use crate::server::{self, Backend, Database, Server};

const DAY_MS: i64 = 86_400_000;
/// The longest a purge may take before the run gives up.
const PURGE_LIMIT: Duration = Duration::from_secs(3600);
const BASELINE: Duration = Duration::from_secs(5);
/// The light load before a partition is let go, and the least of it measured around a purge.
const WARMUP: Duration = Duration::from_secs(5);
/// The id of the delivery whose lease holds the day's partition until the light load is warm.
const HELD: i64 = 2 << 32;

#[derive(Debug, serde::Serialize)]
pub struct PurgeRun {
    pub mode: &'static str,
    pub deliveries: i64,
    pub seed_s: f64,
    pub purge_s: f64,
    pub wal_mb: f64,
    pub baseline_wal_mb_per_s: f64,
    pub during: Option<Latency>,
    pub after: Option<Latency>,
}

pub async fn purge(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<Vec<PurgeRun>> {
    anyhow::ensure!(
        matches!(backend, Backend::Postgres),
        "--scenario purge: PostgreSQL only (SQLite has no partitions; its purge deletes rows)"
    );
    let mut runs = Vec::new();
    let modes: &[&'static str] = match args.purge_mode.as_str() {
        "rows" => &["rows"],
        "partitions" => &["partitions"],
        _ => &["rows", "partitions"],
    };
    for &mode in modes {
        eprintln!("  {mode}: {} deliveries", args.purge_deliveries);
        let r = run(args, bin, mode).await?;
        eprintln!(
            "    purge {:.2} s, WAL {:.1} MB (baseline {:.2} MB/s), light load during {:?}, after {:?}",
            r.purge_s, r.wal_mb, r.baseline_wal_mb_per_s, r.during, r.after
        );
        runs.push(r);
    }
    Ok(runs)
}

async fn run(args: &Args, bin: &std::path::Path, mode: &'static str) -> anyhow::Result<PurgeRun> {
    let n = args.purge_deliveries;
    let db = Database::create(Backend::Postgres, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let receiver = Receiver::start().await?;
    let client = load::client();
    let partitioned = mode == "partitions";
    let shape = |mut env: Vec<(&'static str, String)>| {
        if partitioned {
            env.push(("SWITCHBOARD_RETENTION_PARTITIONS", "true".to_owned()));
        }
        env
    };
    let srv = Server::start_with(bin, &db, &shape(Vec::new())).await?;
    srv.create_endpoint(&client, &seed.key, &receiver.url(0), &["message.sent"])
        .await
        .ok_or_else(|| anyhow::anyhow!("no webhook endpoint"))?;
    srv.stop().await;

    let end = chrono::Utc::now().timestamp_millis() - 91 * DAY_MS;
    let started = Instant::now();
    write_day(&db, n, end, !partitioned).await?;
    let seed_s = started.elapsed().as_secs_f64();

    let mut c = sqlx::PgConnection::connect(&db.url).await?;
    let env = shape(vec![
        ("SWITCHBOARD_DELIVERY_RETENTION", "90d".to_owned()),
        ("SWITCHBOARD_PURGE_INTERVAL", "200ms".to_owned()),
    ]);
    let mut lsn = wal_lsn(&mut c).await?;
    let mut started = Instant::now();
    let srv = Server::start_with(bin, &db, &env).await?;
    if partitioned {
        // The light load runs warm before the partition is let go (its drop takes a moment).
        load::paced_sends(&client, &srv, &seed, 20.0, WARMUP).await;
        lsn = wal_lsn(&mut c).await?;
        started = Instant::now();
        sqlx::query(&format!(
            "UPDATE webhook_deliveries SET lease_token = NULL, due_at = NULL, lease_until = NULL
             WHERE id = {HELD}"
        ))
        .execute(&mut c)
        .await?;
    }
    receiver.reset();
    let done = Arc::new(AtomicBool::new(false));
    let sends = async {
        let mut sent = 0;
        while !done.load(Ordering::Relaxed) {
            sent += load::paced_sends(&client, &srv, &seed, 20.0, Duration::from_secs(1)).await;
        }
        sent
    };
    let watch = async {
        let r = wait_gone(&mut c, end, started).await;
        let purge_s = started.elapsed().as_secs_f64();
        // At least a few seconds of the light load around the purge.
        tokio::time::sleep(WARMUP.saturating_sub(started.elapsed())).await;
        done.store(true, Ordering::Relaxed);
        r.map(|()| purge_s)
    };
    let (sent, gone) = tokio::join!(sends, watch);
    let purge_s = gone?;
    let wal_mb = wal_since(&mut c, &lsn).await?;
    receiver.wait_for(sent, Duration::from_secs(60)).await;
    let during = receiver.latency_summary();

    receiver.reset();
    let lsn = wal_lsn(&mut c).await?;
    let sent = load::paced_sends(&client, &srv, &seed, 20.0, BASELINE).await;
    receiver.wait_for(sent, Duration::from_secs(60)).await;
    let baseline_wal_mb_per_s = wal_since(&mut c, &lsn).await? / BASELINE.as_secs_f64();
    let after = receiver.latency_summary();
    srv.stop().await;
    c.close().await?;
    db.drop_database().await;
    Ok(PurgeRun {
        mode,
        deliveries: n,
        seed_s,
        purge_s,
        wal_mb,
        baseline_wal_mb_per_s,
        during,
        after,
    })
}

/// Writes the day ending at `end` (ms): `n` events and one delivered delivery each, with the
/// same ids. `plain`: the tables are not partitioned, ids from 2³¹. Else the day gets range
/// partition 2 of its own, as rolls would have left it: partition 1 keeps the rows written
/// before it (the seed's, recent), and partition 3, made live, the rows after it.
async fn write_day(db: &Database, n: i64, end: i64, plain: bool) -> anyhow::Result<()> {
    let mut c = postgres_bulk(db).await?;
    // Plain tables: ids above the seed's, the identity sequences moved past the day after.
    let first: i64 = if plain { 1 << 31 } else { 2 << 32 };
    if !plain {
        for (parent, storage) in [
            ("events", ""),
            ("webhook_deliveries", " WITH (fillfactor = 50)"),
            ("webhook_attempts", ""),
        ] {
            for k in [2i64, 3] {
                sqlx::query(&format!(
                    "CREATE TABLE {parent}_p{k} PARTITION OF {parent} FOR VALUES FROM ({}) TO ({}){storage}",
                    k << 32,
                    (k + 1) << 32
                ))
                .execute(&mut c)
                .await?;
            }
        }
        for seq in ["events_id_seq", "webhook_deliveries_id_seq"] {
            sqlx::query(&format!("SELECT setval('{seq}', {}, false)", 3i64 << 32))
                .execute(&mut c)
                .await?;
        }
    }
    let endpoint: i64 = sqlx::query_scalar("SELECT MIN(id) FROM webhook_endpoints")
        .fetch_one(&mut c)
        .await?;
    let mut tx = c.begin().await?;
    // One row every DAY_MS / n ms, in the day ending at `end`.
    let at = format!("({end} - {DAY_MS} + g * {DAY_MS} / $1::bigint)");
    sqlx::query(&format!(
        "INSERT INTO events (id, uuid, org_id, name, data, channel, occurred_at, envelope)
         SELECT $2::bigint + g, {}, (SELECT MIN(id) FROM organizations), 'message.sent',
                jsonb_build_object('n', g), NULL, to_timestamp({at} / 1000.0), {}
         FROM generate_series(0, $1::bigint - 1) g",
        uuid_sql(Backend::Postgres, &at, "g", '8'),
        envelope_sql("g"),
    ))
    .bind(n)
    .bind(first)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries (id, uuid, org_id, event_id, endpoint_id, event_name, status,
                    attempts, created_at, updated_at, last_attempt_at, delivered_at, response_status,
                    trigger, first_attempt)
         SELECT e.id, {}, e.org_id, e.id, $1, e.name, 'delivered', 1, e.occurred_at,
                e.occurred_at, e.occurred_at, e.occurred_at, 200, 'event',
                '{{\"url\":\"http://127.0.0.1/hook/0\",\"started_at_ms\":'
                    || (extract(epoch FROM e.occurred_at) * 1000)::bigint
                    || ',\"duration_ms\":2,\"response_status\":200,\"excerpt\":\"ok\",\"signed_with\":[\"sec_0123456789ab\"]}}'
         FROM events e WHERE e.id >= $2 AND e.id < $2 + $3 ORDER BY e.id",
        uuid_sql(
            Backend::Postgres,
            "(extract(epoch FROM e.occurred_at) * 1000)::bigint",
            "e.id",
            '9'
        ),
    ))
    .bind(endpoint)
    .bind(first)
    .bind(n)
    .execute(&mut *tx)
    .await?;
    if plain {
        for table in ["events", "webhook_deliveries"] {
            sqlx::query(&format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), $1)"
            ))
            .bind(first + n)
            .execute(&mut *tx)
            .await?;
        }
    } else {
        // An attempt in flight holds the partition until the run lets it go.
        sqlx::query(&format!(
            "UPDATE webhook_deliveries SET lease_token = gen_random_uuid(),
                    due_at = now() + interval '1 hour', lease_until = now() + interval '1 hour'
             WHERE id = {HELD}"
        ))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    postgres_settle(&mut c, &["events", "webhook_deliveries"]).await?;
    c.close().await?;
    Ok(())
}

/// Waits until neither a delivery nor an event of the day (older than `end`) is left.
async fn wait_gone(c: &mut sqlx::PgConnection, end: i64, started: Instant) -> anyhow::Result<()> {
    loop {
        let left: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE created_at <= to_timestamp($1 / 1000.0))
                 OR EXISTS (SELECT 1 FROM events WHERE occurred_at <= to_timestamp($1 / 1000.0))",
        )
        .bind(end as f64)
        .fetch_one(&mut *c)
        .await?;
        if !left {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < PURGE_LIMIT,
            "the purge did not end within {PURGE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wal_lsn(c: &mut sqlx::PgConnection) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut *c)
        .await?)
}

/// MB of WAL written since `lsn`.
async fn wal_since(c: &mut sqlx::PgConnection, lsn: &str) -> anyhow::Result<f64> {
    let bytes: f64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
            .bind(lsn)
            .fetch_one(&mut *c)
            .await?;
    Ok(bytes / 1e6)
}
