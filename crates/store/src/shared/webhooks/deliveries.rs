//! The dispatcher's side of deliveries: claims (with leases), the outcomes of attempts (the
//! transition `delivery::after_attempt` decides, applied here), and the schedule.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::write::WriteTx;
use super::endpoints::{endpoint_status, hold_deliveries};
use super::{Backend, Conn, Db, dialect, push_in_list, sql};
use crate::webhooks::*;
use crate::{StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::webhooks::claim;
use switchboard_domain::webhooks::delivery::{self, EndpointHealth};
use switchboard_domain::webhooks::destination::DestinationType;

async fn insert_attempt(conn: &mut Conn, delivery_id: i64, a: &AttemptRecord) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO webhook_attempts (delivery_id, number, url, started_at, duration_ms, response_status, error_code,
                                       error_message, response_body_excerpt, signed_with)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
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
    .bind(signed_with_text(a))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The `signed_with` column: a JSON array of secret ids, or NULL.
fn signed_with_text(a: &AttemptRecord) -> Option<String> {
    a.signed_with
        .as_ref()
        .map(|ids| serde_json::to_string(ids).unwrap_or_default())
}

#[derive(sqlx::FromRow)]
struct CandidateRow {
    id: i64,
    endpoint_id: Option<i64>,
    attempts: i64,
    lease_token: Option<Uuid>,
    last_attempt_at: Option<Timestamp>,
    next_attempt_at: Option<Timestamp>,
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
    ep_timeout_ms: Option<i64>,
    ep_retry_delays_ms: Option<String>,
    ep_max_per_second: Option<i64>,
    ep_destination: Option<String>,
    ep_target: Option<String>,
    ep_target_secret: Option<Vec<u8>>,
    ep_auth: Option<String>,
    ep_auth_secret: Option<Vec<u8>>,
    envelope: Option<String>,
    sequence: Option<i64>,
    event_trace: Option<String>,
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
    order_key: Option<Uuid>,
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

/// Splits the outcomes still leased (`order`) into plain successes
/// (`delivery::is_plain_success`: a 2xx whose endpoint's failure count is zero, or which has
/// no endpoint) and the rest, keeping the order of the rest. The failure counts are read without a lock: a failure committed after this read
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
        let endpoint = leased[&outcomes[*i].delivery_id].endpoint_id;
        delivery::is_plain_success(
            outcomes[*i].disposition,
            endpoint.is_some_and(|e| failing.contains(&e)),
        )
    }))
}

/// Rows per statement when recording successes together (well under both backends' limits
/// on bound parameters).
const SUCCESS_CHUNK: usize = 64;

/// Records plain successes (`which`, indexes into `outcomes`) with one `UPDATE ... FROM
/// (VALUES ...)` and one multi-row attempt insert per chunk, each delivery only while its
/// claim still holds it: each takes the transition `delivery::plain_success` (what
/// `after_attempt` decides for it), delivered at its own time. Returns the indexes recorded.
async fn record_successes(
    conn: &mut Conn,
    outcomes: &[AttemptOutcome],
    which: &[usize],
) -> StoreResult<Vec<usize>> {
    let mut recorded = Vec::with_capacity(which.len());
    for chunk in which.chunks(SUCCESS_CHUNK) {
        // The same for every plain success but its time (`delivered_at`, bound per row).
        let t = delivery::plain_success(outcomes[chunk[0]].now);
        debug_assert_eq!(t.delivered_at, Some(outcomes[chunk[0]].now));
        let mut qb = QueryBuilder::<Db>::new("UPDATE webhook_deliveries SET status = ");
        qb.push_bind(t.status.as_str())
            .push(", due_at = ")
            .push_bind(t.next_attempt_at)
            .push(", next_attempt_at = ")
            .push_bind(t.next_attempt_at)
            .push(", lease_token = NULL, lease_until = NULL, response_status = v.column3, error_code = ")
            .push_bind(t.error_code)
            .push(", error_message = ")
            .push_bind(t.error_message)
            .push(", delivered_at = v.column4, updated_at = v.column4 FROM (");
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
        // On PostgreSQL, planned at each execution, not through the plan cache: a connection's
        // cached plan keeps the table size of the moment it was made until the table is next
        // analyzed. Made at start-up on an empty table, it scanned the whole table (a
        // sequential scan and a hash join) at every execution once a burst had filled it, 8 to
        // 14 ms each at 50 000 to 90 000 rows (`auto_explain` during `bench`). A fresh plan sees
        // the table's current size and takes the primary key; planning costs less than one
        // such scan.
        let done: HashSet<i64> = qb
            .build_query_scalar::<i64>()
            .persistent(dialect::CACHE_GROWING_PLANS)
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
                                           error_code, error_message, response_body_excerpt, signed_with) ",
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
                .push_bind(a.response_body_excerpt.clone())
                .push_bind(signed_with_text(a));
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
        "UPDATE webhook_deliveries SET status = $1, due_at = $2, next_attempt_at = $3, lease_token = NULL, lease_until = NULL,
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
            static DISABLE: LazyLock<String> = LazyLock::new(|| {
                format!(
                    "UPDATE webhook_endpoints SET status = {}, disabled_reason = $1, disabled_at = $2,
                            updated_at = $3
                     WHERE id = $4 AND status = {}",
                    *sql::DISABLED,
                    *sql::ACTIVE
                )
            });
            sqlx::query(&DISABLE)
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

/// Claims due deliveries inside `tx` (see [`ClaimRequest`]).
async fn claim_in(tx: &mut WriteTx<'_>, req: &ClaimRequest) -> StoreResult<Vec<ClaimedDelivery>> {
    if req.is_empty() {
        return Ok(Vec::new());
    }
    // The policy is the domain's (`claim::choose`): read the candidates, choose, lease.
    let no_room = HashMap::new();
    let limits = claim::Limits {
        limit: req.limit,
        per_endpoint: req.per_endpoint,
        in_flight: &req.in_flight,
        ahead_limit: req.ahead.as_ref().map_or(0, |a| a.limit),
        room: req.ahead.as_ref().map_or(&no_room, |a| &a.room),
    };
    let saturated = limits.saturated();
    let scan = i64::try_from(limits.scan()).unwrap_or(i64::MAX);
    let mut qb = QueryBuilder::<Db>::new(
        "SELECT id, endpoint_id, attempts, lease_token, last_attempt_at, next_attempt_at FROM webhook_deliveries
             WHERE due_at IS NOT NULL AND due_at <= ",
    );
    // A claimed delivery keeps its due_at; its lease (lease_until) keeps it from other claims
    // until it expires. (A claim by a release before migration 0019 has no lease_until and
    // its expiry in due_at.)
    qb.push_bind(req.now)
        .push(" AND (lease_token IS NULL OR COALESCE(lease_until, due_at) <= ")
        .push_bind(req.now)
        .push(")");
    if !saturated.is_empty() {
        qb.push(" AND (endpoint_id IS NULL OR endpoint_id NOT");
        push_in_list(&mut qb, &saturated);
        qb.push(")");
    }
    qb.push(" ORDER BY due_at, id LIMIT ")
        .push_bind(scan)
        .push(dialect::SKIP_LOCKED);
    let candidates: Vec<CandidateRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
    // Deliveries without an endpoint count together, under key 0.
    let picks = claim::choose(
        &limits,
        candidates.iter().map(|c| c.endpoint_id.unwrap_or(0)),
    );
    let mut candidates: Vec<Option<CandidateRow>> = candidates.into_iter().map(Some).collect();
    let chosen: Vec<(CandidateRow, bool)> = picks
        .into_iter()
        .filter_map(|p| candidates[p.index].take().map(|c| (c, p.ahead)))
        .collect();
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    // A claim whose lease expired: its attempt was interrupted (the instance stopped).
    for (c, _) in chosen.iter().filter(|(c, _)| c.lease_token.is_some()) {
        insert_attempt(
                tx,
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
                    signed_with: None,
                },
            )
            .await?;
    }
    let ids: Vec<i64> = chosen.iter().map(|(c, _)| c.id).collect();
    let mut qb = QueryBuilder::<Db>::new(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, lease_until = ",
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
    qb.build().execute(&mut **tx).await?;
    let mut claimed_from: HashMap<i64, (bool, ClaimedFrom)> = chosen
        .into_iter()
        .map(|(c, ahead)| {
            let from = ClaimedFrom {
                last_attempt_at: c.last_attempt_at,
                next_attempt_at: c.next_attempt_at,
            };
            (c.id, (ahead, from))
        })
        .collect();
    let mut qb = QueryBuilder::<Db>::new(
            "SELECT d.id, d.uuid, d.org_id, d.attempts, ev.uuid AS event_uuid, ev.org_id AS event_org_id,
                    ev.name AS event_name, ev.data AS event_data, ev.channel AS event_channel, ev.occurred_at,
                    ep.id AS ep_id, ep.uuid AS ep_uuid, ep.url AS ep_url, ep.headers AS ep_headers,
                    ep.signing_secret AS ep_secret, ep.status AS ep_status, ep.deleted_at AS ep_deleted_at,
                    ep.legacy AS ep_legacy, ep.timeout_ms AS ep_timeout_ms, ep.retry_delays_ms AS ep_retry_delays_ms,
                    ep.max_per_second AS ep_max_per_second, ep.destination AS ep_destination, ep.target AS ep_target,
                    ep.target_secret AS ep_target_secret, ep.auth AS ep_auth, ep.auth_secret AS ep_auth_secret,
                    ev.envelope, d.sequence, ev.trace AS event_trace
             FROM webhook_deliveries d
             JOIN events ev ON ev.id = d.event_id
             LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
             WHERE d.id",
        );
    push_in_list(&mut qb, &ids);
    qb.push(" ORDER BY d.id");
    let rows: Vec<ClaimRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
    // A delivery to an endpoint whose own time limit is longer than the deployment's is leased
    // that much longer: its lease covers its attempt.
    let deployment_ms = i64::try_from(req.timeout.as_millis()).unwrap_or(i64::MAX);
    let mut longer: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in &rows {
        if let Some(t) = r.ep_timeout_ms.filter(|t| *t > deployment_ms) {
            longer.entry(t - deployment_ms).or_default().push(r.id);
        }
    }
    let mut leases: HashMap<i64, Timestamp> = HashMap::new();
    for (extra_ms, ids) in longer {
        let until = req
            .lease_until
            .saturating_add(std::time::Duration::from_millis(extra_ms.unsigned_abs()));
        let mut qb = QueryBuilder::<Db>::new("UPDATE webhook_deliveries SET lease_until = ");
        qb.push_bind(until).push(" WHERE id");
        push_in_list(&mut qb, &ids);
        qb.build().execute(&mut **tx).await?;
        leases.extend(ids.into_iter().map(|id| (id, until)));
    }
    // Retired secrets still in their grace period, for the endpoints of this batch.
    let endpoint_ids: Vec<i64> = rows
        .iter()
        .filter_map(|r| r.ep_id)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut retired: HashMap<i64, Vec<Vec<u8>>> = HashMap::new();
    if !endpoint_ids.is_empty() {
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT endpoint_id, signing_secret FROM webhook_endpoint_secrets WHERE expires_at > ",
        );
        qb.push_bind(req.now).push(" AND endpoint_id");
        push_in_list(&mut qb, &endpoint_ids);
        qb.push(" ORDER BY expires_at DESC, id DESC");
        let secrets: Vec<(i64, Vec<u8>)> = qb.build_query_as().fetch_all(&mut **tx).await?;
        for (endpoint_id, sealed) in secrets {
            retired.entry(endpoint_id).or_default().push(sealed);
        }
    }

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
                    retired_secrets: retired.remove(&id).unwrap_or_default(),
                    controls: EndpointControls {
                        filter: None,
                        timeout_ms: r.ep_timeout_ms,
                        retry_delays_ms: super::endpoints::delays_of_column(
                            r.ep_retry_delays_ms.as_deref(),
                        ),
                        max_per_second: r.ep_max_per_second,
                        destination: r
                            .ep_destination
                            .as_deref()
                            .and_then(DestinationType::parse)
                            .unwrap_or_default(),
                        target: r.ep_target,
                        sealed_target_url: r.ep_target_secret,
                        auth: r.ep_auth,
                        sealed_auth_secret: r.ep_auth_secret,
                    },
                }),
                _ => None,
            };
            let event = NewEvent {
                uuid: r.event_uuid,
                org_id: r.event_org_id,
                name: r.event_name,
                data: r.event_data.0,
                channel: r.event_channel.map(|c| c.0),
                occurred_at: r.occurred_at,
                test: false,
                sample: false,
                trace: r.event_trace,
            };
            // Events written before envelopes were kept have their envelope built now.
            let envelope = r.envelope.unwrap_or_else(|| event.envelope_text());
            let (ahead, claimed_from) = claimed_from
                .remove(&r.id)
                .ok_or_else(|| StoreError::Other("a claimed delivery was not read back".into()))?;
            Ok(ClaimedDelivery {
                id: r.id,
                token: req.token,
                uuid: r.uuid,
                org_id: r.org_id,
                attempt: r.attempts,
                event,
                envelope,
                sequence: r.sequence,
                endpoint,
                lease_until: leases.get(&r.id).copied().unwrap_or(req.lease_until),
                ahead,
                claimed_from,
            })
        })
        .collect()
}

/// Records outcomes inside `tx`; the results are in the order of `outcomes`.
async fn record_in(
    tx: &mut WriteTx<'_>,
    outcomes: &[AttemptOutcome],
) -> StoreResult<Vec<AttemptRecorded>> {
    let mut results = vec![AttemptRecorded::LeaseLost; outcomes.len()];
    if outcomes.is_empty() {
        return Ok(results);
    }
    // The deliveries still held by these claims.
    let ids: Vec<i64> = outcomes.iter().map(|o| o.delivery_id).collect();
    let mut qb = QueryBuilder::<Db>::new(
            "SELECT d.id, d.org_id, d.uuid, ev.uuid AS event_uuid, d.endpoint_id, d.event_name, d.attempts, d.lease_token,
                    d.order_key
             FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id WHERE d.id",
        );
    push_in_list(&mut qb, &ids);
    let rows: Vec<LeasedRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
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
    let (fast, order) = split_plain_successes(tx, outcomes, &leased, order).await?;
    let mut endpoints: HashMap<i64, Option<EndpointHealth>> = HashMap::new();
    let mut ended_chains: Vec<(i64, Uuid)> = Vec::new();
    for i in order {
        let o = &outcomes[i];
        let d = &leased[&o.delivery_id];
        let endpoint = match d.endpoint_id {
            Some(id) => {
                if let std::collections::hash_map::Entry::Vacant(slot) = endpoints.entry(id) {
                    slot.insert(lock_health(tx, id).await?);
                }
                endpoints
                    .get_mut(&id)
                    .and_then(Option::as_mut)
                    .map(|h| (id, h))
            }
            None => None,
        };
        let (recorded, effects) = record_one(tx, o, d, endpoint).await?;
        tx.write_effects(&effects).await?;
        if let (AttemptRecorded::Done { status, .. }, Some(e), Some(k)) =
            (&recorded, d.endpoint_id, d.order_key)
        {
            if status.is_final() {
                ended_chains.push((e, k));
            }
        }
        results[i] = recorded;
    }
    for i in record_successes(tx, outcomes, &fast).await? {
        let t = delivery::plain_success(outcomes[i].now);
        results[i] = AttemptRecorded::Done {
            status: t.status,
            endpoint_disabled: t.disabled_reason.is_some(),
        };
        let d = &leased[&outcomes[i].delivery_id];
        if let (Some(e), Some(k)) = (d.endpoint_id, d.order_key) {
            ended_chains.push((e, k));
        }
    }
    // The chains whose head ended: their next delivery becomes due (in a fixed order, as
    // every transaction takes chain locks).
    ended_chains.sort_unstable();
    ended_chains.dedup();
    let now = outcomes[0].now;
    for (endpoint_id, key) in ended_chains {
        if super::chains::release_next(tx, endpoint_id, key, now).await? {
            tx.deliveries_scheduled();
        }
    }
    Ok(results)
}

#[async_trait]
impl DeliveryStore for Backend {
    async fn claim_deliveries(&self, req: &ClaimRequest) -> StoreResult<Vec<ClaimedDelivery>> {
        if req.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.write().await?;
        let claimed = claim_in(&mut tx, req).await?;
        tx.commit(Effects::none()).await?;
        Ok(claimed)
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
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.write().await?;
        let results = record_in(&mut tx, &outcomes).await?;
        tx.commit(Effects::none()).await?;
        Ok(results)
    }

    async fn record_and_claim(
        &self,
        outcomes: Vec<AttemptOutcome>,
        claim: &ClaimRequest,
    ) -> StoreResult<(Vec<AttemptRecorded>, Vec<ClaimedDelivery>)> {
        if outcomes.is_empty() && claim.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut tx = self.write().await?;
        // Outcomes first: a chain whose head ended releases its next delivery, which this
        // claim can then take.
        let results = record_in(&mut tx, &outcomes).await?;
        let claimed = claim_in(&mut tx, claim).await?;
        tx.commit(Effects::none()).await?;
        Ok((results, claimed))
    }

    async fn hand_back(
        &self,
        claims: Vec<(i64, Uuid, ClaimedFrom)>,
        now: Timestamp,
    ) -> StoreResult<u64> {
        if claims.is_empty() {
            return Ok(0);
        }
        let mut tx = self.write().await?;
        let mut handed = 0;
        for (id, token, from) in claims {
            handed += sqlx::query(
                "UPDATE webhook_deliveries SET attempts = attempts - 1, lease_token = NULL, lease_until = NULL,
                        last_attempt_at = $1, next_attempt_at = $2, updated_at = $3
                 WHERE id = $4 AND lease_token = $5",
            )
            .bind(from.last_attempt_at)
            .bind(from.next_attempt_at)
            .bind(now)
            .bind(id)
            .bind(token)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        if handed > 0 {
            // Due again at once: other instances may take them.
            tx.deliveries_scheduled();
        }
        tx.commit(Effects::none()).await?;
        Ok(handed)
    }

    async fn next_delivery_due(&self) -> StoreResult<Option<Timestamp>> {
        // On PostgreSQL, planned at each execution, as the plain successes' update in
        // `record_successes` (a plan cached on an empty table sorts the whole table).
        Ok(sqlx::query_scalar(
            "SELECT due_at FROM webhook_deliveries WHERE due_at IS NOT NULL AND lease_token IS NULL
             ORDER BY due_at LIMIT 1",
        )
        .persistent(dialect::CACHE_GROWING_PLANS)
        .fetch_optional(self.reader())
        .await?)
    }

    async fn delivery_backlog(&self, now: Timestamp) -> StoreResult<(i64, Option<Timestamp>)> {
        // Planned at each execution on PostgreSQL, as `next_delivery_due`.
        Ok(sqlx::query_as(
            "SELECT COUNT(*), MIN(due_at) FROM webhook_deliveries WHERE due_at IS NOT NULL AND due_at <= $1
               AND (lease_token IS NULL OR COALESCE(lease_until, due_at) <= $1)",
        )
        .bind(now)
        .persistent(dialect::CACHE_GROWING_PLANS)
        .fetch_one(self.reader())
        .await?)
    }
}
