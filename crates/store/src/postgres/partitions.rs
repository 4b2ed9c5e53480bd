//! Retention by partition on PostgreSQL (migration 0052, `domain::webhooks::retention`).
//!
//! Partition k of `events` and of `webhook_deliveries` holds the ids [k << 32, (k+1) << 32), and
//! `webhook_attempts_pk` the attempts of the deliveries of `webhook_deliveries_pk`. The id
//! sequence of a table says which partition is live. [`drop_expired`]:
//!
//! 1. rolls each live partition whose oldest row is a span old: creates partition k+1 and moves
//!    the sequence to its first id;
//! 2. drops each closed partition past the cutoff (deliveries with their attempts; events once no
//!    delivery refers to them), each in a short transaction that takes the parents' locks for
//!    the re-check and the `DROP TABLE` only (at most [`LOCK_TIMEOUT`], else the next purge
//!    tries again).
//!
//! Instances take turns through a transaction-level advisory lock: two purges never roll or drop
//! the same partition.

use std::time::Duration;

use sqlx::{Pool, Postgres};

use crate::StoreResult;
use crate::webhooks::DroppedPartitions;
use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::retention;

/// The advisory lock key of partition upkeep (any fixed number no other lock uses).
const LOCK_KEY: i64 = 0x0053_5742_5041_5254; // "SWBPART"
/// Bits of an id below its partition number.
const SHIFT: u32 = 32;
/// The longest a drop waits for its tables' locks. Longer than PostgreSQL's default
/// `deadlock_timeout` (1 s): an autovacuum in the way cancels itself then, and in a deadlock
/// the purge, which waited first, is the one that gives way.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '2s'";

/// A partitioned table and what goes with it.
struct Table {
    parent: &'static str,
    sequence: &'static str,
    /// The column of a row's age.
    time: &'static str,
    /// The table partitioned by this one's ids (attempts by their delivery's id).
    follower: Option<&'static str>,
}

const DELIVERIES: Table = Table {
    parent: "webhook_deliveries",
    sequence: "webhook_deliveries_id_seq",
    time: "created_at",
    follower: Some("webhook_attempts"),
};
const EVENTS: Table = Table {
    parent: "events",
    sequence: "events_id_seq",
    time: "occurred_at",
    follower: None,
};

/// Ends a transaction that changes nothing, now: a dropped one would keep its connection idle
/// in the transaction, holding its locks (the advisory one too), until the pool reuses it.
async fn end(tx: sqlx::Transaction<'_, Postgres>) -> StoreResult<()> {
    tx.rollback().await?;
    Ok(())
}

fn partition(parent: &str, k: i64) -> String {
    format!("{parent}_p{k}")
}

/// Rolls the live partitions a span old and drops the closed ones past `cutoff`.
pub(crate) async fn drop_expired(
    pool: &Pool<Postgres>,
    now: Timestamp,
    cutoff: Timestamp,
    span: Duration,
) -> StoreResult<DroppedPartitions> {
    let mut dropped = DroppedPartitions::default();
    for t in [&DELIVERIES, &EVENTS] {
        roll(pool, t, now, span).await?;
    }
    for k in closed(pool, &DELIVERIES).await? {
        if let Some(rows) = drop_deliveries(pool, k, cutoff).await? {
            dropped.partitions += 1;
            dropped.deliveries += rows;
        }
    }
    for k in closed(pool, &EVENTS).await? {
        if let Some(rows) = drop_events(pool, k, cutoff).await? {
            dropped.partitions += 1;
            dropped.events += rows;
        }
    }
    Ok(dropped)
}

/// The live partition's number: where the table's sequence points.
async fn live(c: &mut sqlx::PgConnection, t: &Table) -> StoreResult<i64> {
    let last: i64 = sqlx::query_scalar(&format!("SELECT last_value FROM {}", t.sequence))
        .fetch_one(&mut *c)
        .await?;
    Ok(last >> SHIFT)
}

async fn exists(c: &mut sqlx::PgConnection, table: &str) -> StoreResult<bool> {
    Ok(sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(&mut *c)
        .await?)
}

async fn locked(tx: &mut sqlx::PgConnection) -> StoreResult<bool> {
    Ok(sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *tx)
        .await?)
}

/// The time of the oldest (`MIN`) or newest (`MAX`) row of a partition (its time index).
async fn edge(
    c: &mut sqlx::PgConnection,
    table: &str,
    t: &Table,
    agg: &str,
) -> StoreResult<Option<Timestamp>> {
    Ok(
        sqlx::query_scalar(&format!("SELECT {agg}({}) FROM {table}", t.time))
            .fetch_one(&mut *c)
            .await?,
    )
}

/// Starts partition k+1 when the live partition k is a span old. A live partition that is
/// missing (a roll whose transaction failed after moving the sequence: those rows went to the
/// default partition) is skipped over the same way.
async fn roll(pool: &Pool<Postgres>, t: &Table, now: Timestamp, span: Duration) -> StoreResult<()> {
    let mut tx = pool.begin().await?;
    if !locked(&mut tx).await? {
        return end(tx).await;
    }
    let k = live(&mut tx, t).await?;
    let current = partition(t.parent, k);
    if exists(&mut tx, &current).await?
        && !retention::rolls(edge(&mut tx, &current, t, "MIN").await?, now, span)
    {
        return end(tx).await;
    }
    let next = k + 1;
    let (lo, hi) = (next << SHIFT, (next + 1) << SHIFT);
    let storage = if t.follower.is_some() {
        " WITH (fillfactor = 50)"
    } else {
        ""
    };
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({lo}) TO ({hi}){storage}",
        partition(t.parent, next),
        t.parent
    ))
    .execute(&mut *tx)
    .await?;
    if let Some(f) = t.follower {
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF {f} FOR VALUES FROM ({lo}) TO ({hi})",
            partition(f, next)
        ))
        .execute(&mut *tx)
        .await?;
    }
    // Moved while the advisory lock is held, so that no other instance moves it back.
    sqlx::query(&format!(
        "SELECT setval('{0}', $1, false) WHERE (SELECT last_value FROM {0}) < $1",
        t.sequence
    ))
    .bind(lo)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(
        table = t.parent,
        partition = next,
        "started a new partition"
    );
    Ok(())
}

/// The numbers of the table's range partitions before the live one, oldest first.
async fn closed(pool: &Pool<Postgres>, t: &Table) -> StoreResult<Vec<i64>> {
    let mut c = pool.acquire().await?;
    let k = live(&mut c, t).await?;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass",
    )
    .bind(t.parent)
    .fetch_all(&mut *c)
    .await?;
    let prefix = format!("{}_p", t.parent);
    let mut ks: Vec<i64> = names
        .iter()
        .filter_map(|n| n.strip_prefix(&prefix)?.parse().ok())
        .filter(|&n| n < k)
        .collect();
    ks.sort_unstable();
    Ok(ks)
}

/// Whether an attempt of the partition's deliveries is in flight (a lease; its expiry is due).
async fn held(c: &mut sqlx::PgConnection, table: &str) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE due_at IS NOT NULL AND lease_token IS NOT NULL)"
    ))
    .fetch_one(&mut *c)
    .await?)
}

async fn count(pool: &Pool<Postgres>, table: &str) -> StoreResult<u64> {
    let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Drops deliveries partition k with its attempts if it is past `cutoff`: checked first without
/// locks, then again under them. Returns the deliveries dropped, or `None` if it stays.
async fn drop_deliveries(
    pool: &Pool<Postgres>,
    k: i64,
    cutoff: Timestamp,
) -> StoreResult<Option<u64>> {
    let t = &DELIVERIES;
    let table = partition(t.parent, k);
    let attempts = partition("webhook_attempts", k);
    {
        let mut c = pool.acquire().await?;
        if !retention::droppable(
            edge(&mut c, &table, t, "MAX").await?,
            cutoff,
            held(&mut c, &table).await?,
        ) {
            return Ok(None);
        }
    }
    let rows = count(pool, &table).await?;
    let mut tx = pool.begin().await?;
    if !locked(&mut tx).await? || !exists(&mut tx, &table).await? {
        return end(tx).await.map(|()| None);
    }
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    if let Err(e) =
        sqlx::query("LOCK TABLE webhook_deliveries, webhook_attempts IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
    {
        tracing::info!(error = %e, partition = table, "partition busy; dropped at a later purge");
        return end(tx).await.map(|()| None);
    }
    if !retention::droppable(
        edge(&mut tx, &table, t, "MAX").await?,
        cutoff,
        held(&mut tx, &table).await?,
    ) {
        return end(tx).await.map(|()| None);
    }
    sqlx::query(&format!("DROP TABLE IF EXISTS {attempts}, {table}"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(
        partition = table,
        rows,
        "dropped a partition past the retention"
    );
    Ok(Some(rows))
}

/// Whether a delivery (in any partition) refers to an event of events partition k.
async fn referred(c: &mut sqlx::PgConnection, k: i64) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE event_id >= $1 AND event_id < $2)",
    )
    .bind(k << SHIFT)
    .bind((k + 1) << SHIFT)
    .fetch_one(&mut *c)
    .await?)
}

/// Drops events partition k if it is past `cutoff` and no delivery refers to it.
async fn drop_events(pool: &Pool<Postgres>, k: i64, cutoff: Timestamp) -> StoreResult<Option<u64>> {
    let t = &EVENTS;
    let table = partition(t.parent, k);
    {
        let mut c = pool.acquire().await?;
        if !retention::droppable(
            edge(&mut c, &table, t, "MAX").await?,
            cutoff,
            referred(&mut c, k).await?,
        ) {
            return Ok(None);
        }
    }
    let rows = count(pool, &table).await?;
    let mut tx = pool.begin().await?;
    if !locked(&mut tx).await? || !exists(&mut tx, &table).await? {
        return end(tx).await.map(|()| None);
    }
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    // A recovery that read these events holds the table until it has written its deliveries,
    // which the re-check then sees.
    if let Err(e) = sqlx::query("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
    {
        tracing::info!(error = %e, partition = table, "partition busy; dropped at a later purge");
        return end(tx).await.map(|()| None);
    }
    if !retention::droppable(
        edge(&mut tx, &table, t, "MAX").await?,
        cutoff,
        referred(&mut tx, k).await?,
    ) {
        return end(tx).await.map(|()| None);
    }
    sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(
        partition = table,
        rows,
        "dropped a partition past the retention"
    );
    Ok(Some(rows))
}
