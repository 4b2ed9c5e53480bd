use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::events::OrgEventRow;
use super::{Backend, Db};
use crate::{OrgEventQuery, OrgEventRecord, OrgLogStore, StoreResult};
use switchboard_domain::event::OrgEvent;
use switchboard_domain::org_log::{ActorFilter, TypeFilter};

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
    type Error = crate::StoreError;
    fn try_from(r: RecordRow) -> Result<Self, Self::Error> {
        Ok(OrgEventRecord {
            id: r.id,
            event: OrgEvent::try_from(r.event)?,
        })
    }
}

/// At most this many distinct types are walked for a prefix filter; beyond, the prefix is
/// matched by scanning the organization's log newest first.
const MAX_PREFIX_TYPES: usize = 64;

/// The exclusive upper bound of the strings that start with `prefix` (an ASCII prefix ending
/// with `.`): the prefix with its last byte incremented (`team.` -> `team/`).
fn prefix_upper(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    if let Some(last) = bytes.last_mut() {
        *last += 1;
    }
    String::from_utf8(bytes).expect("an ASCII prefix stays ASCII")
}

/// How the type is matched in one query.
enum TypeCondition<'a> {
    Any,
    Exact(&'a str),
    /// Fallback for prefixes with very many types: not indexed.
    Prefix(&'a str),
}

impl Backend {
    /// One query of the log with every filter but the type filter, which `types` replaces.
    async fn query_org_events_with(
        &self,
        org_id: i64,
        query: &OrgEventQuery,
        types: TypeCondition<'_>,
    ) -> StoreResult<Vec<OrgEventRecord>> {
        let f = &query.filter;
        let mut q: QueryBuilder<'_, Db> = QueryBuilder::new(SELECT_ORG_EVENTS);
        q.push("WHERE org_id = ").push_bind(org_id);
        if let Some(category) = f.category {
            q.push(" AND category = ").push_bind(category.as_str());
        }
        match types {
            TypeCondition::Any => {}
            TypeCondition::Exact(t) => {
                q.push(" AND type = ").push_bind(t.to_owned());
            }
            TypeCondition::Prefix(p) => {
                q.push(" AND type >= ")
                    .push_bind(p.to_owned())
                    .push(" AND type < ")
                    .push_bind(prefix_upper(p));
            }
        }
        match f.actor {
            Some(ActorFilter::ApiKey(Some(id))) => {
                q.push(" AND actor_key_id = ")
                    .push_bind(id)
                    .push(" AND actor_type = ")
                    .push_bind("api_key");
            }
            Some(actor) => {
                q.push(" AND actor_type = ").push_bind(actor.actor_type());
            }
            None => {}
        }
        if let Some(since) = f.since {
            q.push(" AND created_at >= ").push_bind(since);
        }
        if let Some(until) = f.until {
            q.push(" AND created_at < ").push_bind(until);
        }
        if let Some((at, id)) = query.before {
            q.push(" AND (created_at, id) < (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        q.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(query.limit);
        let rows: Vec<RecordRow> = q.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The distinct types of the organization's log that start with `prefix`, by a loose index
    /// scan of `org_events_org_type` (one index probe per type, however many entries each has).
    async fn org_event_types_with_prefix(
        &self,
        org_id: i64,
        prefix: &str,
    ) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "WITH RECURSIVE t(type) AS (
                 SELECT MIN(type) FROM org_events WHERE org_id = $1 AND type >= $2 AND type < $3
                 UNION ALL
                 SELECT (SELECT MIN(e.type) FROM org_events e
                         WHERE e.org_id = $1 AND e.type > t.type AND e.type < $3)
                 FROM t WHERE t.type IS NOT NULL
             )
             SELECT type FROM t WHERE type IS NOT NULL LIMIT $4",
        )
        .bind(org_id)
        .bind(prefix)
        .bind(prefix_upper(prefix))
        .bind(MAX_PREFIX_TYPES as i64 + 1)
        .fetch_all(self.reader())
        .await?)
    }
}

#[async_trait]
impl OrgLogStore for Backend {
    async fn query_org_events(
        &self,
        org_id: i64,
        query: &OrgEventQuery,
    ) -> StoreResult<Vec<OrgEventRecord>> {
        match &query.filter.event_type {
            None => {
                self.query_org_events_with(org_id, query, TypeCondition::Any)
                    .await
            }
            Some(TypeFilter::Exact(t)) => {
                self.query_org_events_with(org_id, query, TypeCondition::Exact(t))
                    .await
            }
            Some(TypeFilter::Prefix(p)) => {
                let types = self.org_event_types_with_prefix(org_id, p).await?;
                if types.len() > MAX_PREFIX_TYPES {
                    return self
                        .query_org_events_with(org_id, query, TypeCondition::Prefix(p))
                        .await;
                }
                // Each type newest first, then the newest `limit` of them all.
                let mut rows = Vec::new();
                for t in &types {
                    rows.extend(
                        self.query_org_events_with(org_id, query, TypeCondition::Exact(t))
                            .await?,
                    );
                }
                rows.sort_by_key(|r| std::cmp::Reverse((r.event.created_at, r.id)));
                rows.truncate(usize::try_from(query.limit).unwrap_or(0));
                Ok(rows)
            }
        }
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
