use std::sync::Arc;

use async_trait::async_trait;

use super::Backend;
use crate::store::{StoreResult, SystemStore};

#[async_trait]
impl SystemStore for Backend {
    async fn migrate(&self) -> StoreResult<()> {
        self.run_migrations().await
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(self.reader()).await?;
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
        let mut tx = self.begin().await?;
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
        tx.commit().await?;
        Ok(stored)
    }

    fn backend(&self) -> &'static str {
        Backend::BACKEND
    }

    fn outbox_signal(&self) -> Arc<tokio::sync::Notify> {
        self.hooks.outbox_signal()
    }
}
