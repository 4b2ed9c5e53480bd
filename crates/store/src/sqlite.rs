//! The SQLite backend: the embedded default.
//!
//! * WAL journal, `synchronous=NORMAL`, foreign keys on, a generous busy timeout.
//! * One writer connection: every write transaction in this process queues for it, and each
//!   starts with `BEGIN IMMEDIATE`, so a transaction that reads before it writes never fails
//!   with "database is locked" (it takes the write lock up front; other processes, such as the
//!   admin tools, wait on the busy timeout).
//! * A pool of reader connections for everything that only reads.
//! * WAL checkpoints off the writer's path: a task checkpoints (`PASSIVE`) on a reader
//!   connection every [`CHECKPOINT_INTERVAL`], so that a commit rarely reaches the automatic
//!   checkpoint (raised to [`AUTOCHECKPOINT_PAGES`], the safety net if the task falls behind),
//!   which would copy the WAL into the database and sync it inside that commit.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Sqlite, Transaction};

use super::{StoreError, StoreResult};

pub(super) type Db = Sqlite;
pub(super) type Backend = SqliteStore;

/// How often the background task checkpoints the WAL (see the module's documentation).
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);
/// The WAL size, in pages, at which a commit checkpoints by itself (SQLite's default is 1 000).
const AUTOCHECKPOINT_PAGES: u32 = 16_384;
/// The task leaves a WAL file smaller than this alone: SQLite's default automatic checkpoint
/// size (1 000 pages of 4 KiB), so that a quiet instance (a new database holds about 1 MB of
/// WAL after its migrations) opens no connection for it. From this size on (the file keeps its
/// largest size) it checkpoints at every interval.
const CHECKPOINT_MIN_WAL_BYTES: u64 = 1_000 * 4_096;

/// SQLite storage.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: Pool<Sqlite>,
    reader: Pool<Sqlite>,
    /// One connection for the dispatcher's read-backs of handed deliveries (`read_handed`):
    /// they read the large, growing tables (deliveries, events), and on the shared readers
    /// every connection's page cache would fill with their pages (2 MB each, 16 readers).
    dispatch_reader: Pool<Sqlite>,
    pub(super) hooks: super::Hooks,
    /// The group committers of sends' records (`shared::group_commit`).
    pub(super) group: shared::GroupSlot,
    /// Dropped with the last clone of the store: stops the checkpoint task.
    _checkpointer: std::sync::Arc<tokio::sync::oneshot::Sender<()>>,
}

/// Checkpoints the WAL (`wal`, the `-wal` file) every [`CHECKPOINT_INTERVAL`] on a reader
/// connection until the store is dropped (`stopped` resolves) or its pools are closed, once the
/// file has reached [`CHECKPOINT_MIN_WAL_BYTES`]. `PASSIVE` copies what it can without waiting
/// for readers or the writer; the writer keeps committing meanwhile.
async fn checkpoint_wal(
    reader: Pool<Sqlite>,
    wal: std::path::PathBuf,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let start = tokio::time::Instant::now() + CHECKPOINT_INTERVAL;
    let mut tick = tokio::time::interval_at(start, CHECKPOINT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tick.tick() => {}
        }
        if reader.is_closed() {
            return;
        }
        let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if size < CHECKPOINT_MIN_WAL_BYTES {
            continue;
        }
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&reader)
            .await
        {
            if matches!(e, sqlx::Error::PoolClosed) {
                return;
            }
            tracing::debug!(error = %e, "WAL checkpoint failed; the next one retries");
        }
    }
}

/// Whether the writer connection goes back to the pool (`false`: it is closed, and the next
/// write opens a new one). A transaction dropped without a commit leaves a `ROLLBACK` queued on
/// its connection; that `ROLLBACK` fails when SQLite already rolled the transaction back by
/// itself (it may, after `SQLITE_FULL` or an I/O error), and the connection would stay at a
/// transaction depth of one for good: every later `BEGIN` would be refused ("attempted to call
/// begin_with at non-zero transaction depth"), every write would fail until a restart. So a
/// connection still in a transaction after its queued rollback ran is discarded. A committed
/// transaction's connection is not in one and costs nothing here.
async fn discard_if_in_transaction(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // The queued rollback runs before the ping (the connection's commands run in order).
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!(
            "the writer connection could not roll its transaction back; it is replaced by a new one"
        );
        return Ok(false);
    }
    Ok(true)
}

impl SqliteStore {
    pub async fn connect(path: &Path, readers: u32) -> StoreResult<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create directory {}: {e}", dir.display()))
            })?;
        }
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(|e| StoreError::Other(format!("invalid SQLite path {}: {e}", path.display())))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30))
            .pragma("temp_store", "memory")
            .pragma("wal_autocheckpoint", AUTOCHECKPOINT_PAGES.to_string())
            .statement_cache_capacity(256);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .after_release(|conn, _| Box::pin(discard_if_in_transaction(conn)))
            .connect_with(options.clone())
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(readers.clamp(1, 64))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone().read_only(false))
            .await?;
        let dispatch_reader = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(options);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        tokio::spawn(checkpoint_wal(reader.clone(), wal.into(), stopped));
        Ok(SqliteStore {
            writer,
            reader,
            dispatch_reader,
            hooks: Default::default(),
            group: Default::default(),
            _checkpointer: std::sync::Arc::new(stop),
        })
    }

    /// The pool for reads.
    pub(super) fn reader(&self) -> &Pool<Sqlite> {
        &self.reader
    }

    /// The pool of the dispatcher's read-backs (one connection: see `dispatch_reader`).
    pub(super) fn dispatch_reader(&self) -> &Pool<Sqlite> {
        &self.dispatch_reader
    }

    /// The single writer connection, for one-statement writes outside a transaction.
    pub(super) fn writer(&self) -> &Pool<Sqlite> {
        &self.writer
    }

    /// A write transaction: `BEGIN IMMEDIATE` on the single writer connection.
    pub(super) async fn begin(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with(dialect::BEGIN_WRITE).await?)
    }

    pub(super) async fn run_migrations(&self) -> StoreResult<()> {
        sqlx::migrate!("migrations/sqlite")
            .run(&self.writer)
            .await
            .map_err(|e| StoreError::Other(format!("migration failed: {e}")))
    }

    pub(super) const BACKEND: &'static str = "sqlite";

    /// SQLite: this process's commits only (other processes' deliveries are found by the
    /// dispatcher's poll).
    pub(super) fn start_wakeups(&self) -> super::Wakeups {
        super::Wakeups {
            signal: self.hooks.outbox.clone(),
            _listener: None,
        }
    }
}

/// Statements whose text differs between the backends.
pub(super) mod dialect {
    /// Group committers of sends' records: one writer connection serializes every write, so one committer.
    pub const GROUP_COMMITTERS: usize = 1;
    /// The one writer connection is never kept by a committer: other writes need it too.
    pub const KEEP_COMMITTER_CONNECTION: bool = false;
    /// How a write transaction begins: taking the write lock at once.
    pub const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

    /// Serializes changes to one organization's rows (SQLite: writers are serialized anyway).
    pub const LOCK_ORG: &str = "SELECT id FROM organizations WHERE id = $1";

    /// An idempotency record, locked for the rest of the claim transaction (SQLite: the writer is exclusive anyway).
    pub const SELECT_IDEMPOTENCY_FOR_UPDATE: &str =
        "SELECT id, fingerprint, state, locked_until, response_status, response_body, response_format, expires_at
         FROM idempotency_records WHERE api_key_id = $1 AND idempotency_key = $2";
    /// Appended to the dispatcher's claim query (SQLite: writers are serialized, `BEGIN
    /// IMMEDIATE` makes the claim atomic across processes).
    pub const SKIP_LOCKED: &str = "";
    /// Whether statements on fast-growing tables keep their prepared statement: yes (the stale
    /// plans were PostgreSQL's, whose plan cache keeps the table size of the moment a plan was
    /// made; SQLite keeps preparing once per connection).
    pub const CACHE_GROWING_PLANS: bool = true;
    /// Whether a multi-row statement by delivery ids also states their range: no (SQLite's
    /// tables are not partitioned, and the range could lead its planner off the primary key).
    pub const BOUND_IDS: bool = false;

    /// Appends ` IN (?, ?, ...)`: a list of row ids.
    pub fn push_id_list(qb: &mut sqlx::QueryBuilder<'_, sqlx::Sqlite>, ids: &[i64]) {
        qb.push(" IN (");
        let mut sep = qb.separated(", ");
        for id in ids {
            sep.push_bind(*id);
        }
        sep.push_unseparated(")");
    }
    /// Appended to a SELECT that locks one endpoint row for the rest of the transaction.
    pub const FOR_NO_KEY_UPDATE: &str = "";
    /// Wakes the dispatchers of other instances when deliveries are written (none on SQLite:
    /// they poll).
    pub const NOTIFY_DELIVERIES: &str = "";
    /// Locks a delivery chain's row for the rest of the transaction: nothing on SQLite, whose
    /// one writer already serializes every decision about a chain.
    pub const LOCK_CHAIN: &str = "";
    /// The event feed: one writer, so ids are in commit order and the id is the position
    /// (`$2` is the position's txid, always 0 here). Filters and the order follow.
    pub const FEED_SELECT: &str =
        "SELECT 0 AS txid, id, envelope, uuid, org_id, name, data, channel, occurred_at
         FROM events WHERE NOT test AND name <> 'integration.test' AND org_id = ";
    pub const FEED_ORDER: &str = " ORDER BY id";

    /// The feed's position condition.
    pub fn push_feed_after(
        qb: &mut sqlx::QueryBuilder<'_, sqlx::Sqlite>,
        after: crate::recovery::FeedPosition,
    ) {
        qb.push(" AND id > ").push_bind(after.id);
    }

    /// The tables whose rows the purge deletes one by one: SQLite's are not partitioned.
    pub async fn row_purged(
        _: &sqlx::Pool<sqlx::Sqlite>,
    ) -> crate::StoreResult<&'static [(&'static str, &'static str)]> {
        Ok(&[("webhook_deliveries", "events")])
    }

    /// Retention by partition is PostgreSQL's: SQLite's purge deletes rows in batches.
    pub async fn partition_for_retention(_: &sqlx::Pool<sqlx::Sqlite>) -> crate::StoreResult<bool> {
        Err(crate::StoreError::Conflict(
            "retention by partition needs PostgreSQL; SQLite's purge deletes expired rows in batches".into(),
        ))
    }

    /// Retention by partition: SQLite has none (the purge deletes rows).
    pub async fn drop_expired_partitions(
        _: &sqlx::Pool<sqlx::Sqlite>,
        _: switchboard_domain::Timestamp,
        _: switchboard_domain::Timestamp,
        _: std::time::Duration,
    ) -> crate::StoreResult<crate::webhooks::DroppedPartitions> {
        Ok(Default::default())
    }
}

#[allow(clippy::duplicate_mod)]
#[path = "shared/mod.rs"]
mod shared;

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite may roll a transaction back by itself (after `SQLITE_FULL`, say); the transaction
    /// then dropped queues a `ROLLBACK` that fails. The writer connection is replaced rather
    /// than kept at a transaction depth of one, so the next write begins as usual.
    #[tokio::test]
    async fn a_writer_left_in_a_transaction_is_replaced() {
        let dir = std::env::temp_dir().join(format!("sb-writer-{}", uuid::Uuid::new_v4()));
        let store = SqliteStore::connect(&dir.join("db.sqlite"), 1)
            .await
            .unwrap();
        {
            let mut tx = store.begin().await.unwrap();
            // Ends the transaction behind sqlx's back, as SQLite does after some errors.
            sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
        }
        for _ in 0..3 {
            let mut tx = store
                .begin()
                .await
                .expect("a write begins on a sound connection");
            sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Statements on tables that grow with use find their rows by key, not by scanning the
    /// table: the multi-row `UPDATE ... FROM (VALUES ...)` statements by primary key, the
    /// campaign worker's claim through its partial index. SQLite has no statistics here
    /// (nothing runs `ANALYZE`), so its plans depend on the statement and the schema alone; a
    /// term the planner misjudged made the idempotency completion scan the whole table for every
    /// group (`shared::completions::push_complete_many`), and an index that did not give the
    /// claim's order made it walk every recipient already sent (`shared::campaigns`).
    #[tokio::test]
    async fn statements_on_growing_tables_use_their_keys() {
        let dir = std::env::temp_dir().join(format!("sb-plans-{}", uuid::Uuid::new_v4()));
        let store = SqliteStore::connect(&dir.join("db.sqlite"), 1)
            .await
            .unwrap();
        store.run_migrations().await.unwrap();
        let mut conn = store.writer().acquire().await.unwrap();
        let plans = shared::plans::explain_statements(&mut conn).await.unwrap();
        assert_eq!(plans.len(), 3);
        for (name, expected, lines) in plans {
            assert!(
                lines.iter().any(|l| l == expected),
                "{name}: the plan lacks `{expected}`: {lines:?}"
            );
            // A bare `SCAN t` reads the whole table (`SCAN v`, the VALUES, is the statement's own).
            assert!(
                lines.iter().all(|l| !l.starts_with("SCAN")
                    || l.contains("USING")
                    || l == "SCAN v"
                    || l.contains("VALUES")),
                "{name}: a table is scanned whole: {lines:?}"
            );
        }
        drop(conn);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The background task copies the WAL into the database file: with the automatic checkpoint
    /// far above what is written here, only the task can make the database file grow.
    #[tokio::test]
    async fn the_wal_is_checkpointed_off_the_writers_path() {
        let dir = std::env::temp_dir().join(format!("sb-checkpoint-{}", uuid::Uuid::new_v4()));
        let path = dir.join("db.sqlite");
        let store = SqliteStore::connect(&path, 2).await.unwrap();
        sqlx::query("CREATE TABLE filler (b BLOB NOT NULL)")
            .execute(store.writer())
            .await
            .unwrap();
        // About 6 MB through the WAL, over the task's threshold and far under the automatic one.
        for _ in 0..24 {
            sqlx::query("INSERT INTO filler (b) VALUES (randomblob(262144))")
                .execute(store.writer())
                .await
                .unwrap();
        }
        let db_size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while db_size() < 6_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the WAL was not checkpointed: database file {} bytes",
                db_size()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
