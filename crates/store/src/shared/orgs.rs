use async_trait::async_trait;
use uuid::Uuid;

use super::Backend;
use crate::{OrgStore, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;
use switchboard_domain::organization::Organization;

#[derive(sqlx::FromRow)]
struct OrgRow {
    id: i64,
    uuid: Uuid,
    name: String,
    created_at: Timestamp,
}

impl From<OrgRow> for Organization {
    fn from(r: OrgRow) -> Self {
        Organization {
            id: r.id,
            uuid: r.uuid,
            name: r.name,
            created_at: r.created_at,
        }
    }
}

#[async_trait]
impl OrgStore for Backend {
    async fn create_org(&self, name: &str, now: Timestamp) -> StoreResult<Organization> {
        let mut tx = self.write().await?;
        let row: OrgRow = sqlx::query_as(
            "INSERT INTO organizations (uuid, name, created_at) VALUES ($1, $2, $3)
             RETURNING id, uuid, name, created_at",
        )
        .bind(Uuid::now_v7())
        .bind(name)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn get_org(&self, id: i64) -> StoreResult<Organization> {
        let row: OrgRow =
            sqlx::query_as("SELECT id, uuid, name, created_at FROM organizations WHERE id = $1")
                .bind(id)
                .fetch_one(self.reader())
                .await?;
        Ok(row.into())
    }

    async fn list_orgs(&self) -> StoreResult<Vec<Organization>> {
        let rows: Vec<OrgRow> =
            sqlx::query_as("SELECT id, uuid, name, created_at FROM organizations ORDER BY id")
                .fetch_all(self.reader())
                .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}
