//! Seeding the large tables with the server stopped: bulk connections and the statements that
//! write pending deliveries and a long message history as the service writes them.

use super::*;

/// A SQLite connection for bulk writes, taken while no server runs: a rollback journal
/// instead of the WAL (a fresh table's pages are not journaled, where the WAL would hold every
/// one of them once more), no syncs, 1 GiB of page cache, and no foreign-key checks (every
/// reference is valid by construction). The server puts the database back in WAL mode.
pub(super) async fn sqlite_bulk(db: &Database) -> anyhow::Result<sqlx::SqliteConnection> {
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
pub(super) fn sqlite_sync(db: &Database) -> anyhow::Result<()> {
    std::fs::File::open(db.dir.path().join("bench.db"))?.sync_all()?;
    Ok(())
}

/// A PostgreSQL connection for bulk writes: no foreign-key triggers (every reference is valid
/// by construction; 10 million rows would queue 50 million trigger events).
pub(crate) async fn postgres_bulk(db: &Database) -> anyhow::Result<sqlx::PgConnection> {
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
pub(crate) async fn postgres_settle(
    c: &mut sqlx::PgConnection,
    tables: &[&str],
) -> anyhow::Result<()> {
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
pub(crate) fn uuid_sql(backend: Backend, ms: &str, n: &str, variant: char) -> String {
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
pub(crate) fn envelope_sql(n: &str) -> String {
    format!(
        "'{{\"event\":\"message.sent\",\"data\":{{\"n\":' || {n} || '}},\"metadata\":{{\"bench\":true}}}}'"
    )
}

/// Writes `n` `message.sent` events, one millisecond apart and ending an hour ago, and one
/// pending delivery each to the organization's endpoints in turn, in one transaction. The
/// deliveries are due at their event's time, as the fan-out writes them, or with `same_due`
/// all at once (now), as an endpoint's held deliveries are when it is enabled again. Returns
/// the endpoints' ids.
pub(super) async fn write_pending(
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
pub(super) struct Template {
    pub(super) id: i64,
    pub(super) org_id: i64,
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
pub(super) async fn write_messages(
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
pub(super) async fn database_mb(db: &Database, backend: Backend) -> Option<f64> {
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
