//! Webhook endpoints, the fan-out of outbox events into deliveries, the dispatcher's claims
//! and outcomes, and the delivery ledger.

use std::collections::{BTreeMap, HashMap, HashSet};

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Backend, Db, dialect, push_in_list};
use crate::webhooks::*;
use crate::{EffectsFn, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::webhooks::catalogue::{INTEGRATION_TEST, subscribed};
use switchboard_domain::webhooks::delivery::{self, EndpointHealth};
use switchboard_domain::webhooks::endpoint::EndpointStatus;

type Conn = <Db as sqlx::Database>::Connection;

// ---------------------------------------------------------------------------------------------
// Fan-out: called by `write_effects_tx` for every outbox event.

/// An active endpoint, as the fan-out needs it.
struct Target {
    id: i64,
    uuid: Uuid,
    url: String,
    events: Vec<String>,
}

/// The state of one `write_effects_tx` call: each organization's active endpoints are loaded
/// once, and how many deliveries were written (to wake the dispatchers).
#[derive(Default)]
pub(crate) struct FanOut {
    targets: HashMap<i64, Vec<Target>>,
    deliveries: usize,
}

impl FanOut {
    async fn targets(&mut self, conn: &mut Conn, org_id: i64) -> StoreResult<&[Target]> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.targets.entry(org_id) {
            let rows: Vec<(i64, Uuid, String, Json<Vec<String>>)> = sqlx::query_as(
                "SELECT id, uuid, url, events FROM webhook_endpoints
                 WHERE org_id = $1 AND status = 'active' AND deleted_at IS NULL ORDER BY legacy, id",
            )
            .bind(org_id)
            .fetch_all(&mut *conn)
            .await?;
            slot.insert(
                rows.into_iter()
                    .map(|(id, uuid, url, events)| Target {
                        id,
                        uuid,
                        url,
                        events: events.0,
                    })
                    .collect(),
            );
        }
        Ok(&self.targets[&org_id])
    }

    /// How many deliveries were written.
    pub(crate) fn deliveries(&self) -> usize {
        self.deliveries
    }
}

/// The form of a URL used to tell whether two targets are the same: parsed and re-serialized
/// (lower-case host, default port dropped), without the fragment.
fn url_key(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

async fn insert_event_row(conn: &mut Conn, e: &NewEvent) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
    )
    .bind(e.uuid)
    .bind(e.org_id)
    .bind(&e.name)
    .bind(Json(&e.data))
    .bind(e.channel.as_ref().map(Json))
    .bind(e.occurred_at)
    .fetch_one(&mut *conn)
    .await?)
}

async fn insert_delivery(
    conn: &mut Conn,
    uuid: Uuid,
    org_id: i64,
    event_id: i64,
    endpoint_id: i64,
    event_name: &str,
    now: Timestamp,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, attempts,
                                         due_at, next_attempt_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $7, $8, $9)",
    )
    .bind(uuid)
    .bind(org_id)
    .bind(event_id)
    .bind(endpoint_id)
    .bind(event_name)
    .bind(now)
    .bind(now)
    .bind(now)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Inserts an outbox event and one delivery per active endpoint of its organization whose
/// subscriptions match, one per distinct URL (unified dispatch, specification 6.2.2): modern
/// endpoints come before legacy records, so a URL that both hold gets the modern (signed)
/// delivery, and several records with one URL get one delivery. `integration.test` events are delivered only by
/// the test operation; a `webhook.*` event about an endpoint never goes to that endpoint.
pub(crate) async fn insert_event(
    conn: &mut Conn,
    e: &NewEvent,
    fan: &mut FanOut,
) -> StoreResult<()> {
    let event_id = insert_event_row(conn, e).await?;
    if e.name == INTEGRATION_TEST {
        return Ok(());
    }
    let exclude = if e.name.starts_with("webhook.") {
        e.data
            .get("endpoint_uuid")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
    } else {
        None
    };
    let mut chosen: Vec<i64> = Vec::new();
    let mut urls = HashSet::new();
    for t in fan.targets(conn, e.org_id).await? {
        if Some(t.uuid) == exclude || !subscribed(&t.events, &e.name) {
            continue;
        }
        if urls.insert(url_key(&t.url)) {
            chosen.push(t.id);
        }
    }
    for endpoint_id in chosen {
        insert_delivery(
            conn,
            Uuid::now_v7(),
            e.org_id,
            event_id,
            endpoint_id,
            &e.name,
            e.occurred_at,
        )
        .await?;
        fan.deliveries += 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Rows

macro_rules! select_endpoints {
    ($rest:literal) => {
        concat!(
            "SELECT id, uuid, org_id, name, url, events, headers, signing_secret, status, disabled_reason,
                    disabled_at, consecutive_failures, created_at, updated_at, legacy
             FROM webhook_endpoints ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct EndpointRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    name: String,
    url: String,
    events: Json<Vec<String>>,
    headers: Json<BTreeMap<String, String>>,
    signing_secret: Vec<u8>,
    status: String,
    disabled_reason: Option<String>,
    disabled_at: Option<Timestamp>,
    consecutive_failures: i64,
    created_at: Timestamp,
    updated_at: Timestamp,
    legacy: bool,
}

fn endpoint_status(s: &str) -> StoreResult<EndpointStatus> {
    EndpointStatus::parse(s)
        .ok_or_else(|| StoreError::Other(format!("unknown endpoint status {s}")))
}

impl TryFrom<EndpointRow> for EndpointRecord {
    type Error = StoreError;
    fn try_from(r: EndpointRow) -> StoreResult<Self> {
        Ok(EndpointRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            name: r.name,
            url: r.url,
            events: r.events.0,
            headers: r.headers.0,
            sealed_secret: r.signing_secret,
            status: endpoint_status(&r.status)?,
            disabled_reason: r.disabled_reason,
            disabled_at: r.disabled_at,
            consecutive_failures: r.consecutive_failures,
            created_at: r.created_at,
            updated_at: r.updated_at,
            legacy: r.legacy,
        })
    }
}

async fn fetch_endpoint(conn: &mut Conn, org_id: i64, uuid: Uuid) -> StoreResult<EndpointRecord> {
    let row: EndpointRow = sqlx::query_as(select_endpoints!(
        "WHERE org_id = $1 AND uuid = $2 AND deleted_at IS NULL"
    ))
    .bind(org_id)
    .bind(uuid)
    .fetch_one(&mut *conn)
    .await?;
    row.try_into()
}

const SELECT_DELIVERIES: &str =
    "SELECT d.id, d.uuid, d.org_id, ev.uuid AS event_uuid, d.event_name, ep.uuid AS endpoint_uuid,
        d.status, d.attempts, d.response_status, d.error_code, d.error_message, d.next_attempt_at,
        d.last_attempt_at, d.delivered_at, d.created_at, d.updated_at, d.lease_token
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
}

async fn insert_attempt(conn: &mut Conn, delivery_id: i64, a: &AttemptRecord) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO webhook_attempts (delivery_id, number, url, started_at, duration_ms, response_status, error_code,
                                       error_message, response_body_excerpt)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(delivery_id)
    .bind(a.number)
    .bind(&a.url)
    .bind(a.started_at)
    .bind(a.duration_ms)
    .bind(a.response_status)
    .bind(&a.error_code)
    .bind(&a.error_message)
    .bind(&a.response_body_excerpt)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Holds (stops) the unfinished deliveries of a disabled endpoint that are not in flight.
async fn hold_deliveries(conn: &mut Conn, endpoint_id: i64, now: Timestamp) -> StoreResult<()> {
    sqlx::query(
        "UPDATE webhook_deliveries SET due_at = NULL, next_attempt_at = NULL, updated_at = $1
         WHERE endpoint_id = $2 AND status IN ('pending', 'retrying') AND lease_token IS NULL",
    )
    .bind(now)
    .bind(endpoint_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Schedules the held deliveries of a re-enabled endpoint now. Returns how many.
async fn resume_deliveries(conn: &mut Conn, endpoint_id: i64, now: Timestamp) -> StoreResult<u64> {
    let done = sqlx::query(
        "UPDATE webhook_deliveries SET due_at = $1, next_attempt_at = $2, updated_at = $3
         WHERE endpoint_id = $4 AND status IN ('pending', 'retrying') AND due_at IS NULL",
    )
    .bind(now)
    .bind(now)
    .bind(now)
    .bind(endpoint_id)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Pushes `IN ($a, $b, ...)` for a non-empty list.
#[derive(sqlx::FromRow)]
struct CandidateRow {
    id: i64,
    endpoint_id: Option<i64>,
    attempts: i64,
    lease_token: Option<Uuid>,
    last_attempt_at: Option<Timestamp>,
}

#[derive(sqlx::FromRow)]
struct ClaimRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    attempts: i64,
    event_uuid: Uuid,
    event_org_id: i64,
    event_name: String,
    event_data: Json<Value>,
    event_channel: Option<Json<ChannelIdentity>>,
    occurred_at: Timestamp,
    ep_id: Option<i64>,
    ep_uuid: Option<Uuid>,
    ep_url: Option<String>,
    ep_headers: Option<Json<BTreeMap<String, String>>>,
    ep_secret: Option<Vec<u8>>,
    ep_status: Option<String>,
    ep_deleted_at: Option<Timestamp>,
    ep_legacy: Option<bool>,
}

#[derive(sqlx::FromRow)]
struct LeasedRow {
    id: i64,
    org_id: i64,
    uuid: Uuid,
    event_uuid: Uuid,
    endpoint_id: Option<i64>,
    event_name: String,
    attempts: i64,
    lease_token: Option<Uuid>,
}

#[derive(sqlx::FromRow)]
struct HealthRow {
    uuid: Uuid,
    name: String,
    url: String,
    status: String,
    deleted_at: Option<Timestamp>,
    consecutive_failures: i64,
    legacy: bool,
}

impl TryFrom<HealthRow> for EndpointHealth {
    type Error = StoreError;
    fn try_from(r: HealthRow) -> StoreResult<Self> {
        Ok(EndpointHealth {
            uuid: r.uuid,
            name: r.name,
            url: r.url,
            status: endpoint_status(&r.status)?,
            deleted: r.deleted_at.is_some(),
            consecutive_failures: r.consecutive_failures,
            legacy: r.legacy,
        })
    }
}

/// The health of an endpoint, locked for the rest of the transaction.
async fn lock_health(conn: &mut Conn, id: i64) -> StoreResult<Option<EndpointHealth>> {
    let sql = format!(
        "SELECT uuid, name, url, status, deleted_at, consecutive_failures, legacy
         FROM webhook_endpoints WHERE id = $1{}",
        dialect::FOR_NO_KEY_UPDATE
    );
    let row: Option<HealthRow> = sqlx::query_as(&sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(TryInto::try_into).transpose()
}

/// Splits the outcomes still leased (`order`) into plain successes (a 2xx whose endpoint's
/// failure count is zero, or which has no endpoint) and the rest, keeping the order of the
/// rest. The failure counts are read without a lock: a failure committed after this read
/// serializes after this batch, so leaving its count alone is correct.
async fn split_plain_successes(
    conn: &mut Conn,
    outcomes: &[AttemptOutcome],
    leased: &HashMap<i64, LeasedRow>,
    order: Vec<usize>,
) -> StoreResult<(Vec<usize>, Vec<usize>)> {
    let successes = |i: &usize| matches!(outcomes[*i].disposition, Disposition::Delivered);
    let mut endpoint_ids: Vec<i64> = order
        .iter()
        .filter(|i| successes(i))
        .filter_map(|&i| leased[&outcomes[i].delivery_id].endpoint_id)
        .collect();
    endpoint_ids.sort_unstable();
    endpoint_ids.dedup();
    let failing: HashSet<i64> = if endpoint_ids.is_empty() {
        HashSet::new()
    } else {
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT id FROM webhook_endpoints WHERE consecutive_failures <> 0 AND id",
        );
        push_in_list(&mut qb, &endpoint_ids);
        qb.build_query_scalar::<i64>()
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect()
    };
    Ok(order.into_iter().partition(|i| {
        successes(i)
            && leased[&outcomes[*i].delivery_id]
                .endpoint_id
                .is_none_or(|e| !failing.contains(&e))
    }))
}

/// Rows per statement when recording successes together (well under both backends' limits
/// on bound parameters).
const SUCCESS_CHUNK: usize = 64;

/// Records plain successes (`which`, indexes into `outcomes`) with one `UPDATE ... FROM
/// (VALUES ...)` and one multi-row attempt insert per chunk, each delivery only while its
/// claim still holds it. Returns the indexes recorded.
async fn record_successes(
    conn: &mut Conn,
    outcomes: &[AttemptOutcome],
    which: &[usize],
) -> StoreResult<Vec<usize>> {
    let mut recorded = Vec::with_capacity(which.len());
    for chunk in which.chunks(SUCCESS_CHUNK) {
        let mut qb = QueryBuilder::<Db>::new(
            "UPDATE webhook_deliveries SET status = 'delivered', due_at = NULL, next_attempt_at = NULL,
                    lease_token = NULL, response_status = v.column3, error_code = NULL, error_message = NULL,
                    delivered_at = v.column4, updated_at = v.column4
             FROM (",
        );
        qb.push_values(chunk, |mut row, &i| {
            let o = &outcomes[i];
            row.push_bind(o.delivery_id)
                .push_bind(o.token)
                .push_bind(o.attempt.response_status)
                .push_bind(o.now);
        });
        qb.push(
            ") AS v WHERE webhook_deliveries.id = v.column1 AND webhook_deliveries.lease_token = v.column2
             RETURNING webhook_deliveries.id",
        );
        let done: HashSet<i64> = qb
            .build_query_scalar::<i64>()
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .collect();
        let kept: Vec<usize> = chunk
            .iter()
            .copied()
            .filter(|&i| done.contains(&outcomes[i].delivery_id))
            .collect();
        if kept.is_empty() {
            continue;
        }
        let mut qb = QueryBuilder::<Db>::new(
            "INSERT INTO webhook_attempts (delivery_id, number, url, started_at, duration_ms, response_status,
                                           error_code, error_message, response_body_excerpt) ",
        );
        qb.push_values(&kept, |mut row, &i| {
            let (id, a) = (outcomes[i].delivery_id, &outcomes[i].attempt);
            row.push_bind(id)
                .push_bind(a.number)
                .push_bind(a.url.clone())
                .push_bind(a.started_at)
                .push_bind(a.duration_ms)
                .push_bind(a.response_status)
                .push_bind(a.error_code.clone())
                .push_bind(a.error_message.clone())
                .push_bind(a.response_body_excerpt.clone());
        });
        qb.build().execute(&mut *conn).await?;
        recorded.extend(kept);
    }
    Ok(recorded)
}

/// Records one outcome inside a batch (its delivery is still leased by the outcome's claim and
/// its endpoint row is locked): applies the transition the domain decides
/// (`delivery::after_attempt`). `endpoint` is updated as the outcome changes it, for the next
/// outcomes of the batch. Returns what was recorded and the effects to write.
async fn record_one(
    conn: &mut Conn,
    o: &AttemptOutcome,
    d: &LeasedRow,
    endpoint: Option<(i64, &mut EndpointHealth)>,
) -> StoreResult<(AttemptRecorded, Effects)> {
    let a = &o.attempt;
    let t = delivery::after_attempt(
        &delivery::Delivery {
            org_id: d.org_id,
            uuid: d.uuid,
            event_uuid: d.event_uuid,
            event_name: &d.event_name,
            attempts: d.attempts,
        },
        endpoint.as_ref().map(|(_, health)| &**health),
        &delivery::Attempt {
            disposition: o.disposition,
            response_status: a.response_status,
            error_code: a.error_code.as_deref(),
            error_message: a.error_message.as_deref(),
        },
        o.disable_after,
        o.now,
    );
    let done = sqlx::query(
        "UPDATE webhook_deliveries SET status = $1, due_at = $2, next_attempt_at = $3, lease_token = NULL,
                response_status = $4, error_code = $5, error_message = $6, delivered_at = $7, updated_at = $8
         WHERE id = $9 AND lease_token = $10",
    )
    .bind(t.status.as_str())
    .bind(t.next_attempt_at)
    .bind(t.next_attempt_at)
    .bind(a.response_status)
    .bind(&t.error_code)
    .bind(&t.error_message)
    .bind(t.delivered_at)
    .bind(o.now)
    .bind(o.delivery_id)
    .bind(o.token)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        return Ok((AttemptRecorded::LeaseLost, Effects::none()));
    }
    insert_attempt(conn, o.delivery_id, a).await?;
    if let Some((id, health)) = endpoint {
        if let Some(failures) = t.consecutive_failures {
            sqlx::query("UPDATE webhook_endpoints SET consecutive_failures = $1 WHERE id = $2")
                .bind(failures)
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        if let Some(reason) = &t.disabled_reason {
            sqlx::query(
                "UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = $1, disabled_at = $2,
                        updated_at = $3
                 WHERE id = $4 AND status = 'active'",
            )
            .bind(reason)
            .bind(o.now)
            .bind(o.now)
            .bind(id)
            .execute(&mut *conn)
            .await?;
            hold_deliveries(conn, id, o.now).await?;
        }
        health.apply(&t);
    }
    Ok((
        AttemptRecorded::Done {
            status: t.status,
            endpoint_disabled: t.disabled_reason.is_some(),
        },
        t.effects,
    ))
}

#[async_trait]
impl WebhookStore for Backend {
    async fn create_endpoint(
        &self,
        new: NewEndpoint,
        effects: EffectsFn<'_, EndpointRecord>,
    ) -> StoreResult<EndpointRecord> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO webhook_endpoints (uuid, org_id, name, url, events, headers, signing_secret, status,
                                            disabled_reason, disabled_at, consecutive_failures, created_at, updated_at,
                                            legacy)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, $11, $12, $13)",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(&new.name)
        .bind(&new.url)
        .bind(Json(&new.events))
        .bind(Json(&new.headers))
        .bind(&new.sealed_secret)
        .bind(new.status.as_str())
        .bind((new.status == EndpointStatus::Disabled).then_some("disabled when created"))
        .bind((new.status == EndpointStatus::Disabled).then_some(new.now))
        .bind(new.now)
        .bind(new.now)
        .bind(new.legacy)
        .execute(&mut *tx)
        .await?;
        let record = fetch_endpoint(&mut tx, new.org_id, new.uuid).await?;
        tx.commit(effects(&record)).await?;
        Ok(record)
    }

    async fn list_endpoints(
        &self,
        org_id: i64,
        legacy: bool,
        before: Option<(Timestamp, i64)>,
        limit: i64,
    ) -> StoreResult<Vec<EndpointRecord>> {
        let mut qb =
            QueryBuilder::<Db>::new(select_endpoints!("WHERE deleted_at IS NULL AND org_id = "));
        qb.push_bind(org_id);
        qb.push(" AND legacy = ").push_bind(legacy);
        if let Some((t, id)) = before {
            qb.push(" AND (created_at < ")
                .push_bind(t)
                .push(" OR (created_at = ")
                .push_bind(t)
                .push(" AND id < ")
                .push_bind(id)
                .push("))");
        }
        qb.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(limit);
        let rows: Vec<EndpointRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn get_endpoint(&self, org_id: i64, uuid: Uuid) -> StoreResult<EndpointRecord> {
        let row: EndpointRow = sqlx::query_as(select_endpoints!(
            "WHERE org_id = $1 AND uuid = $2 AND deleted_at IS NULL"
        ))
        .bind(org_id)
        .bind(uuid)
        .fetch_one(self.reader())
        .await?;
        row.try_into()
    }

    async fn update_endpoint(
        &self,
        org_id: i64,
        uuid: Uuid,
        patch: EndpointPatch,
        now: Timestamp,
        effects: EffectsFn<'_, (EndpointRecord, EndpointRecord)>,
    ) -> StoreResult<EndpointRecord> {
        let mut tx = self.write().await?;
        // Lock the endpoint first (the dispatcher takes endpoint, then delivery locks too).
        let lock = format!(
            "SELECT id FROM webhook_endpoints WHERE org_id = $1 AND uuid = $2 AND deleted_at IS NULL{}",
            dialect::FOR_NO_KEY_UPDATE
        );
        let _: i64 = sqlx::query_scalar(&lock)
            .bind(org_id)
            .bind(uuid)
            .fetch_one(&mut *tx)
            .await?;
        let old = fetch_endpoint(&mut tx, org_id, uuid).await?;
        let EndpointPatch {
            name,
            url,
            events,
            headers,
            status,
            disabled_reason,
            sealed_secret,
        } = patch;
        let name = name.unwrap_or_else(|| old.name.clone());
        let url = url.unwrap_or_else(|| old.url.clone());
        let events = events.unwrap_or_else(|| old.events.clone());
        let headers = headers.unwrap_or_else(|| old.headers.clone());
        let secret = sealed_secret.unwrap_or_else(|| old.sealed_secret.clone());
        let (status, reason, disabled_at, failures) = match status {
            Some(EndpointStatus::Active) => (EndpointStatus::Active, None, None, 0),
            Some(EndpointStatus::Disabled) if old.status == EndpointStatus::Active => (
                EndpointStatus::Disabled,
                Some(disabled_reason.unwrap_or_else(|| "disabled through the API".into())),
                Some(now),
                old.consecutive_failures,
            ),
            _ => (
                old.status,
                old.disabled_reason.clone(),
                old.disabled_at,
                old.consecutive_failures,
            ),
        };
        // `updated_at` moves only when something changed (a PUT of nothing, or of the current
        // values, leaves the endpoint as it was).
        let changed = name != old.name
            || url != old.url
            || events != old.events
            || headers != old.headers
            || secret != old.sealed_secret
            || status != old.status
            || reason != old.disabled_reason
            || failures != old.consecutive_failures;
        let updated_at = if changed { now } else { old.updated_at };
        sqlx::query(
            "UPDATE webhook_endpoints SET name = $1, url = $2, events = $3, headers = $4, signing_secret = $5,
                    status = $6, disabled_reason = $7, disabled_at = $8, consecutive_failures = $9, updated_at = $10
             WHERE id = $11",
        )
        .bind(&name)
        .bind(&url)
        .bind(Json(&events))
        .bind(Json(&headers))
        .bind(&secret)
        .bind(status.as_str())
        .bind(&reason)
        .bind(disabled_at)
        .bind(failures)
        .bind(updated_at)
        .bind(old.id)
        .execute(&mut *tx)
        .await?;
        if status == EndpointStatus::Disabled && old.status == EndpointStatus::Active {
            hold_deliveries(&mut tx, old.id, now).await?;
        }
        if status == EndpointStatus::Active && resume_deliveries(&mut tx, old.id, now).await? > 0 {
            tx.deliveries_scheduled();
        }
        let new = fetch_endpoint(&mut tx, org_id, uuid).await?;
        tx.commit(effects(&(old, new.clone()))).await?;
        Ok(new)
    }

    async fn delete_endpoint(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
        effects: EffectsFn<'_, EndpointRecord>,
    ) -> StoreResult<()> {
        let mut tx = self.write().await?;
        let lock = format!(
            "SELECT id FROM webhook_endpoints WHERE org_id = $1 AND uuid = $2 AND deleted_at IS NULL{}",
            dialect::FOR_NO_KEY_UPDATE
        );
        let _: i64 = sqlx::query_scalar(&lock)
            .bind(org_id)
            .bind(uuid)
            .fetch_one(&mut *tx)
            .await?;
        let old = fetch_endpoint(&mut tx, org_id, uuid).await?;
        sqlx::query(
            "UPDATE webhook_endpoints SET deleted_at = $1, updated_at = $2, status = 'disabled',
                    disabled_reason = 'deleted', signing_secret = $3
             WHERE id = $4",
        )
        .bind(now)
        .bind(now)
        .bind(Vec::<u8>::new())
        .bind(old.id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE webhook_deliveries SET status = 'failed', due_at = NULL, next_attempt_at = NULL,
                    error_code = $1, error_message = $2, updated_at = $3
             WHERE endpoint_id = $4 AND status IN ('pending', 'retrying') AND lease_token IS NULL",
        )
        .bind(delivery::ENDPOINT_DELETED)
        .bind(delivery::ENDPOINT_DELETED_MESSAGE)
        .bind(now)
        .bind(old.id)
        .execute(&mut *tx)
        .await?;
        tx.commit(effects(&old)).await?;
        Ok(())
    }

    async fn create_test_delivery(
        &self,
        org_id: i64,
        endpoint_uuid: Uuid,
        event: NewEvent,
        delivery_uuid: Uuid,
    ) -> StoreResult<Uuid> {
        let mut tx = self.write().await?;
        let endpoint = fetch_endpoint(&mut tx, org_id, endpoint_uuid).await?;
        let event_id = insert_event_row(&mut tx, &event).await?;
        insert_delivery(
            &mut tx,
            delivery_uuid,
            org_id,
            event_id,
            endpoint.id,
            &event.name,
            event.occurred_at,
        )
        .await?;
        tx.deliveries_scheduled();
        tx.commit(Effects::none()).await?;
        Ok(delivery_uuid)
    }

    async fn list_deliveries(
        &self,
        org_id: i64,
        q: &DeliveryQuery,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_DELIVERIES);
        qb.push(" WHERE d.org_id = ").push_bind(org_id);
        if let Some(s) = q.status {
            qb.push(" AND d.status = ").push_bind(s.as_str());
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
            qb.push(" AND (d.created_at < ")
                .push_bind(t)
                .push(" OR (d.created_at = ")
                .push_bind(t)
                .push(" AND d.id < ")
                .push_bind(id)
                .push("))");
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
            "SELECT number, url, started_at, duration_ms, response_status, error_code, error_message, response_body_excerpt
             FROM webhook_attempts WHERE delivery_id = $1 ORDER BY number, id",
        )
        .bind(d.id)
        .fetch_all(&mut *conn)
        .await?;
        let (name, data, channel, occurred_at): (
            String,
            Json<Value>,
            Option<Json<ChannelIdentity>>,
            Timestamp,
        ) = sqlx::query_as(
            "SELECT ev.name, ev.data, ev.channel, ev.occurred_at FROM events ev
                 JOIN webhook_deliveries d ON d.event_id = ev.id WHERE d.id = $1",
        )
        .bind(d.id)
        .fetch_one(&mut *conn)
        .await?;
        let event = NewEvent {
            uuid: d.event_uuid,
            org_id: d.org_id,
            name,
            data: data.0,
            channel: channel.map(|c| c.0),
            occurred_at,
        };
        let attempts = attempts
            .into_iter()
            .map(|a| AttemptRecord {
                number: a.number,
                url: a.url,
                started_at: a.started_at,
                duration_ms: a.duration_ms,
                response_status: a.response_status,
                error_code: a.error_code,
                error_message: a.error_message,
                response_body_excerpt: a.response_body_excerpt,
            })
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
        sqlx::query(
            "UPDATE webhook_deliveries
             SET status = CASE WHEN status IN ('delivered', 'failed', 'retries_exhausted') THEN 'pending' ELSE status END,
                 due_at = $1, next_attempt_at = $2, updated_at = $3
             WHERE id = $4 AND lease_token IS NULL",
        )
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

    async fn claim_deliveries(&self, req: &ClaimRequest) -> StoreResult<Vec<ClaimedDelivery>> {
        if req.limit == 0 {
            return Ok(Vec::new());
        }
        let saturated: Vec<i64> = req
            .in_flight
            .iter()
            .filter(|(_, n)| **n >= req.per_endpoint)
            .map(|(id, _)| *id)
            .collect();
        let scan = (req.limit * 4).clamp(16, 1000) as i64;
        let mut tx = self.write().await?;
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT id, endpoint_id, attempts, lease_token, last_attempt_at FROM webhook_deliveries
             WHERE due_at IS NOT NULL AND due_at <= ",
        );
        qb.push_bind(req.now);
        if !saturated.is_empty() {
            qb.push(" AND (endpoint_id IS NULL OR endpoint_id NOT");
            push_in_list(&mut qb, &saturated);
            qb.push(")");
        }
        qb.push(" ORDER BY due_at, id LIMIT ")
            .push_bind(scan)
            .push(dialect::SKIP_LOCKED);
        let candidates: Vec<CandidateRow> = qb.build_query_as().fetch_all(&mut *tx).await?;

        // Keep within each endpoint's room in this instance.
        let mut used: HashMap<i64, usize> = HashMap::new();
        let mut chosen: Vec<CandidateRow> = Vec::new();
        for c in candidates {
            if chosen.len() >= req.limit {
                break;
            }
            let key = c.endpoint_id.unwrap_or(0);
            let n = used
                .entry(key)
                .or_insert_with(|| req.in_flight.get(&key).copied().unwrap_or(0));
            if *n >= req.per_endpoint {
                continue;
            }
            *n += 1;
            chosen.push(c);
        }
        if chosen.is_empty() {
            tx.commit(Effects::none()).await?;
            return Ok(Vec::new());
        }
        // A claim whose lease expired: its attempt was interrupted (the instance stopped).
        for c in chosen.iter().filter(|c| c.lease_token.is_some()) {
            insert_attempt(
                &mut tx,
                c.id,
                &AttemptRecord {
                    number: c.attempts,
                    url: None,
                    started_at: c.last_attempt_at.unwrap_or(req.now),
                    duration_ms: None,
                    response_status: None,
                    error_code: Some("attempt_interrupted".into()),
                    error_message: Some(
                        "The instance making this attempt stopped before recording its outcome; the delivery was taken over."
                            .into(),
                    ),
                    response_body_excerpt: None,
                },
            )
            .await?;
        }
        let ids: Vec<i64> = chosen.iter().map(|c| c.id).collect();
        let mut qb = QueryBuilder::<Db>::new(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, due_at = ",
        );
        qb.push_bind(req.lease_until)
            .push(", lease_token = ")
            .push_bind(req.token)
            .push(", next_attempt_at = NULL, last_attempt_at = ")
            .push_bind(req.now)
            .push(", updated_at = ")
            .push_bind(req.now)
            .push(" WHERE id");
        push_in_list(&mut qb, &ids);
        qb.build().execute(&mut *tx).await?;

        let mut qb = QueryBuilder::<Db>::new(
            "SELECT d.id, d.uuid, d.org_id, d.attempts, ev.uuid AS event_uuid, ev.org_id AS event_org_id,
                    ev.name AS event_name, ev.data AS event_data, ev.channel AS event_channel, ev.occurred_at,
                    ep.id AS ep_id, ep.uuid AS ep_uuid, ep.url AS ep_url, ep.headers AS ep_headers,
                    ep.signing_secret AS ep_secret, ep.status AS ep_status, ep.deleted_at AS ep_deleted_at,
                    ep.legacy AS ep_legacy
             FROM webhook_deliveries d
             JOIN events ev ON ev.id = d.event_id
             LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
             WHERE d.id",
        );
        push_in_list(&mut qb, &ids);
        qb.push(" ORDER BY d.id");
        let rows: Vec<ClaimRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
        tx.commit(Effects::none()).await?;

        rows.into_iter()
            .map(|r| {
                let endpoint = match (r.ep_id, r.ep_uuid, r.ep_url, r.ep_status) {
                    (Some(id), Some(uuid), Some(url), Some(status)) => Some(ClaimedEndpoint {
                        id,
                        uuid,
                        url,
                        headers: r.ep_headers.map(|h| h.0).unwrap_or_default(),
                        sealed_secret: r.ep_secret.unwrap_or_default(),
                        status: endpoint_status(&status)?,
                        deleted: r.ep_deleted_at.is_some(),
                        legacy: r.ep_legacy.unwrap_or(false),
                    }),
                    _ => None,
                };
                Ok(ClaimedDelivery {
                    id: r.id,
                    token: req.token,
                    uuid: r.uuid,
                    org_id: r.org_id,
                    attempt: r.attempts,
                    event: NewEvent {
                        uuid: r.event_uuid,
                        org_id: r.event_org_id,
                        name: r.event_name,
                        data: r.event_data.0,
                        channel: r.event_channel.map(|c| c.0),
                        occurred_at: r.occurred_at,
                    },
                    endpoint,
                })
            })
            .collect()
    }

    async fn record_attempt(&self, o: AttemptOutcome) -> StoreResult<AttemptRecorded> {
        Ok(self
            .record_attempts(vec![o])
            .await?
            .pop()
            .unwrap_or(AttemptRecorded::LeaseLost))
    }

    async fn record_attempts(
        &self,
        outcomes: Vec<AttemptOutcome>,
    ) -> StoreResult<Vec<AttemptRecorded>> {
        let mut results = vec![AttemptRecorded::LeaseLost; outcomes.len()];
        if outcomes.is_empty() {
            return Ok(results);
        }
        let mut tx = self.write().await?;
        // The deliveries still held by these claims.
        let ids: Vec<i64> = outcomes.iter().map(|o| o.delivery_id).collect();
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT d.id, d.org_id, d.uuid, ev.uuid AS event_uuid, d.endpoint_id, d.event_name, d.attempts, d.lease_token
             FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id WHERE d.id",
        );
        push_in_list(&mut qb, &ids);
        let rows: Vec<LeasedRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
        let leased: HashMap<i64, LeasedRow> = rows.into_iter().map(|r| (r.id, r)).collect();
        // Endpoints in id order, each locked before its deliveries are updated: the same lock
        // order as endpoint changes, and across concurrent batches.
        let mut order: Vec<usize> = (0..outcomes.len())
            .filter(|&i| {
                leased
                    .get(&outcomes[i].delivery_id)
                    .is_some_and(|d| d.lease_token == Some(outcomes[i].token))
            })
            .collect();
        order.sort_by_key(|&i| {
            let d = &leased[&outcomes[i].delivery_id];
            (d.endpoint_id.unwrap_or(0), d.id)
        });
        // Successes whose endpoint has no failure count to reset change nothing but their
        // delivery and its attempt log: they are recorded together, in a few statements.
        let (fast, order) = split_plain_successes(&mut tx, &outcomes, &leased, order).await?;
        let mut endpoints: HashMap<i64, Option<EndpointHealth>> = HashMap::new();
        for i in order {
            let o = &outcomes[i];
            let d = &leased[&o.delivery_id];
            let endpoint = match d.endpoint_id {
                Some(id) => {
                    if let std::collections::hash_map::Entry::Vacant(slot) = endpoints.entry(id) {
                        slot.insert(lock_health(&mut tx, id).await?);
                    }
                    endpoints
                        .get_mut(&id)
                        .and_then(Option::as_mut)
                        .map(|h| (id, h))
                }
                None => None,
            };
            let (recorded, effects) = record_one(&mut tx, o, d, endpoint).await?;
            tx.write_effects(&effects).await?;
            results[i] = recorded;
        }
        for i in record_successes(&mut tx, &outcomes, &fast).await? {
            results[i] = AttemptRecorded::Done {
                status: DeliveryStatus::Delivered,
                endpoint_disabled: false,
            };
        }
        tx.commit(Effects::none()).await?;
        Ok(results)
    }

    async fn next_delivery_due(&self) -> StoreResult<Option<Timestamp>> {
        Ok(sqlx::query_scalar(
            "SELECT due_at FROM webhook_deliveries WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1",
        )
        .fetch_optional(self.reader())
        .await?)
    }

    async fn delivery_backlog(&self, now: Timestamp) -> StoreResult<(i64, Option<Timestamp>)> {
        Ok(sqlx::query_as(
            "SELECT COUNT(*), MIN(due_at) FROM webhook_deliveries WHERE due_at IS NOT NULL AND due_at <= $1",
        )
        .bind(now)
        .fetch_one(self.reader())
        .await?)
    }

    async fn purge_deliveries(&self, cutoff: Timestamp, batch: i64) -> StoreResult<(u64, u64)> {
        let mut tx = self.write().await?;
        let deliveries = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE id IN (
                 SELECT id FROM webhook_deliveries WHERE created_at < $1 AND lease_token IS NULL ORDER BY created_at LIMIT $2)",
        )
        .bind(cutoff)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit(Effects::none()).await?;
        let mut tx = self.write().await?;
        let events = sqlx::query(
            "DELETE FROM events WHERE id IN (
                 SELECT e.id FROM events e WHERE e.occurred_at < $1
                   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)
                 ORDER BY e.occurred_at LIMIT $2)",
        )
        .bind(cutoff)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit(Effects::none()).await?;
        Ok((deliveries, events))
    }
}
