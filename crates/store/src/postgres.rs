//! The PostgreSQL backend: the production store, shared by several `serve` instances.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Pool, Postgres, Transaction};

use super::{StoreError, StoreResult};

pub(super) type Db = Postgres;
pub(super) type Backend = PgStore;

/// PostgreSQL storage.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: Pool<Postgres>,
    pub(super) hooks: super::Hooks,
    /// The group committers of sends' records (`shared::group_commit`).
    pub(super) group: shared::GroupSlot,
}

impl PgStore {
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Other(format!("invalid PostgreSQL URL: {e}")))?
            .application_name("switchboard")
            .statement_cache_capacity(256);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .idle_timeout(Duration::from_secs(300))
            .test_before_acquire(true)
            .connect_with(options)
            .await?;
        Ok(PgStore {
            pool,
            hooks: Default::default(),
            group: Default::default(),
        })
    }

    /// The pool (for readers and for LISTEN connections).
    pub fn pool(&self) -> &Pool<Postgres> {
        &self.pool
    }

    pub(super) fn reader(&self) -> &Pool<Postgres> {
        &self.pool
    }

    /// The pool of the dispatcher's read-backs (PostgreSQL: the pool; its buffers are shared).
    pub(super) fn dispatch_reader(&self) -> &Pool<Postgres> {
        &self.pool
    }

    /// For one-statement writes outside a transaction.
    pub(super) fn writer(&self) -> &Pool<Postgres> {
        &self.pool
    }

    pub(super) async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        Ok(self.pool.begin().await?)
    }

    /// Applies the migrations on a connection of their own that does not log slow statements:
    /// a migration is one long statement by nature, and sqlx's warning would repeat its whole
    /// text. Each applied migration is logged on one line instead (`SystemStore::migrate`).
    pub(super) async fn run_migrations(&self) -> StoreResult<()> {
        use sqlx::ConnectOptions;
        let options = (*self.pool.connect_options())
            .clone()
            .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(3600));
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let result = sqlx::migrate!("migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| StoreError::Other(format!("migration failed: {e}")));
        pool.close().await;
        result
    }

    pub(super) const BACKEND: &'static str = "postgres";

    /// PostgreSQL: this process's commits, and every instance's through `LISTEN` on a
    /// connection of its own (made with the pool's options), reconnecting every 2 s while the
    /// database is unreachable. Deliveries committed while not listening are found by the
    /// dispatcher's poll, and a reconnection wakes it once.
    pub(super) fn start_wakeups(&self) -> super::Wakeups {
        let signal = self.hooks.outbox.clone();
        let pool = self.pool.clone();
        let wake = signal.clone();
        let events = self.hooks.events.clone();
        let task = tokio::spawn(async move {
            let mut reconnect = false;
            loop {
                match sqlx::postgres::PgListener::connect_with(&pool).await {
                    Ok(mut listener) => match listener.listen(dialect::DELIVERIES_CHANNEL).await {
                        Ok(()) => {
                            tracing::debug!("listening for webhook deliveries of other instances");
                            if reconnect {
                                // Deliveries committed while the listener was away.
                                wake.notify_one();
                            }
                            loop {
                                if let Err(e) = listener.recv().await {
                                    tracing::warn!(error = %e, "lost the PostgreSQL LISTEN connection; reconnecting");
                                    break;
                                }
                                wake.notify_one();
                                events.send_modify(|n| *n = n.wrapping_add(1));
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot LISTEN for webhook deliveries")
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot connect to LISTEN for webhook deliveries")
                    }
                }
                reconnect = true;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        super::Wakeups {
            signal,
            _listener: Some(std::sync::Arc::new(super::ListenerTask(task))),
        }
    }
}

/// Statements whose text differs between the backends.
pub(super) mod dialect {
    /// Group committers of sends' records: two, so that one group is written while the other
    /// commits (bench sends/s with 1, 2 and 4 committers: 944, 1 120 and 1 053; docs/benchmarks.md).
    pub const GROUP_COMMITTERS: usize = 2;
    /// Each committer keeps its connection between its transactions (`group_commit::Kept`).
    pub const KEEP_COMMITTER_CONNECTION: bool = true;
    /// How a write transaction begins.
    pub const BEGIN_WRITE: &str = "BEGIN";

    /// Serializes changes to one organization's rows (slug derivation, default channel).
    pub const LOCK_ORG: &str = "SELECT id FROM organizations WHERE id = $1 FOR UPDATE";

    /// An idempotency record, locked for the rest of the claim transaction.
    pub const SELECT_IDEMPOTENCY_FOR_UPDATE: &str =
        "SELECT id, fingerprint, state, locked_until, response_status, response_body, response_format, expires_at
         FROM idempotency_records WHERE api_key_id = $1 AND idempotency_key = $2 FOR UPDATE";
    /// Appended to the dispatcher's claim query: rows another instance is claiming are skipped.
    pub const SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";
    /// Whether statements on fast-growing tables keep their plan in the connection's plan
    /// cache: no (see `record_successes`): a plan cached on an empty table scans the whole table
    /// once it has filled.
    pub const CACHE_GROWING_PLANS: bool = false;
    /// Whether a multi-row statement by delivery ids also states their range (`id BETWEEN min
    /// AND max`): yes, so that on partitioned tables (`partitions.rs`) a plan made for the
    /// execution opens only the partitions that hold them (one, mostly) instead of joining
    /// every partition's primary key; on plain tables the range is one more index condition.
    pub const BOUND_IDS: bool = true;

    /// Appends ` = ANY($n)`: a list of row ids as one array parameter, so that a statement has
    /// one text whatever the list's length (with `IN ($1, ..., $n)` every length was a prepared
    /// statement of its own in each connection's cache). PostgreSQL still plans it for its
    /// values at most executions (`pg_stat_statements`), and such a plan prunes the partitions
    /// of a partitioned table (`partitions.rs`) to those the ids are in.
    ///
    /// One id is ` = $n`, a text of its own: a look-up by primary key, whose generic plan costs
    /// what a custom one does, so PostgreSQL keeps it in the connection's cache after five
    /// executions instead of planning every one (a light load's outcomes are one delivery
    /// each: 124 to 142 µs of planning a call for the deliveries' read, 53 for their events';
    /// `tools/light-load` with `pg_stat_statements`). A cached plan prunes partitions when it
    /// starts.
    pub fn push_id_list(qb: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>, ids: &[i64]) {
        match ids {
            [id] => qb.push(" = ").push_bind(*id),
            _ => qb.push(" = ANY(").push_bind(ids.to_vec()).push(")"),
        };
    }
    /// Appended to a SELECT that locks one endpoint row for the rest of the transaction
    /// (without blocking inserts of deliveries that reference it).
    pub const FOR_NO_KEY_UPDATE: &str = " FOR NO KEY UPDATE";
    /// The notification channel of committed deliveries (see `PgStore::start_wakeups`).
    pub const DELIVERIES_CHANNEL: &str = "switchboard_deliveries";
    /// Wakes the dispatchers of every instance (`LISTEN switchboard_deliveries`) on commit.
    pub const NOTIFY_DELIVERIES: &str = "SELECT pg_notify('switchboard_deliveries', '')";
    /// Locks a delivery chain's row for the rest of the transaction, so that a delivery written
    /// while its predecessor ends waits for that decision (see `chains`).
    pub const LOCK_CHAIN: &str = "UPDATE delivery_chains SET next_sequence = next_sequence WHERE endpoint_id = $1 AND order_key = $2";
    /// The event feed, in (writing transaction, id) order, serving only events whose
    /// transaction is older than the oldest one still running (the snapshot's xmin): an event
    /// whose transaction has not committed yet is never passed, so a cursor never skips it.
    /// Filters and the order follow.
    pub const FEED_SELECT: &str = "SELECT feed_txid::text::bigint AS txid, id, envelope, uuid, org_id, name, data, channel, occurred_at
         FROM events WHERE NOT test AND name <> 'integration.test'
           AND feed_txid < pg_snapshot_xmin(pg_current_snapshot()) AND org_id = ";
    pub const FEED_ORDER: &str = " ORDER BY feed_txid, id";

    /// Retention by partition (`postgres/partitions.rs`), once the tables are converted.
    pub(crate) use super::partitions::{
        convert as partition_for_retention, drop_expired as drop_expired_partitions, row_purged,
    };

    /// The feed's position condition: after (txid, id).
    pub fn push_feed_after(
        qb: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>,
        after: crate::recovery::FeedPosition,
    ) {
        qb.push(" AND (feed_txid, id) > (")
            .push_bind(after.txid)
            .push("::text::xid8, ")
            .push_bind(after.id)
            .push(")");
    }
}

mod partitions;

#[allow(clippy::duplicate_mod)]
#[path = "shared/mod.rs"]
mod shared;
