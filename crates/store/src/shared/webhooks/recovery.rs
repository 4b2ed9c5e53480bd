//! Recoveries (jobs that re-queue an endpoint's missing events, a page per transaction),
//! bulk redelivery, and the event feed.

use std::collections::HashSet;
use std::sync::LazyLock;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::event_payload::event_data;
use super::super::fan_out::{NewDelivery, insert_delivery, insert_unordered_deliveries};
use super::{Backend, Conn, Db, dialect, push_in_list, sql};
use crate::StoreResult;
use crate::recovery::*;
use crate::webhooks::EventFilter;
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::webhooks::catalogue::subscribed;
use switchboard_domain::webhooks::delivery;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};

const SELECT_RECOVERY: &str =
    "SELECT r.uuid, r.org_id, ep.uuid AS endpoint_uuid, r.since, r.until, r.status,
        r.events_matched, r.deliveries_queued, r.error, r.created_at, r.completed_at
 FROM webhook_recoveries r JOIN webhook_endpoints ep ON ep.id = r.endpoint_id ";

/// A page's lease renewal (it locks the row).
static RENEW: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE webhook_recoveries SET lease_until = $1
         WHERE id = $2 AND lease_token = $3 AND status = {}
         RETURNING org_id, endpoint_id, since, until, cursor_at, cursor_id",
        sql::name(RecoveryStatus::Running.as_str())
    )
});

/// A recovery ends failed.
static FAIL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE webhook_recoveries SET status = {}, error = $1, completed_at = $2,
                lease_token = NULL, lease_until = NULL
         WHERE id = $3",
        sql::name(RecoveryStatus::Failed.as_str())
    )
});

/// A page's progress, completing the recovery after its last page.
static PROGRESS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE webhook_recoveries
         SET events_matched = events_matched + $1, deliveries_queued = deliveries_queued + $2,
             cursor_at = COALESCE($3, cursor_at), cursor_id = COALESCE($4, cursor_id),
             status = CASE WHEN $5 THEN {} ELSE status END,
             completed_at = CASE WHEN $6 THEN $7 ELSE completed_at END,
             lease_token = CASE WHEN $8 THEN NULL ELSE lease_token END,
             lease_until = CASE WHEN $9 THEN NULL ELSE lease_until END
         WHERE id = $10",
        sql::name(RecoveryStatus::Completed.as_str())
    )
});

/// The statuses of deliveries that cover their event: a recovery does not queue it again
/// (`delivery::recovery_requeues`).
static COVERING: LazyLock<String> =
    LazyLock::new(|| sql::statuses(|s| !delivery::recovery_requeues(s)));

/// A bulk retry's change (`delivery::bulk_retry`), up to its due time.
static BULK_RETRY_SET: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE webhook_deliveries SET status = {}, due_at = ",
        sql::status_case(delivery::bulk_retry)
    )
});

/// A bulk retry's choice, after the organization: the deliveries `delivery::bulk_retry`
/// takes, not in flight, whose endpoint is not deleted, and not held in a contact's chain.
static BULK_RETRY_WHERE: LazyLock<String> = LazyLock::new(|| {
    format!(
        " AND d.status NOT IN {} AND d.lease_token IS NULL AND ep.deleted_at IS NULL
          AND NOT (d.order_key IS NOT NULL AND d.due_at IS NULL AND d.status IN {})
          AND d.id > ",
        sql::statuses(|s| delivery::bulk_retry(s).is_none()),
        *sql::UNFINISHED
    )
});

#[derive(sqlx::FromRow)]
struct RecoveryRow {
    uuid: Uuid,
    org_id: i64,
    endpoint_uuid: Uuid,
    since: Timestamp,
    until: Timestamp,
    status: String,
    events_matched: i64,
    deliveries_queued: i64,
    error: Option<String>,
    created_at: Timestamp,
    completed_at: Option<Timestamp>,
}

impl From<RecoveryRow> for RecoveryRecord {
    fn from(r: RecoveryRow) -> Self {
        RecoveryRecord {
            uuid: r.uuid,
            org_id: r.org_id,
            endpoint_uuid: r.endpoint_uuid,
            since: r.since,
            until: r.until,
            status: r.status,
            events_matched: r.events_matched,
            deliveries_queued: r.deliveries_queued,
            error: r.error,
            created_at: r.created_at,
            completed_at: r.completed_at,
        }
    }
}

/// A recovery's progress, read under its lease.
#[derive(sqlx::FromRow)]
struct Progress {
    org_id: i64,
    endpoint_id: i64,
    since: Timestamp,
    until: Timestamp,
    cursor_at: Option<Timestamp>,
    cursor_id: Option<i64>,
}

/// The recovered endpoint, as a page needs it.
#[derive(sqlx::FromRow)]
struct Target {
    uuid: Uuid,
    events: Json<Vec<String>>,
    status: String,
    deleted_at: Option<Timestamp>,
    ordering: String,
    filter: Option<String>,
}

#[derive(sqlx::FromRow)]
struct WindowEvent {
    id: i64,
    name: String,
    data: Json<Value>,
    occurred_at: Timestamp,
    /// The envelope as delivered (NULL only for events written before it was kept).
    envelope: Option<String>,
}

/// Whether the endpoint's filter lets the event through. An event without a kept envelope
/// (written before envelopes were kept) cannot be judged and passes.
fn passes(filter: Option<&switchboard_domain::webhooks::filter::Filter>, e: &WindowEvent) -> bool {
    let (Some(filter), Some(text)) = (filter, e.envelope.as_deref()) else {
        return true;
    };
    serde_json::from_str::<Value>(text).map_or(true, |v| filter.matches(&v))
}

/// Appends the event filters (names, `ns.*`) as `AND (name = .. OR name LIKE 'ns.%' ..)`.
fn push_event_filters(qb: &mut QueryBuilder<'_, Db>, column: &str, events: &[EventFilter]) {
    if events.is_empty() {
        return;
    }
    qb.push(" AND (");
    for (i, f) in events.iter().enumerate() {
        if i > 0 {
            qb.push(" OR ");
        }
        match f {
            EventFilter::Exact(name) => {
                qb.push(column).push(" = ").push_bind(name.clone());
            }
            EventFilter::Namespace(ns) => {
                qb.push(column).push(" LIKE ").push_bind(format!("{ns}.%"));
            }
        }
    }
    qb.push(")");
}

#[async_trait]
impl RecoveryStore for Backend {
    async fn create_recovery(&self, new: NewRecovery) -> StoreResult<RecoveryRecord> {
        let mut tx = self.write().await?;
        let endpoint_id: i64 = sqlx::query_scalar(
            "SELECT id FROM webhook_endpoints WHERE org_id = $1 AND uuid = $2 AND deleted_at IS NULL AND NOT legacy",
        )
        .bind(new.org_id)
        .bind(new.endpoint_uuid)
        .fetch_one(&mut *tx)
        .await?;
        static INSERT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "INSERT INTO webhook_recoveries (uuid, org_id, endpoint_id, since, until, status, created_at)
                 VALUES ($1, $2, $3, $4, $5, {}, $6)",
                sql::name(RecoveryStatus::Running.as_str())
            )
        });
        sqlx::query(&INSERT)
            .bind(new.uuid)
            .bind(new.org_id)
            .bind(endpoint_id)
            .bind(new.since)
            .bind(new.until)
            .bind(new.now)
            .execute(&mut *tx)
            .await?;
        let sql = format!("{SELECT_RECOVERY} WHERE r.uuid = $1");
        let row: RecoveryRow = sqlx::query_as(&sql)
            .bind(new.uuid)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn get_recovery(
        &self,
        org_id: i64,
        endpoint_uuid: Uuid,
        uuid: Uuid,
    ) -> StoreResult<RecoveryRecord> {
        let sql = format!("{SELECT_RECOVERY} WHERE r.org_id = $1 AND ep.uuid = $2 AND r.uuid = $3");
        let row: RecoveryRow = sqlx::query_as(&sql)
            .bind(org_id)
            .bind(endpoint_uuid)
            .bind(uuid)
            .fetch_one(self.reader())
            .await?;
        Ok(row.into())
    }

    async fn claim_recovery(
        &self,
        token: Uuid,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> StoreResult<Option<ClaimedRecovery>> {
        let mut tx = self.write().await?;
        static NEXT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT id, uuid FROM webhook_recoveries
                 WHERE status = {} AND (lease_until IS NULL OR lease_until <= $1)
                 ORDER BY id LIMIT 1{}",
                sql::name(RecoveryStatus::Running.as_str()),
                dialect::SKIP_LOCKED
            )
        });
        let found: Option<(i64, Uuid)> = sqlx::query_as(&NEXT)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
        let Some((id, uuid)) = found else {
            tx.commit(Effects::none()).await?;
            return Ok(None);
        };
        sqlx::query(
            "UPDATE webhook_recoveries SET lease_token = $1, lease_until = $2 WHERE id = $3",
        )
        .bind(token)
        .bind(lease_until)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(Some(ClaimedRecovery { id, uuid, token }))
    }

    async fn recover_page(
        &self,
        claim: &ClaimedRecovery,
        page: i64,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> StoreResult<RecoveryStep> {
        let mut tx = self.write().await?;
        // Renew the lease (and lock the row): nothing is written unless the claim still holds.
        let progress: Option<Progress> = sqlx::query_as(&RENEW)
            .bind(lease_until)
            .bind(claim.id)
            .bind(claim.token)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(p) = progress else {
            tx.commit(Effects::none()).await?;
            return Ok(RecoveryStep::LeaseLost);
        };
        let target: Target = sqlx::query_as(
            "SELECT uuid, events, status, deleted_at, ordering, filter FROM webhook_endpoints WHERE id = $1",
        )
        .bind(p.endpoint_id)
        .fetch_one(&mut *tx)
        .await?;
        let failure = if target.deleted_at.is_some() {
            Some("The endpoint was deleted during the recovery.")
        } else if target.status != EndpointStatus::Active.as_str() {
            Some("The endpoint was disabled during the recovery; re-enable it and recover again.")
        } else {
            None
        };
        if let Some(reason) = failure {
            sqlx::query(&FAIL)
                .bind(reason)
                .bind(now)
                .bind(claim.id)
                .execute(&mut *tx)
                .await?;
            tx.commit(Effects::none()).await?;
            return Ok(RecoveryStep::Failed(reason.to_owned()));
        }

        let events = window_page(&mut tx, &p, page).await?;

        let patterns = target.events.0;
        let filter = super::super::fan_out::stored_filter(target.filter.as_deref());
        let matching: Vec<&WindowEvent> = events
            .iter()
            .filter(|e| subscribed(&patterns, &e.name))
            .filter(|e| !about_this_endpoint(e, target.uuid))
            .filter(|e| passes(filter.as_ref(), e))
            .collect();
        let ids: Vec<i64> = matching.iter().map(|e| e.id).collect();
        let have = covered(&mut tx, p.endpoint_id, &ids).await?;
        let ordering = EndpointOrdering::parse(&target.ordering).unwrap_or_default();
        let mut queued = 0i64;
        // Unordered deliveries in one statement; ordered ones one by one (each is numbered in
        // its contact's chain).
        let mut unordered = Vec::new();
        for e in matching.iter().filter(|e| !have.contains(&e.id)) {
            let d = NewDelivery {
                uuid: Uuid::now_v7(),
                org_id: p.org_id,
                event_id: e.id,
                endpoint_id: p.endpoint_id,
                event_name: &e.name,
                trigger: "recovery",
                order_key: ordering.order_key(&e.data.0),
                now,
            };
            if d.order_key.is_some() {
                insert_delivery(&mut tx, &d).await?;
            } else {
                unordered.push(d);
            }
            queued += 1;
        }
        insert_unordered_deliveries(&mut tx, &unordered).await?;
        if queued > 0 {
            tx.deliveries_scheduled();
        }
        let matched = i64::try_from(matching.len()).unwrap_or(i64::MAX);
        let done = i64::try_from(events.len()).unwrap_or(i64::MAX) < page;
        let last = events.last().map(|e| (e.occurred_at, e.id));
        sqlx::query(&PROGRESS)
            .bind(matched)
            .bind(queued)
            .bind(last.map(|l| l.0))
            .bind(last.map(|l| l.1))
            .bind(done)
            .bind(done)
            .bind(now)
            .bind(done)
            .bind(done)
            .bind(claim.id)
            .execute(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        Ok(if done {
            RecoveryStep::Completed { matched, queued }
        } else {
            RecoveryStep::Page { matched, queued }
        })
    }

    async fn retry_deliveries(
        &self,
        org_id: i64,
        filter: &BulkRetry,
        now: Timestamp,
        page: i64,
    ) -> StoreResult<u64> {
        let mut total = 0u64;
        let mut after = 0i64;
        loop {
            let mut tx = self.write().await?;
            let mut qb = QueryBuilder::<Db>::new(&*BULK_RETRY_SET);
            qb.push_bind(now)
                .push(", next_attempt_at = ")
                .push_bind(now)
                .push(", updated_at = ")
                .push_bind(now)
                .push(
                    ", trigger = 'manual'
                 WHERE id IN (
                     SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
                     WHERE d.org_id = ",
                )
                .push_bind(org_id)
                .push(&*BULK_RETRY_WHERE)
                .push_bind(after);
            if let Some(status) = filter.status {
                sql::push_status_filter(&mut qb, "d.status", status);
            }
            if let Some(e) = &filter.event {
                push_event_filters(&mut qb, "d.event_name", std::slice::from_ref(e));
            }
            if let Some(ep) = filter.endpoint_uuid {
                qb.push(" AND ep.uuid = ").push_bind(ep);
            }
            if let Some(since) = filter.since {
                qb.push(" AND d.created_at >= ").push_bind(since);
            }
            if let Some(until) = filter.until {
                qb.push(" AND d.created_at < ").push_bind(until);
            }
            qb.push(" ORDER BY d.id LIMIT ")
                .push_bind(page)
                .push(") RETURNING id");
            let ids: Vec<i64> = qb.build_query_scalar().fetch_all(&mut *tx).await?;
            if !ids.is_empty() {
                tx.deliveries_scheduled();
            }
            tx.commit(Effects::none()).await?;
            total += ids.len() as u64;
            match ids.iter().max() {
                Some(&max) if i64::try_from(ids.len()).unwrap_or(0) >= page => after = max,
                _ => return Ok(total),
            }
        }
    }

    async fn read_feed(
        &self,
        org_id: i64,
        after: FeedPosition,
        events: &[EventFilter],
        limit: i64,
    ) -> StoreResult<Vec<FeedItem>> {
        let mut qb = QueryBuilder::<Db>::new(dialect::FEED_SELECT);
        qb.push_bind(org_id);
        dialect::push_feed_after(&mut qb, after);
        push_event_filters(&mut qb, "name", events);
        qb.push(dialect::FEED_ORDER)
            .push(" LIMIT ")
            .push_bind(limit);
        let rows: Vec<FeedRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let envelope = match r.envelope {
                    Some(e) => e,
                    None => NewEvent {
                        uuid: r.uuid,
                        org_id: r.org_id,
                        name: r.name,
                        data: r.data.0,
                        channel: r.channel.map(|c| c.0),
                        occurred_at: r.occurred_at,
                        test: false,
                        sample: false,
                        trace: None,
                    }
                    .envelope_text(),
                };
                FeedItem {
                    position: FeedPosition {
                        txid: r.txid,
                        id: r.id,
                    },
                    envelope,
                }
            })
            .collect())
    }
}

#[derive(sqlx::FromRow)]
struct FeedRow {
    txid: i64,
    id: i64,
    envelope: Option<String>,
    uuid: Uuid,
    org_id: i64,
    name: String,
    data: Json<Value>,
    channel: Option<Json<ChannelIdentity>>,
    occurred_at: Timestamp,
}

/// A `webhook.*` event about this endpoint (its own failures) is never delivered to it.
fn about_this_endpoint(e: &WindowEvent, endpoint: Uuid) -> bool {
    e.name.starts_with("webhook.")
        && e.data
            .0
            .get("endpoint_uuid")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
            == Some(endpoint)
}

/// The next page of the recovery's window of events: the organization's (test events aside)
/// from `since` to `until`, after the cursor, oldest first.
async fn window_page(conn: &mut Conn, p: &Progress, page: i64) -> StoreResult<Vec<WindowEvent>> {
    let mut qb = QueryBuilder::<Db>::new(
        "SELECT id, name, data, occurred_at, envelope FROM events
         WHERE org_id = ",
    );
    // `NOT test` as the partial index `events_org_window` says it (a bound `false` would
    // not let the planner use it).
    qb.push_bind(p.org_id)
        .push(" AND NOT test AND name <> 'integration.test' AND occurred_at >= ")
        .push_bind(p.since)
        .push(" AND occurred_at < ")
        .push_bind(p.until);
    if let (Some(at), Some(id)) = (p.cursor_at, p.cursor_id) {
        qb.push(" AND (occurred_at, id) > (")
            .push_bind(at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    qb.push(" ORDER BY occurred_at, id LIMIT ").push_bind(page);
    let mut events: Vec<WindowEvent> = qb.build_query_as().fetch_all(&mut *conn).await?;
    for e in &mut events {
        let data = std::mem::take(&mut e.data.0);
        e.data.0 = event_data(data, e.envelope.as_deref())?;
    }
    Ok(events)
}

/// Which of `ids` already have a delivery to the endpoint that covers them (`COVERING`).
async fn covered(conn: &mut Conn, endpoint_id: i64, ids: &[i64]) -> StoreResult<HashSet<i64>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let mut qb =
        QueryBuilder::<Db>::new("SELECT event_id FROM webhook_deliveries WHERE endpoint_id = ");
    qb.push_bind(endpoint_id)
        .push(" AND status IN ")
        .push(&*COVERING)
        .push(" AND event_id");
    push_in_list(&mut qb, ids);
    let have = qb.build_query_scalar::<i64>().fetch_all(&mut *conn).await?;
    Ok(have.into_iter().collect())
}
