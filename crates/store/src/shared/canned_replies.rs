//! Canned replies.

use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{Backend, Db, push_page};
use crate::legacy::*;
use crate::{StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

const SELECT_CANNED: &str =
    "SELECT id, uuid, org_id, shortcut, text, created_at, updated_at FROM canned_replies ";

#[derive(sqlx::FromRow)]
struct CannedRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    shortcut: String,
    text: String,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<CannedRow> for CannedReplyRecord {
    fn from(r: CannedRow) -> Self {
        CannedReplyRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            shortcut: r.shortcut,
            text: r.text,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[async_trait]
impl CannedReplyStore for Backend {
    async fn create_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: &str,
        text: &str,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord> {
        let mut tx = self.write().await?;
        let row: CannedRow = sqlx::query_as(
            "INSERT INTO canned_replies (uuid, org_id, shortcut, text, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             RETURNING id, uuid, org_id, shortcut, text, created_at, updated_at",
        )
        .bind(uuid)
        .bind(org_id)
        .bind(shortcut)
        .bind(text)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn list_canned_replies(
        &self,
        org_id: i64,
        page: PageQuery,
    ) -> StoreResult<Vec<CannedReplyRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_CANNED);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<CannedRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn update_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: Option<&str>,
        text: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord> {
        let mut tx = self.write().await?;
        let row: Option<CannedRow> = sqlx::query_as(
            "UPDATE canned_replies SET shortcut = COALESCE($1, shortcut), text = COALESCE($2, text), updated_at = $3
             WHERE uuid = $4 AND org_id = $5
             RETURNING id, uuid, org_id, shortcut, text, created_at, updated_at",
        )
        .bind(shortcut)
        .bind(text)
        .bind(now)
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    async fn delete_canned_reply(&self, org_id: i64, uuid: Uuid) -> StoreResult<()> {
        let mut tx = self.write().await?;
        let done = sqlx::query("DELETE FROM canned_replies WHERE uuid = $1 AND org_id = $2")
            .bind(uuid)
            .bind(org_id)
            .execute(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
}
