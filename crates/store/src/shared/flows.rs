//! Flows.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Backend, Db, push_page};
use crate::StoreResult;
use crate::legacy::*;
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

const SELECT_FLOWS: &str =
    "SELECT id, uuid, org_id, name, channel_id, action, active, created_at, updated_at FROM flows ";

#[derive(sqlx::FromRow)]
struct FlowRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    name: String,
    channel_id: i64,
    action: Json<Value>,
    active: bool,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<FlowRow> for FlowRecord {
    fn from(r: FlowRow) -> Self {
        FlowRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            name: r.name,
            channel_id: r.channel_id,
            action: r.action.0,
            active: r.active,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[async_trait]
impl FlowStore for Backend {
    async fn create_flow(&self, new: NewFlow) -> StoreResult<FlowRecord> {
        let mut tx = self.write().await?;
        let row: FlowRow = sqlx::query_as(
            "INSERT INTO flows (uuid, org_id, name, channel_id, action, active, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
             RETURNING id, uuid, org_id, name, channel_id, action, active, created_at, updated_at",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(&new.name)
        .bind(new.channel_id)
        .bind(Json(&new.action))
        .bind(new.active)
        .bind(new.now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn find_flow(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<FlowRecord>> {
        let row: Option<FlowRow> =
            sqlx::query_as(&format!("{SELECT_FLOWS} WHERE uuid = $1 AND org_id = $2"))
                .bind(uuid)
                .bind(org_id)
                .fetch_optional(self.reader())
                .await?;
        Ok(row.map(Into::into))
    }

    async fn list_flows(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<FlowRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_FLOWS);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<FlowRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}
