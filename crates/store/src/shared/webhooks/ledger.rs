//! The delivery ledger: deliveries with their attempts and events, manual retries, and the
//! purge of old deliveries and events.

use std::sync::LazyLock;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::event_payload::event_data;
use super::super::first_attempt;
use super::{Backend, Conn, Db, dialect, push_in_list, sql};
use crate::webhooks::*;
use crate::{StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::webhooks::delivery;

const SELECT_DELIVERIES: &str =
    "SELECT d.id, d.uuid, d.org_id, ev.uuid AS event_uuid, d.event_name, ep.uuid AS endpoint_uuid,
        d.status, d.attempts, d.response_status, d.error_code, d.error_message, d.next_attempt_at,
        d.last_attempt_at, d.delivered_at, d.created_at, d.updated_at, d.lease_token, d.trigger, d.sequence
 FROM webhook_deliveries d
 JOIN events ev ON ev.id = d.event_id
 LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id ";

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    event_uuid: Uuid,
    event_name: String,
    endpoint_uuid: Option<Uuid>,
    status: String,
    attempts: i64,
    response_status: Option<i64>,
    error_code: Option<String>,
    error_message: Option<String>,
    next_attempt_at: Option<Timestamp>,
    last_attempt_at: Option<Timestamp>,
    delivered_at: Option<Timestamp>,
    created_at: Timestamp,
    updated_at: Timestamp,
    lease_token: Option<Uuid>,
    trigger: String,
    sequence: Option<i64>,
}

fn delivery_status(s: &str) -> StoreResult<DeliveryStatus> {
    DeliveryStatus::parse(s)
        .ok_or_else(|| StoreError::Other(format!("unknown delivery status {s}")))
}

impl TryFrom<DeliveryRow> for DeliveryRecord {
    type Error = StoreError;
    fn try_from(r: DeliveryRow) -> StoreResult<Self> {
        Ok(DeliveryRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            event_uuid: r.event_uuid,
            event_name: r.event_name,
            endpoint_uuid: r.endpoint_uuid,
            status: delivery_status(&r.status)?,
            attempts: r.attempts,
            response_status: r.response_status,
            error_code: r.error_code,
            error_message: r.error_message,
            next_attempt_at: r.next_attempt_at,
            last_attempt_at: r.last_attempt_at,
            delivered_at: r.delivered_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
            in_flight: r.lease_token.is_some(),
            trigger: r.trigger,
            sequence: r.sequence,
        })
    }
}

async fn fetch_delivery(conn: &mut Conn, org_id: i64, uuid: Uuid) -> StoreResult<DeliveryRecord> {
    let sql = format!("{SELECT_DELIVERIES} WHERE d.org_id = $1 AND d.uuid = $2");
    let row: DeliveryRow = sqlx::query_as(&sql)
        .bind(org_id)
        .bind(uuid)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    number: i64,
    url: Option<String>,
    started_at: Timestamp,
    duration_ms: Option<i64>,
    response_status: Option<i64>,
    error_code: Option<String>,
    error_message: Option<String>,
    response_body_excerpt: Option<String>,
    signed_with: Option<String>,
}

#[async_trait]
impl LedgerStore for Backend {
    async fn list_deliveries(
        &self,
        org_id: i64,
        q: &DeliveryQuery,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_DELIVERIES);
        qb.push(" WHERE d.org_id = ").push_bind(org_id);
        if let Some(s) = q.status {
            sql::push_status_filter(&mut qb, "d.status", s);
        }
        match &q.event {
            Some(EventFilter::Exact(name)) => {
                qb.push(" AND d.event_name = ").push_bind(name.clone());
            }
            Some(EventFilter::Namespace(ns)) => {
                // Event names are [a-z_.]: a range on the prefix needs no LIKE escaping.
                qb.push(" AND d.event_name >= ")
                    .push_bind(format!("{ns}."))
                    .push(" AND d.event_name < ")
                    .push_bind(format!("{ns}/"));
            }
            None => {}
        }
        if let Some(ep) = q.endpoint_uuid {
            qb.push(" AND ep.uuid = ").push_bind(ep);
        }
        if let Some(t) = q.since {
            qb.push(" AND d.created_at >= ").push_bind(t);
        }
        if let Some(t) = q.until {
            qb.push(" AND d.created_at < ").push_bind(t);
        }
        if let Some((t, id)) = q.before {
            qb.push(" AND (d.created_at, d.id) < (")
                .push_bind(t)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        qb.push(" ORDER BY d.created_at DESC, d.id DESC LIMIT ")
            .push_bind(q.limit);
        let rows: Vec<DeliveryRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn get_delivery(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<(DeliveryRecord, Vec<AttemptRecord>, NewEvent)> {
        let mut conn = self.reader().acquire().await?;
        let d = fetch_delivery(&mut conn, org_id, uuid).await?;
        let attempts: Vec<AttemptRow> = sqlx::query_as(
            "SELECT number, url, started_at, duration_ms, response_status, error_code, error_message, response_body_excerpt,
                    signed_with
             FROM webhook_attempts WHERE delivery_id = $1 ORDER BY number, id",
        )
        .bind(d.id)
        .fetch_all(&mut *conn)
        .await?;
        let (name, data, channel, occurred_at, test, envelope): (
            String,
            Json<Value>,
            Option<Json<ChannelIdentity>>,
            Timestamp,
            bool,
            String,
        ) = sqlx::query_as(
            "SELECT ev.name, ev.data, ev.channel, ev.occurred_at, ev.test, ev.envelope FROM events ev
                 JOIN webhook_deliveries d ON d.event_id = ev.id WHERE d.id = $1",
        )
        .bind(d.id)
        .fetch_one(&mut *conn)
        .await?;
        let event = NewEvent {
            uuid: d.event_uuid,
            org_id: d.org_id,
            name,
            data: event_data(data.0, Some(&envelope))?,
            channel: channel.map(|c| c.0),
            occurred_at,
            test,
            // A triggered sample is marked in the envelope it was written with.
            sample: !test
                && serde_json::from_str::<Value>(&envelope)
                    .is_ok_and(|v| v["metadata"]["test"] == Value::Bool(true)),
            trace: None,
        };
        // A first attempt that succeeded at once is kept in the delivery row.
        let first: Option<String> =
            sqlx::query_scalar("SELECT first_attempt FROM webhook_deliveries WHERE id = $1")
                .bind(d.id)
                .fetch_one(&mut *conn)
                .await?;
        let first = first.as_deref().and_then(first_attempt::parse);
        let attempts = first
            .into_iter()
            .chain(attempts.into_iter().map(|a| AttemptRecord {
                number: a.number,
                url: a.url,
                started_at: a.started_at,
                duration_ms: a.duration_ms,
                response_status: a.response_status,
                error_code: a.error_code,
                error_message: a.error_message,
                response_body_excerpt: a.response_body_excerpt,
                signed_with: a.signed_with.and_then(|t| serde_json::from_str(&t).ok()),
            }))
            .collect();
        Ok((d, attempts, event))
    }

    async fn retry_delivery(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
    ) -> StoreResult<Result<DeliveryRecord, RetryRefusal>> {
        let mut tx = self.write().await?;
        let d = fetch_delivery(&mut tx, org_id, uuid).await?;
        let deleted: Option<Option<Timestamp>> = sqlx::query_scalar(
            "SELECT ep.deleted_at FROM webhook_endpoints ep JOIN webhook_deliveries d ON d.endpoint_id = ep.id
             WHERE d.id = $1",
        )
        .bind(d.id)
        .fetch_optional(&mut *tx)
        .await?;
        if matches!(deleted, Some(Some(_))) {
            return Ok(Err(RetryRefusal::EndpointDeleted));
        }
        if d.in_flight {
            // An attempt is under way (or its lease is about to be taken over): nothing to do.
            tx.commit(Effects::none()).await?;
            return Ok(Ok(d));
        }
        // The status changes as the domain says (`delivery::retry`).
        static RETRY: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE webhook_deliveries
                 SET status = {}, due_at = $1, next_attempt_at = $2, updated_at = $3
                 WHERE id = $4 AND lease_token IS NULL",
                sql::status_case(|s| Some(delivery::retry(s)))
            )
        });
        sqlx::query(&RETRY)
            .bind(now)
            .bind(now)
            .bind(now)
            .bind(d.id)
            .execute(&mut *tx)
            .await?;
        tx.deliveries_scheduled();
        let d = fetch_delivery(&mut tx, org_id, uuid).await?;
        tx.commit(Effects::none()).await?;
        Ok(Ok(d))
    }

    async fn purge_deliveries(&self, cutoff: Timestamp, batch: i64) -> StoreResult<(u64, u64)> {
        let (mut deliveries, mut events) = (0u64, 0u64);
        for (delivery_table, event_table) in dialect::row_purged(self.writer()).await? {
            deliveries += purge_delivery_rows(self, delivery_table, cutoff, batch).await?;
            let mut tx = self.write().await?;
            // The events oldest first, each checked for deliveries by the deliveries' event
            // index. (As `AND NOT EXISTS`, PostgreSQL planned a hash anti-join of both whole
            // tables for every batch: 4 s a batch with 10 million of each.)
            events += sqlx::query(&format!(
                "DELETE FROM {event_table} WHERE id IN (
                     SELECT e.id FROM {event_table} e WHERE e.occurred_at < $1
                       AND NOT (SELECT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id))
                     ORDER BY e.occurred_at LIMIT $2)"
            ))
            .bind(cutoff)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit(Effects::none()).await?;
        }
        Ok((deliveries, events))
    }

    async fn drop_expired_partitions(
        &self,
        now: Timestamp,
        cutoff: Timestamp,
        span: std::time::Duration,
    ) -> StoreResult<DroppedPartitions> {
        dialect::drop_expired_partitions(self.writer(), now, cutoff, span).await
    }

    async fn partition_for_retention(&self) -> StoreResult<bool> {
        dialect::partition_for_retention(self.writer()).await
    }
}

/// Deletes up to `batch` deliveries of `table` created before `cutoff` and not in flight, and
/// their attempts (no foreign key cascades on PostgreSQL, whose partitions are dropped alone).
/// Organization by organization, oldest first, from the `(org_id, created_at, id)` index: the
/// table keeps no index of its own by age (migration 0054).
async fn purge_delivery_rows(
    store: &Backend,
    table: &str,
    cutoff: Timestamp,
    batch: i64,
) -> StoreResult<u64> {
    let mut tx = store.write().await?;
    let orgs: Vec<i64> = sqlx::query_scalar(&format!(
        "{} SELECT id FROM orgs WHERE id IS NOT NULL",
        sql::orgs_of(table)
    ))
    .fetch_all(&mut *tx)
    .await?;
    let delete = format!(
        "DELETE FROM {table} WHERE id IN (
             SELECT id FROM {table} WHERE org_id = $1 AND created_at < $2 AND lease_token IS NULL
             ORDER BY created_at LIMIT $3)
         RETURNING id"
    );
    let mut ids: Vec<i64> = Vec::new();
    for org in orgs {
        let room = batch - ids.len() as i64;
        if room <= 0 {
            break;
        }
        ids.extend(
            sqlx::query_scalar::<_, i64>(&delete)
                .bind(org)
                .bind(cutoff)
                .bind(room)
                .fetch_all(&mut *tx)
                .await?,
        );
    }
    for chunk in ids.chunks(super::super::IN_LIST_CHUNK) {
        let mut qb = QueryBuilder::<Db>::new("DELETE FROM webhook_attempts WHERE delivery_id");
        push_in_list(&mut qb, chunk);
        qb.build().execute(&mut *tx).await?;
    }
    tx.commit(Effects::none()).await?;
    Ok(ids.len() as u64)
}
