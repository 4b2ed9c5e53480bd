//! Webhook endpoints: their rows, their changes, and the deliveries held while one is
//! disabled.

use super::super::endpoint_columns::{delays_of_column, endpoint_status};
use std::collections::BTreeMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::fan_out::{NewDelivery, insert_delivery, insert_event_row};
use super::{Backend, Conn, Db, dialect, sql};
use crate::webhooks::*;
use crate::{EffectsFn, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::webhooks::delivery::{self};
use switchboard_domain::webhooks::destination::DestinationType;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};

macro_rules! select_endpoints {
    ($rest:literal) => {
        concat!(
            "SELECT id, uuid, org_id, name, url, events, headers, signing_secret, status, disabled_reason,
                    disabled_at, consecutive_failures, created_at, updated_at, legacy, ordering, filter,
                    timeout_ms, retry_delays_ms, max_per_second, destination, target, target_secret,
                    auth, auth_secret
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
    ordering: String,
    filter: Option<String>,
    timeout_ms: Option<i64>,
    retry_delays_ms: Option<String>,
    max_per_second: Option<i64>,
    destination: String,
    target: Option<String>,
    target_secret: Option<Vec<u8>>,
    auth: Option<String>,
    auth_secret: Option<Vec<u8>>,
}

/// The retry delays as stored: a JSON array of milliseconds.
pub(super) fn delays_column(delays: Option<&Vec<i64>>) -> Option<String> {
    delays.map(|d| serde_json::Value::from(d.clone()).to_string())
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
            ordering: EndpointOrdering::parse(&r.ordering).unwrap_or_default(),
            controls: EndpointControls {
                filter: r.filter,
                timeout_ms: r.timeout_ms,
                retry_delays_ms: delays_of_column(r.retry_delays_ms.as_deref()),
                max_per_second: r.max_per_second,
                destination: DestinationType::parse(&r.destination).ok_or_else(|| {
                    StoreError::Other(format!("unknown destination {}", r.destination))
                })?,
                target: r.target,
                sealed_target_url: r.target_secret,
                auth: r.auth,
                sealed_auth_secret: r.auth_secret,
            },
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

/// Holds (stops) the unfinished deliveries of a disabled endpoint that are not in flight.
pub(super) async fn hold_deliveries(
    conn: &mut Conn,
    endpoint_id: i64,
    now: Timestamp,
) -> StoreResult<()> {
    static HOLD: LazyLock<String> = LazyLock::new(|| {
        format!(
            "UPDATE webhook_deliveries SET due_at = NULL, next_attempt_at = NULL, updated_at = $1
             WHERE endpoint_id = $2 AND status IN {} AND lease_token IS NULL",
            *sql::UNFINISHED
        )
    });
    sqlx::query(&HOLD)
        .bind(now)
        .bind(endpoint_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Schedules the held deliveries of a re-enabled endpoint now (on an ordered endpoint, only
/// the first unfinished delivery of each contact's chain: the rest follow in order). Returns
/// how many.
async fn resume_deliveries(conn: &mut Conn, endpoint_id: i64, now: Timestamp) -> StoreResult<u64> {
    static RESUME: LazyLock<String> = LazyLock::new(|| {
        format!(
            "UPDATE webhook_deliveries SET due_at = $1, next_attempt_at = $2, updated_at = $3
             WHERE endpoint_id = $4 AND status IN {unfinished} AND due_at IS NULL
               AND (order_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM webhook_deliveries p
                   WHERE p.endpoint_id = webhook_deliveries.endpoint_id AND p.order_key = webhook_deliveries.order_key
                     AND p.status IN {unfinished} AND p.sequence < webhook_deliveries.sequence))",
            unfinished = *sql::UNFINISHED
        )
    });
    let done = sqlx::query(&RESUME)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(endpoint_id)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

#[async_trait]
impl EndpointStore for Backend {
    async fn create_endpoint(
        &self,
        new: NewEndpoint,
        effects: EffectsFn<'_, EndpointRecord>,
    ) -> StoreResult<EndpointRecord> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO webhook_endpoints (uuid, org_id, name, url, events, headers, signing_secret, status,
                                            disabled_reason, disabled_at, consecutive_failures, created_at, updated_at,
                                            legacy, ordering, filter, timeout_ms, retry_delays_ms, max_per_second,
                                            destination, target, target_secret, auth, auth_secret)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
                     $22, $23)",
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
        .bind(new.ordering.as_str())
        .bind(&new.controls.filter)
        .bind(new.controls.timeout_ms)
        .bind(delays_column(new.controls.retry_delays_ms.as_ref()))
        .bind(new.controls.max_per_second)
        .bind(new.controls.destination.as_str())
        .bind(&new.controls.target)
        .bind(&new.controls.sealed_target_url)
        .bind(&new.controls.auth)
        .bind(&new.controls.sealed_auth_secret)
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
            qb.push(" AND (created_at, id) < (")
                .push_bind(t)
                .push(", ")
                .push_bind(id)
                .push(")");
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
            retire_secret_until,
            ordering,
            controls,
        } = patch;
        let ordering = ordering.unwrap_or(old.ordering);
        let new_controls = controls.apply(&old.controls);
        if sealed_secret.is_some() {
            retire_secrets(&mut tx, &old, retire_secret_until, now).await?;
        }
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
            || ordering != old.ordering
            || new_controls != old.controls
            || status != old.status
            || reason != old.disabled_reason
            || failures != old.consecutive_failures;
        let updated_at = if changed { now } else { old.updated_at };
        sqlx::query(
            "UPDATE webhook_endpoints SET name = $1, url = $2, events = $3, headers = $4, signing_secret = $5,
                    status = $6, disabled_reason = $7, disabled_at = $8, consecutive_failures = $9, updated_at = $10,
                    ordering = $11, filter = $12, timeout_ms = $13, retry_delays_ms = $14, max_per_second = $15,
                    target = $16, target_secret = $17, auth = $18, auth_secret = $19
             WHERE id = $20",
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
        .bind(ordering.as_str())
        .bind(&new_controls.filter)
        .bind(new_controls.timeout_ms)
        .bind(delays_column(new_controls.retry_delays_ms.as_ref()))
        .bind(new_controls.max_per_second)
        .bind(&new_controls.target)
        .bind(&new_controls.sealed_target_url)
        .bind(&new_controls.auth)
        .bind(&new_controls.sealed_auth_secret)
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
        sqlx::query("DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = $1")
            .bind(old.id)
            .execute(&mut *tx)
            .await?;
        static DELETE: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE webhook_endpoints SET deleted_at = $1, updated_at = $2, status = {},
                        disabled_reason = 'deleted', signing_secret = $3
                 WHERE id = $4",
                *sql::DISABLED
            )
        });
        // Its deliveries not in flight change as the domain says (`on_endpoint_deleted`).
        static END_DELIVERIES: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE webhook_deliveries SET status = {}, due_at = NULL, next_attempt_at = NULL,
                        error_code = $1, error_message = $2, updated_at = $3
                 WHERE endpoint_id = $4 AND status IN {} AND lease_token IS NULL",
                sql::status_case(delivery::on_endpoint_deleted),
                sql::statuses(|s| delivery::on_endpoint_deleted(s).is_some()),
            )
        });
        sqlx::query(&DELETE)
            .bind(now)
            .bind(now)
            .bind(Vec::<u8>::new())
            .bind(old.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&END_DELIVERIES)
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
            &NewDelivery {
                uuid: delivery_uuid,
                org_id,
                event_id,
                endpoint_id: endpoint.id,
                event_name: &event.name,
                trigger: "test",
                // A test is outside any chain: it never waits and never holds anything up.
                order_key: None,
                now: event.occurred_at,
            },
        )
        .await?;
        tx.deliveries_scheduled();
        tx.commit(Effects::none()).await?;
        Ok(delivery_uuid)
    }
}

/// A new signing secret replaces the endpoint's: the old one is kept until `retire_until`
/// (a grace period), and secrets whose grace is over are erased; a rotation without grace
/// (`0s`, the cut-over after a leak) ends every earlier secret's grace at once.
async fn retire_secrets(
    conn: &mut Conn,
    old: &EndpointRecord,
    retire_until: Option<Timestamp>,
    now: Timestamp,
) -> StoreResult<()> {
    if let Some(until) = retire_until.filter(|u| *u > now && !old.sealed_secret.is_empty()) {
        sqlx::query(
            "INSERT INTO webhook_endpoint_secrets (endpoint_id, signing_secret, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(old.id)
        .bind(&old.sealed_secret)
        .bind(until)
        .execute(&mut *conn)
        .await?;
    }
    // Secrets whose grace period is over are never used again: erase them. Without grace,
    // only the new secret signs from now on: every retired secret ends within the longest
    // grace period (7 days) of now.
    let cut_over = retire_until.is_none_or(|until| until <= now);
    let ended_by = match cut_over {
        true => now.saturating_add(std::time::Duration::from_secs(366 * 86_400)),
        false => now,
    };
    sqlx::query("DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = $1 AND expires_at <= $2")
        .bind(old.id)
        .bind(ended_by)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
