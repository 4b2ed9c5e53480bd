//! The dispatcher's side of deliveries: the outcomes of attempts (the transition
//! `delivery::after_attempt` decides, applied here), claims (`claims`), and the schedule.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::super::endpoint_columns::endpoint_status;
use super::super::first_attempt;
use super::super::write::WriteTx;
use super::attempts::{insert_attempt, signed_with_text};
use super::claims::{claim_in, read_handed};
use super::endpoints::hold_deliveries;
use super::{Backend, Conn, Db, dialect, push_in_list, sql};
use crate::webhooks::*;
use crate::{StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;
use switchboard_domain::webhooks::delivery::{self, EndpointHealth};

#[derive(sqlx::FromRow)]
struct LeasedRow {
    id: i64,
    org_id: i64,
    uuid: Uuid,
    event_id: i64,
    /// Read by the event's id after the row (`leased_rows`).
    #[sqlx(skip)]
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
/// (VALUES ...)` per chunk, which keeps a first attempt in its delivery row
/// (`super::super::first_attempt`), and one multi-row attempt insert for the later attempts, each delivery only while its
/// claim still holds it: each takes the transition `delivery::plain_success` (what
/// `after_attempt` decides for it), delivered at its own time. Returns the indexes recorded.
async fn record_successes(
    conn: &mut Conn,
    outcomes: &[AttemptOutcome],
    which: &[usize],
) -> StoreResult<Vec<usize>> {
    let mut recorded = Vec::with_capacity(which.len());
    for chunk in which.chunks(SUCCESS_CHUNK) {
        // A first attempt is kept in the delivery row (`first_attempt`), a later one in the log.
        let first: Vec<Option<String>> = chunk
            .iter()
            .map(|&i| first_attempt::text(&outcomes[i].attempt))
            .collect();
        let mut qb = QueryBuilder::<Db>::new("");
        push_successes(&mut qb, outcomes, chunk, &first);
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
        let logged: Vec<usize> = chunk
            .iter()
            .zip(&first)
            .filter(|&(i, first)| first.is_none() && done.contains(&outcomes[*i].delivery_id))
            .map(|(&i, _)| i)
            .collect();
        recorded.extend(&kept);
        if logged.is_empty() {
            continue;
        }
        let mut qb = QueryBuilder::<Db>::new(
            "INSERT INTO webhook_attempts (delivery_id, number, url, started_at, duration_ms, response_status,
                                           error_code, error_message, response_body_excerpt, signed_with) ",
        );
        qb.push_values(&logged, |mut row, &i| {
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
    }
    Ok(recorded)
}

/// The statement of one chunk of [`record_successes`] (`chunk`: indexes into `outcomes`; `first`:
/// each one's first attempt as kept in the row, or none), appended to `qb`: every row found by
/// its primary key (checked by `sqlite::tests::statements_on_growing_tables_use_their_keys`).
pub(in super::super) fn push_successes<'a>(
    qb: &mut QueryBuilder<'a, Db>,
    outcomes: &'a [AttemptOutcome],
    chunk: &'a [usize],
    first: &'a [Option<String>],
) {
    // The same for every plain success but its time (`delivered_at`, bound per row).
    let t = delivery::plain_success(outcomes[chunk[0]].now);
    debug_assert_eq!(t.delivered_at, Some(outcomes[chunk[0]].now));
    qb.push("UPDATE webhook_deliveries SET status = ")
        .push_bind(t.status.as_str())
        .push(", due_at = ")
        .push_bind(t.next_attempt_at)
        .push(", next_attempt_at = ")
        .push_bind(t.next_attempt_at)
        .push(
            ", lease_token = NULL, lease_until = NULL, response_status = v.column3, error_code = ",
        )
        .push_bind(t.error_code)
        .push(", error_message = ")
        .push_bind(t.error_message)
        .push(
            ", delivered_at = v.column4, updated_at = v.column4,
             first_attempt = COALESCE(v.column5, webhook_deliveries.first_attempt) FROM (",
        );
    qb.push_values(chunk.iter().zip(first), |mut row, (&i, first)| {
        let o = &outcomes[i];
        row.push_bind(o.delivery_id)
            .push_bind(o.token)
            .push_bind(o.attempt.response_status)
            .push_bind(o.now)
            .push_bind(first.as_deref());
    });
    qb.push(
        ") AS v WHERE webhook_deliveries.id = v.column1 AND webhook_deliveries.lease_token = v.column2",
    );
    if dialect::BOUND_IDS {
        let ids = chunk.iter().map(|&i| outcomes[i].delivery_id);
        let (lo, hi) = (ids.clone().min(), ids.max());
        qb.push(" AND webhook_deliveries.id BETWEEN ")
            .push_bind(lo)
            .push(" AND ")
            .push_bind(hi);
    }
    qb.push(" RETURNING webhook_deliveries.id");
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

/// The deliveries of these outcomes, with their events' UUIDs, by id. The events are read by
/// their own ids, not joined: on partitioned tables (PostgreSQL, `partitions.rs`) each
/// statement's plan then opens only the partitions its ids are in (as `claims::read_claim_rows`).
async fn leased_rows(
    tx: &mut WriteTx<'_>,
    outcomes: &[AttemptOutcome],
) -> StoreResult<HashMap<i64, LeasedRow>> {
    let ids: Vec<i64> = outcomes.iter().map(|o| o.delivery_id).collect();
    let mut qb = QueryBuilder::<Db>::new(
        "SELECT id, org_id, uuid, event_id, endpoint_id, event_name, attempts, lease_token, order_key
         FROM webhook_deliveries WHERE id",
    );
    dialect::push_id_list(&mut qb, &ids);
    let rows: Vec<LeasedRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
    let mut event_ids: Vec<i64> = rows.iter().map(|r| r.event_id).collect();
    event_ids.sort_unstable();
    event_ids.dedup();
    let events: HashMap<i64, Uuid> = if event_ids.is_empty() {
        HashMap::new()
    } else {
        let mut qb = QueryBuilder::<Db>::new("SELECT id, uuid FROM events WHERE id");
        dialect::push_id_list(&mut qb, &event_ids);
        qb.build_query_as::<(i64, Uuid)>()
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect()
    };
    // As the join did: a delivery whose event is gone is left out (its outcome is not kept).
    Ok(rows
        .into_iter()
        .filter_map(|mut r| {
            r.event_uuid = *events.get(&r.event_id)?;
            Some((r.id, r))
        })
        .collect())
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
    let leased = leased_rows(tx, outcomes).await?;
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
        if super::super::chains::release_next(tx, endpoint_id, key, now).await? {
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

    async fn read_handed(
        &self,
        handed: &Handed,
        now: Timestamp,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        let mut conn = self.dispatch_reader().acquire().await?;
        read_handed(&mut conn, handed, now).await
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
