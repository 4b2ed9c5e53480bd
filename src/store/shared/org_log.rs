use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::events::OrgEventRow;
use super::{Backend, Db};
use crate::domain::event::OrgEvent;
use crate::domain::org_log::{ActorFilter, TypeFilter};
use crate::store::{OrgEventQuery, OrgEventRecord, OrgLogStore, StoreResult};

const SELECT_ORG_EVENTS: &str =
    "SELECT id, uuid, org_id, type, category, actor_type, actor_key_id, actor_key_prefix,
        subject_type, subject_id, details, created_at
 FROM org_events ";

#[derive(sqlx::FromRow)]
struct RecordRow {
    id: i64,
    #[sqlx(flatten)]
    event: OrgEventRow,
}

impl TryFrom<RecordRow> for OrgEventRecord {
    type Error = crate::store::StoreError;
    fn try_from(r: RecordRow) -> Result<Self, Self::Error> {
        Ok(OrgEventRecord {
            id: r.id,
            event: OrgEvent::try_from(r.event)?,
        })
    }
}

#[async_trait]
impl OrgLogStore for Backend {
    async fn query_org_events(
        &self,
        org_id: i64,
        query: &OrgEventQuery,
    ) -> StoreResult<Vec<OrgEventRecord>> {
        let f = &query.filter;
        let mut q: QueryBuilder<Db> = QueryBuilder::new(SELECT_ORG_EVENTS);
        q.push("WHERE org_id = ").push_bind(org_id);
        if let Some(category) = f.category {
            q.push(" AND category = ").push_bind(category.as_str());
        }
        match &f.event_type {
            Some(TypeFilter::Exact(t)) => {
                q.push(" AND type = ").push_bind(t.clone());
            }
            Some(TypeFilter::Prefix(p)) => {
                // The prefix is ASCII (checked by TypeFilter::parse): bytes are characters.
                q.push(" AND substr(type, 1, ")
                    .push_bind(p.len() as i32)
                    .push(") = ")
                    .push_bind(p.clone());
            }
            None => {}
        }
        if let Some(actor) = f.actor {
            q.push(" AND actor_type = ").push_bind(actor.actor_type());
            if let ActorFilter::ApiKey(Some(id)) = actor {
                q.push(" AND actor_key_id = ").push_bind(id);
            }
        }
        if let Some(since) = f.since {
            q.push(" AND created_at >= ").push_bind(since);
        }
        if let Some(until) = f.until {
            q.push(" AND created_at < ").push_bind(until);
        }
        if let Some((at, id)) = query.before {
            q.push(" AND (created_at < ")
                .push_bind(at)
                .push(" OR (created_at = ")
                .push_bind(at)
                .push(" AND id < ")
                .push_bind(id)
                .push("))");
        }
        q.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(query.limit);
        let rows: Vec<RecordRow> = q.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn get_org_event(&self, org_id: i64, uuid: Uuid) -> StoreResult<OrgEventRecord> {
        let sql = format!("{SELECT_ORG_EVENTS} WHERE org_id = $1 AND uuid = $2");
        let row: RecordRow = sqlx::query_as(&sql)
            .bind(org_id)
            .bind(uuid)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }
}
