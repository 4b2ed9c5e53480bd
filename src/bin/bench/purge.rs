//! `--scenario purge` (PostgreSQL): the purge of one day of `--purge-deliveries` deliveries
//! (default 10 000 000) past the retention.
//!
//! A fresh database with one endpoint on the local receiver. With the server stopped, the day is
//! written with one bulk statement per table: N events and one delivery each, delivered at their
//! first attempt (kept in the row), spread over the day that ended 91 days ago. The server then
//! starts (retention 90 days, a purge every 200 ms), which deletes them 1 000 rows per
//! transaction, and until no row of the day is left (and for 5 s at least) the bench sends a
//! light load (20 sends a second) whose event-to-delivery latency is measured; then 5 s of the
//! same load after the purge, as the baseline. Reported: the time from the server's start until
//! no row of the day is left, the WAL written meanwhile (`pg_current_wal_lsn`, the light load's
//! included: its own rate is the baseline's), and the latencies during and after.

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
/// The least of the light load measured around a purge.
const WARMUP: Duration = Duration::from_secs(5);

#[derive(Debug, serde::Serialize)]
pub struct PurgeRun {
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
) -> anyhow::Result<PurgeRun> {
    anyhow::ensure!(
        matches!(backend, Backend::Postgres),
        "--scenario purge: PostgreSQL only"
    );
    eprintln!("  {} deliveries", args.purge_deliveries);
    let r = run(args, bin).await?;
    eprintln!(
        "    purge {:.2} s, WAL {:.1} MB (baseline {:.2} MB/s), light load during {:?}, after {:?}",
        r.purge_s, r.wal_mb, r.baseline_wal_mb_per_s, r.during, r.after
    );
    Ok(r)
}

async fn run(args: &Args, bin: &std::path::Path) -> anyhow::Result<PurgeRun> {
    let n = args.purge_deliveries;
    let db = Database::create(Backend::Postgres, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let receiver = Receiver::start().await?;
    let client = load::client();
    let srv = Server::start(bin, &db).await?;
    srv.create_endpoint(&client, &seed.key, &receiver.url(0), &["message.sent"])
        .await
        .ok_or_else(|| anyhow::anyhow!("no webhook endpoint"))?;
    srv.stop().await;

    let end = chrono::Utc::now().timestamp_millis() - 91 * DAY_MS;
    let started = Instant::now();
    write_day(&db, n, end).await?;
    let seed_s = started.elapsed().as_secs_f64();

    let mut c = sqlx::PgConnection::connect(&db.url).await?;
    let env = [
        ("SWITCHBOARD_DELIVERY_RETENTION", "90d".to_owned()),
        ("SWITCHBOARD_PURGE_INTERVAL", "200ms".to_owned()),
    ];
    let lsn = wal_lsn(&mut c).await?;
    let started = Instant::now();
    let srv = Server::start_with(bin, &db, &env).await?;
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
        deliveries: n,
        seed_s,
        purge_s,
        wal_mb,
        baseline_wal_mb_per_s,
        during,
        after,
    })
}

/// Writes the day ending at `end` (ms): `n` events and one delivered delivery each.
async fn write_day(db: &Database, n: i64, end: i64) -> anyhow::Result<()> {
    let mut c = postgres_bulk(db).await?;
    let endpoint: i64 = sqlx::query_scalar("SELECT MIN(id) FROM webhook_endpoints")
        .fetch_one(&mut c)
        .await?;
    let mut tx = c.begin().await?;
    // One row every DAY_MS / n ms, in the day ending at `end`.
    let at = format!("({end} - {DAY_MS} + g * {DAY_MS} / $1::bigint)");
    sqlx::query(&format!(
        "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope)
         SELECT {}, (SELECT MIN(id) FROM organizations), 'message.sent',
                jsonb_build_object('n', g), NULL, to_timestamp({at} / 1000.0), {}
         FROM generate_series(0, $1::bigint - 1) g",
        uuid_sql(Backend::Postgres, &at, "g", '8'),
        envelope_sql("g"),
    ))
    .bind(n)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status,
                    attempts, created_at, updated_at, last_attempt_at, delivered_at, response_status,
                    trigger, first_attempt)
         SELECT {}, e.org_id, e.id, $1, e.name, 'delivered', 1, e.occurred_at,
                e.occurred_at, e.occurred_at, e.occurred_at, 200, 'event',
                '{{\"url\":\"http://127.0.0.1/hook/0\",\"started_at_ms\":'
                    || (extract(epoch FROM e.occurred_at) * 1000)::bigint
                    || ',\"duration_ms\":2,\"response_status\":200,\"excerpt\":\"ok\",\"signed_with\":[\"sec_0123456789ab\"]}}'
         FROM events e WHERE e.occurred_at <= to_timestamp($2 / 1000.0) ORDER BY e.id",
        uuid_sql(
            Backend::Postgres,
            "(extract(epoch FROM e.occurred_at) * 1000)::bigint",
            "e.id",
            '9'
        ),
    ))
    .bind(endpoint)
    .bind(end as f64)
    .execute(&mut *tx)
    .await?;
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
