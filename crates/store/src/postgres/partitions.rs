//! Retention by partition on PostgreSQL (`domain::webhooks::retention`), an operator's choice
//! (`SWITCHBOARD_RETENTION_PARTITIONS`): [`convert`] turns the webhook tables into partitioned
//! ones once (`sql/postgres/partition_webhooks.sql`); until then every function here finds the
//! tables unpartitioned and does nothing, and the purge deletes rows in batches.
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

use super::shared::webhook_sql;
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
    /// Whether the age is read organization by organization, from `(org_id, time, id)`: the
    /// table has no index by age alone (deliveries, migration 0054).
    by_org: bool,
    /// The table partitioned by this one's ids (attempts by their delivery's id).
    follower: Option<&'static str>,
}

const DELIVERIES: Table = Table {
    parent: "webhook_deliveries",
    sequence: "webhook_deliveries_id_seq",
    time: "created_at",
    by_org: true,
    follower: Some("webhook_attempts"),
};
const EVENTS: Table = Table {
    parent: "events",
    sequence: "events_id_seq",
    time: "occurred_at",
    by_org: false,
    follower: None,
};

/// Ends a transaction that changes nothing, now: a dropped one would keep its connection idle
/// in the transaction, holding its locks (the advisory one too), until the pool reuses it.
async fn end(tx: sqlx::Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
    tx.rollback().await
}

/// Whether an error says that the table is gone (another instance dropped it meanwhile).
fn undefined_table(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "42P01")
}

fn partition(parent: &str, k: i64) -> String {
    format!("{parent}_p{k}")
}

/// The conversion: the tables become partitioned, their rows stay in history partitions.
const CONVERT: &str = include_str!("../../sql/postgres/partition_webhooks.sql");

/// Whether the webhook tables are partitioned (converted by [`convert`]).
pub(crate) async fn partitioned(c: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('webhook_deliveries'))",
    )
    .fetch_one(&mut *c)
    .await
}

/// Partitions the webhook tables for retention, once: returns whether this call converted
/// them (`false`: they already were). One transaction under the upkeep's advisory lock, so two
/// instances starting at once convert once; the conversion takes the three tables' exclusive
/// locks and reads each once to check its history partition's bounds.
pub(crate) async fn convert(pool: &Pool<Postgres>) -> StoreResult<bool> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    if partitioned(&mut tx).await? {
        end(tx).await?;
        return Ok(false);
    }
    // A statement of several (no parameters: the simple query protocol).
    sqlx::Executor::execute(&mut *tx, CONVERT).await?;
    tx.commit().await?;
    tracing::info!("partitioned events, webhook_deliveries and webhook_attempts for retention");
    Ok(true)
}

/// The tables whose rows the purge deletes one by one, (deliveries, events): all of them when
/// the tables are not partitioned; else those written before partitioning (the history
/// partitions) and those no range partition holds (the default partitions).
pub(crate) async fn row_purged(
    pool: &Pool<Postgres>,
) -> StoreResult<&'static [(&'static str, &'static str)]> {
    let mut c = pool.acquire().await?;
    Ok(if partitioned(&mut c).await? {
        &[
            ("webhook_deliveries_history", "events_history"),
            ("webhook_deliveries_default", "events_default"),
        ]
    } else {
        &[("webhook_deliveries", "events")]
    })
}

/// Rolls the live partitions a span old and drops the closed ones past `cutoff` (nothing when
/// the tables are not partitioned).
pub(crate) async fn drop_expired(
    pool: &Pool<Postgres>,
    now: Timestamp,
    cutoff: Timestamp,
    span: Duration,
) -> StoreResult<DroppedPartitions> {
    let mut dropped = DroppedPartitions::default();
    if !partitioned(&mut *pool.acquire().await?).await? {
        return Ok(dropped);
    }
    for t in [&DELIVERIES, &EVENTS] {
        roll(pool, t, now, span).await?;
    }
    // Deliveries first: an events partition goes once no delivery refers to it.
    for t in [&DELIVERIES, &EVENTS] {
        for k in closed(pool, t).await? {
            if let Some(rows) = drop_closed(pool, t, k, cutoff).await? {
                dropped.partitions += 1;
                match t.follower {
                    Some(_) => dropped.deliveries += rows,
                    None => dropped.events += rows,
                }
            }
        }
    }
    Ok(dropped)
}

/// The live partition's number: where the table's sequence points.
async fn live(c: &mut sqlx::PgConnection, t: &Table) -> Result<i64, sqlx::Error> {
    let last: i64 = sqlx::query_scalar(&format!("SELECT last_value FROM {}", t.sequence))
        .fetch_one(&mut *c)
        .await?;
    Ok(last >> SHIFT)
}

async fn exists(c: &mut sqlx::PgConnection, table: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(&mut *c)
        .await
}

async fn locked(tx: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *tx)
        .await
}

/// The time of the oldest (`MIN`) or newest (`MAX`) row of a partition, from its index by time
/// or, for a table without one, from the ends of each organization's range of its index by
/// organization and time.
async fn edge(
    c: &mut sqlx::PgConnection,
    table: &str,
    t: &Table,
    agg: &str,
) -> Result<Option<Timestamp>, sqlx::Error> {
    let time = t.time;
    let q = if t.by_org {
        let order = if agg == "MIN" { "ASC" } else { "DESC" };
        format!(
            "{} SELECT {agg}((SELECT p.{time} FROM {table} p WHERE p.org_id = orgs.id
                               ORDER BY p.{time} {order} LIMIT 1))
             FROM orgs WHERE orgs.id IS NOT NULL",
            webhook_sql::orgs_of(table)
        )
    } else {
        format!("SELECT {agg}({time}) FROM {table}")
    };
    sqlx::query_scalar(&q).fetch_one(&mut *c).await
}

/// Starts partition k+1 when the live partition k is a span old. A live partition that is
/// missing (a roll whose transaction failed after moving the sequence: those rows went to the
/// default partition) is skipped over the same way.
async fn roll(pool: &Pool<Postgres>, t: &Table, now: Timestamp, span: Duration) -> StoreResult<()> {
    let mut tx = pool.begin().await?;
    if !locked(&mut tx).await? {
        return Ok(end(tx).await?);
    }
    let k = live(&mut tx, t).await?;
    let current = partition(t.parent, k);
    if exists(&mut tx, &current).await?
        && !retention::rolls(edge(&mut tx, &current, t, "MIN").await?, now, span)
    {
        return Ok(end(tx).await?);
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

/// What keeps a closed partition whose rows are all past the cutoff: an attempt in flight
/// (deliveries: a lease, whose expiry is due) or a delivery that refers to one of its events.
async fn holds(c: &mut sqlx::PgConnection, t: &Table, k: i64) -> Result<bool, sqlx::Error> {
    let q = match t.follower {
        Some(_) => format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE due_at IS NOT NULL AND lease_token IS NOT NULL)",
            partition(t.parent, k)
        ),
        None => format!(
            "SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE event_id >= {} AND event_id < {})",
            k << SHIFT,
            (k + 1) << SHIFT
        ),
    };
    sqlx::query_scalar(&q).fetch_one(&mut *c).await
}

/// The rows of a partition as its statistics estimate them (`pg_class.reltuples`, which
/// autovacuum's analyze keeps; a closed partition's no longer changes), counted only if it was
/// never analyzed: counting a day of ten million rows would read the whole partition (10 s in
/// `bench --scenario purge`) just before it goes.
async fn rows(c: &mut sqlx::PgConnection, table: &str) -> Result<u64, sqlx::Error> {
    let estimate: f32 =
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = $1::regclass")
            .bind(table)
            .fetch_one(&mut *c)
            .await?;
    if estimate >= 0.0 {
        return Ok(estimate.round() as u64);
    }
    let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&mut *c)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Whether partition k may go (`retention::droppable`).
async fn may_drop(
    c: &mut sqlx::PgConnection,
    t: &Table,
    k: i64,
    cutoff: Timestamp,
) -> Result<bool, sqlx::Error> {
    let newest = edge(c, &partition(t.parent, k), t, "MAX").await?;
    Ok(retention::droppable(newest, cutoff, holds(c, t, k).await?))
}

/// Drops partition k of `t` (deliveries: with their attempts' partition) if it is past
/// `cutoff`. Returns its rows, or `None` if it stays (or another instance dropped it meanwhile).
async fn drop_closed(
    pool: &Pool<Postgres>,
    t: &Table,
    k: i64,
    cutoff: Timestamp,
) -> StoreResult<Option<u64>> {
    match try_drop(pool, t, k, cutoff).await {
        Err(e) if undefined_table(&e) => Ok(None),
        r => Ok(r?),
    }
}

/// [`drop_closed`]: checked first without locks (and its rows estimated), then again under the
/// parents' locks, taken for the re-check and the `DROP TABLE` only.
async fn try_drop(
    pool: &Pool<Postgres>,
    t: &Table,
    k: i64,
    cutoff: Timestamp,
) -> Result<Option<u64>, sqlx::Error> {
    let table = partition(t.parent, k);
    let rows = {
        let mut c = pool.acquire().await?;
        if !may_drop(&mut c, t, k, cutoff).await? {
            return Ok(None);
        }
        rows(&mut c, &table).await?
    };
    let mut tx = pool.begin().await?;
    if !locked(&mut tx).await? || !exists(&mut tx, &table).await? {
        end(tx).await?;
        return Ok(None);
    }
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    // Deliveries: both parents, as the attempts' partition goes too. Events: a recovery that
    // read them holds the table until it has written its deliveries, which the re-check sees.
    let (parents, dropped) = match t.follower {
        Some(f) => (
            format!("{}, {f}", t.parent),
            format!("{}, {table}", partition(f, k)),
        ),
        None => (t.parent.to_owned(), table.clone()),
    };
    let lock = format!("LOCK TABLE {parents} IN ACCESS EXCLUSIVE MODE");
    if let Err(e) = sqlx::query(&lock).execute(&mut *tx).await {
        tracing::info!(error = %e, partition = table, "partition busy; dropped at a later purge");
        end(tx).await?;
        return Ok(None);
    }
    if !may_drop(&mut tx, t, k, cutoff).await? {
        end(tx).await?;
        return Ok(None);
    }
    sqlx::query(&format!("DROP TABLE IF EXISTS {dropped}"))
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
