use async_trait::async_trait;

use super::Backend;
use crate::{Reseal, StoreError, StoreResult, SystemStore};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

/// Every column that holds a value sealed under the master key: (table, key column, sealed
/// column, associated data). A new sealed column must be added here, or master-key rotation
/// would leave it unreadable. NULL and empty values hold no secret (a deleted endpoint's
/// erased secret, a legacy webhook record, which has none) and are skipped.
const SEALED_COLUMNS: &[(&str, &str, &str, &[u8])] = &[
    (
        "channels",
        "id",
        "provider_config",
        switchboard_domain::sealed::AAD_PROVIDER_CONFIG,
    ),
    (
        "webhook_endpoints",
        "id",
        "signing_secret",
        switchboard_domain::sealed::AAD_SIGNING_SECRET,
    ),
    (
        "webhook_endpoints",
        "id",
        "target_secret",
        switchboard_domain::sealed::AAD_TARGET_URL,
    ),
    (
        "webhook_endpoints",
        "id",
        "auth_secret",
        switchboard_domain::sealed::AAD_AUTH_SECRET,
    ),
    (
        "webhook_endpoint_secrets",
        "id",
        "signing_secret",
        switchboard_domain::sealed::AAD_SIGNING_SECRET,
    ),
];

/// Bumps the configuration generation inside a transaction that changes keys or channels.
pub(crate) async fn bump_config_generation(
    conn: &mut <super::Db as sqlx::Database>::Connection,
) -> StoreResult<()> {
    sqlx::query("UPDATE config_generation SET value = value + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Backend {
    /// The migrations applied so far (version, description, execution time in nanoseconds);
    /// none before the first.
    async fn applied_migrations(&self) -> Vec<(i64, String, i64)> {
        sqlx::query_as(
            "SELECT version, description, execution_time FROM _sqlx_migrations ORDER BY version",
        )
        .fetch_all(self.reader())
        .await
        .unwrap_or_default()
    }
}

#[async_trait]
impl SystemStore for Backend {
    async fn migrate(&self) -> StoreResult<()> {
        let before = self.applied_migrations().await;
        self.run_migrations().await?;
        let known: std::collections::HashSet<i64> = before.iter().map(|m| m.0).collect();
        let after = self.applied_migrations().await;
        for (version, description, nanos) in after.iter().filter(|m| !known.contains(&m.0)) {
            tracing::info!(
                version,
                description = description.as_str(),
                duration_ms = nanos / 1_000_000,
                "migration applied"
            );
        }
        if after.len() == before.len() {
            tracing::info!(
                migrations = after.len(),
                "database schema up to date; no migration to apply"
            );
        }
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(self.reader()).await?;
        Ok(())
    }

    async fn probe_write(&self, now: Timestamp) -> StoreResult<()> {
        // 4 KiB that do not compress, so that the write needs room of its own.
        let payload: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO storage_probe (id, payload, probed_at) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, probed_at = excluded.probed_at",
        )
        .bind(payload)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        crate::health::succeeded();
        Ok(())
    }

    async fn get_setting(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
                .bind(key)
                .fetch_optional(self.reader())
                .await?,
        )
    }

    async fn init_setting(&self, key: &str, value: &[u8]) -> StoreResult<Vec<u8>> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(value)
        .execute(&mut *tx)
        .await?;
        let stored: Vec<u8> = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        Ok(stored)
    }

    fn backend(&self) -> &'static str {
        Backend::BACKEND
    }

    async fn config_generation(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(GENERATION)
            .fetch_one(self.reader())
            .await?)
    }

    fn generation_reader(&self) -> Box<dyn crate::GenerationReader> {
        Box::new(GenerationReader {
            pool: self.reader().clone(),
            kept: None,
        })
    }

    fn wakeups(&self) -> crate::Wakeups {
        self.start_wakeups()
    }

    fn handoff(&self) -> crate::handoff::Handoff {
        self.hooks.handoff.clone()
    }

    fn event_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.hooks.events.subscribe()
    }

    async fn reseal_secrets(
        &self,
        reseal: &Reseal,
        check_key: &str,
        new_check: &[u8],
    ) -> StoreResult<usize> {
        let mut tx = self.write().await?;
        let mut count = 0;
        for (table, key, column, aad) in SEALED_COLUMNS {
            let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(&format!(
                "SELECT {key}, {column} FROM {table}
                 WHERE {column} IS NOT NULL AND length({column}) > 0 ORDER BY {key}"
            ))
            .fetch_all(&mut *tx)
            .await?;
            for (id, sealed) in rows {
                let resealed = reseal(&sealed, aad).map_err(|e| {
                    StoreError::Conflict(format!("{table}.{column} of {key} {id}: {e}"))
                })?;
                sqlx::query(&format!(
                    "UPDATE {table} SET {column} = $1 WHERE {key} = $2"
                ))
                .bind(resealed)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                count += 1;
            }
        }
        sqlx::query("UPDATE settings SET value = $1 WHERE key = $2")
            .bind(new_check)
            .bind(check_key)
            .execute(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        Ok(count)
    }
}

const GENERATION: &str = "SELECT value FROM config_generation WHERE id = 1";

/// [`crate::GenerationReader`] on a pool of this backend.
struct GenerationReader {
    pool: sqlx::Pool<super::Db>,
    kept: Option<sqlx::pool::PoolConnection<super::Db>>,
}

#[async_trait]
impl crate::GenerationReader for GenerationReader {
    async fn read(&mut self) -> StoreResult<i64> {
        if let Some(mut conn) = self.kept.take() {
            if let Ok(generation) = sqlx::query_scalar(GENERATION).fetch_one(&mut *conn).await {
                self.keep(conn);
                return Ok(generation);
            }
            // A kept connection that failed (a restarted database, say) is closed (in the
            // background), not returned, and the read made again on one the pool checks.
            conn.close_on_drop();
        }
        let mut conn = self.pool.acquire().await?;
        let generation = sqlx::query_scalar(GENERATION).fetch_one(&mut *conn).await?;
        self.keep(conn);
        Ok(generation)
    }
}

impl GenerationReader {
    /// Keeps the connection for the next read, unless the pool has no idle connection left
    /// (others may be waiting for one).
    fn keep(&mut self, conn: sqlx::pool::PoolConnection<super::Db>) {
        if self.pool.num_idle() > 0 {
            self.kept = Some(conn);
        }
    }
}
