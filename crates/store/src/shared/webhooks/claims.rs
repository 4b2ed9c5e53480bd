//! The dispatcher's claims: which due deliveries an instance takes (the domain's
//! `claim::choose` decides), their leases, and the claimed deliveries read back.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::super::endpoint_columns::{ENDPOINT_COLUMNS, EndpointColumns};
use super::super::event_payload::event_data;
use super::super::write::WriteTx;
use super::attempts::insert_attempt;
use super::{Conn, Db, dialect, push_in_list};
use crate::handoff::{Handed, HandedDelivery};
use crate::webhooks::*;
use crate::{StoreError, StoreResult};
use serde_json::Value;
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::NewEvent;
use switchboard_domain::webhooks::claim;

#[derive(sqlx::FromRow)]
struct CandidateRow {
    id: i64,
    endpoint_id: Option<i64>,
    attempts: i64,
    lease_token: Option<Uuid>,
    last_attempt_at: Option<Timestamp>,
    next_attempt_at: Option<Timestamp>,
}

/// A claimed delivery read back: its row with its endpoint's, and its event's.
struct ClaimRow {
    d: ClaimedRow,
    ev: ClaimedEvent,
}

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    attempts: i64,
    event_id: i64,
    sequence: Option<i64>,
    #[sqlx(flatten)]
    ep: EndpointColumns,
}

#[derive(Clone, sqlx::FromRow)]
struct ClaimedEvent {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    name: String,
    data: Json<Value>,
    channel: Option<Json<ChannelIdentity>>,
    occurred_at: Timestamp,
    envelope: Option<String>,
    trace: Option<String>,
}

impl ClaimRow {
    /// The claimed delivery this row reads back, with its claim's token, lease and
    /// (`ahead`, `claimed_from`), and its endpoint's retired secrets (taken from `retired`).
    fn into_claimed(
        self,
        token: Uuid,
        lease_until: Timestamp,
        (ahead, claimed_from): (bool, ClaimedFrom),
        retired: &mut HashMap<i64, Vec<Vec<u8>>>,
    ) -> StoreResult<ClaimedDelivery> {
        let ClaimRow { d: r, ev } = self;
        let retired = r.ep.ep_id.and_then(|id| retired.remove(&id));
        let endpoint = r.ep.into_endpoint(retired.unwrap_or_default())?;
        let data = event_data(ev.data.0, ev.envelope.as_deref())?;
        let event = NewEvent {
            uuid: ev.uuid,
            org_id: ev.org_id,
            name: ev.name,
            data,
            channel: ev.channel.map(|c| c.0),
            occurred_at: ev.occurred_at,
            test: false,
            sample: false,
            trace: ev.trace,
        };
        // Events written before envelopes were kept have their envelope built now.
        let envelope = ev.envelope.unwrap_or_else(|| event.envelope_text());
        Ok(ClaimedDelivery {
            id: r.id,
            token,
            uuid: r.uuid,
            org_id: r.org_id,
            attempt: r.attempts,
            event,
            envelope,
            sequence: r.sequence,
            endpoint,
            lease_until,
            ahead,
            claimed_from,
        })
    }
}

/// Claims due deliveries inside `tx` (see [`ClaimRequest`]).
pub(super) async fn claim_in(
    tx: &mut WriteTx<'_>,
    req: &ClaimRequest,
) -> StoreResult<Vec<ClaimedDelivery>> {
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
    record_interrupted(tx, &chosen, req.now).await?;
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
    dialect::push_id_list(&mut qb, &ids);
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
    let rows = read_claim_rows(tx, &ids, None).await?;
    let leases = lengthen_leases(tx, &rows, req).await?;
    let mut retired = retired_secrets(tx, &rows, req.now).await?;

    rows.into_iter()
        .map(|r| {
            let (ahead, from) = claimed_from
                .remove(&r.d.id)
                .ok_or_else(|| StoreError::Other("a claimed delivery was not read back".into()))?;
            let lease_until = leases.get(&r.d.id).copied().unwrap_or(req.lease_until);
            r.into_claimed(req.token, lease_until, (ahead, from), &mut retired)
        })
        .collect()
}

/// Reads back the deliveries a committed transaction handed to this process (see
/// `crate::handoff`), those still leased to it.
pub(super) async fn read_handed(
    conn: &mut Conn,
    handed: &Handed,
    now: Timestamp,
) -> StoreResult<Vec<ClaimedDelivery>> {
    let ids: Vec<i64> = handed.deliveries.iter().map(|d| d.id).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = read_claim_rows(conn, &ids, Some(handed.token)).await?;
    let mut retired = retired_secrets(conn, &rows, now).await?;
    let by_id: HashMap<i64, &HandedDelivery> =
        handed.deliveries.iter().map(|d| (d.id, d)).collect();
    rows.into_iter()
        .map(|r| {
            let d = by_id[&r.d.id];
            r.into_claimed(
                handed.token,
                d.lease_until,
                (d.ahead, handed_from(d)),
                &mut retired,
            )
        })
        .collect()
}

/// A handed delivery as it would be unclaimed: due when it was written, no attempt made.
fn handed_from(d: &HandedDelivery) -> ClaimedFrom {
    ClaimedFrom {
        last_attempt_at: None,
        next_attempt_at: Some(d.written_at),
    }
}

/// The claimed deliveries `ids` with their events and endpoints, in id order (only those still
/// leased by `token`, when given). The events are read by their own ids, not joined: on
/// partitioned tables (PostgreSQL, `partitions.rs`) each statement's plan then opens only the
/// partitions its ids are in, where planning a join of the two tables opened every partition of
/// both (about 2 ms a claim with seventeen partitions).
async fn read_claim_rows(
    conn: &mut Conn,
    ids: &[i64],
    token: Option<Uuid>,
) -> StoreResult<Vec<ClaimRow>> {
    static SELECT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT d.id, d.uuid, d.org_id, d.attempts, d.event_id, d.sequence, {ENDPOINT_COLUMNS}
             FROM webhook_deliveries d
             LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
             WHERE d.id"
        )
    });
    let mut qb = QueryBuilder::<Db>::new(SELECT.as_str());
    dialect::push_id_list(&mut qb, ids);
    if let Some(token) = token {
        qb.push(" AND d.lease_token = ").push_bind(token);
    }
    qb.push(" ORDER BY d.id");
    let rows: Vec<ClaimedRow> = qb.build_query_as().fetch_all(&mut *conn).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut event_ids: Vec<i64> = rows.iter().map(|r| r.event_id).collect();
    event_ids.sort_unstable();
    event_ids.dedup();
    let mut qb = QueryBuilder::<Db>::new(
        "SELECT id, uuid, org_id, name, data, channel, occurred_at, envelope, trace FROM events WHERE id",
    );
    dialect::push_id_list(&mut qb, &event_ids);
    let events: HashMap<i64, ClaimedEvent> = qb
        .build_query_as::<ClaimedEvent>()
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|e| (e.id, e))
        .collect();
    // As the join did: a delivery whose event is gone is not read back (a delivery refers to
    // its event, written before it and purged after it; one event may go with several).
    Ok(rows
        .into_iter()
        .filter_map(|d| {
            let ev = events.get(&d.event_id)?.clone();
            Some(ClaimRow { d, ev })
        })
        .collect())
}

/// Records the interrupted attempt of each chosen delivery whose earlier claim's lease expired
/// (the instance making that attempt stopped before recording its outcome).
async fn record_interrupted(
    conn: &mut Conn,
    chosen: &[(CandidateRow, bool)],
    now: Timestamp,
) -> StoreResult<()> {
    for (c, _) in chosen.iter().filter(|(c, _)| c.lease_token.is_some()) {
        insert_attempt(
            conn,
            c.id,
            &AttemptRecord {
                number: c.attempts,
                url: None,
                started_at: c.last_attempt_at.unwrap_or(now),
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
    Ok(())
}

/// A delivery to an endpoint whose own time limit is longer than the deployment's is leased
/// that much longer: its lease covers its attempt. Returns the leases lengthened.
async fn lengthen_leases(
    conn: &mut Conn,
    rows: &[ClaimRow],
    req: &ClaimRequest,
) -> StoreResult<HashMap<i64, Timestamp>> {
    let deployment_ms = i64::try_from(req.timeout.as_millis()).unwrap_or(i64::MAX);
    let mut longer: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in rows {
        if let Some(t) = r.d.ep.ep_timeout_ms.filter(|t| *t > deployment_ms) {
            longer.entry(t - deployment_ms).or_default().push(r.d.id);
        }
    }
    let mut leases: HashMap<i64, Timestamp> = HashMap::new();
    for (extra_ms, ids) in longer {
        let until = req
            .lease_until
            .saturating_add(std::time::Duration::from_millis(extra_ms.unsigned_abs()));
        let mut qb = QueryBuilder::<Db>::new("UPDATE webhook_deliveries SET lease_until = ");
        qb.push_bind(until).push(" WHERE id");
        dialect::push_id_list(&mut qb, &ids);
        qb.build().execute(&mut *conn).await?;
        leases.extend(ids.into_iter().map(|id| (id, until)));
    }
    Ok(leases)
}

/// Retired secrets still in their grace period, for the endpoints of these rows (endpoint id
/// -> sealed secrets, newest first).
async fn retired_secrets(
    conn: &mut Conn,
    rows: &[ClaimRow],
    now: Timestamp,
) -> StoreResult<HashMap<i64, Vec<Vec<u8>>>> {
    let endpoint_ids: Vec<i64> = rows
        .iter()
        .filter_map(|r| r.d.ep.ep_id)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut retired: HashMap<i64, Vec<Vec<u8>>> = HashMap::new();
    if !endpoint_ids.is_empty() {
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT endpoint_id, signing_secret FROM webhook_endpoint_secrets WHERE expires_at > ",
        );
        qb.push_bind(now).push(" AND endpoint_id");
        push_in_list(&mut qb, &endpoint_ids);
        qb.push(" ORDER BY expires_at DESC, id DESC");
        let secrets: Vec<(i64, Vec<u8>)> = qb.build_query_as().fetch_all(&mut *conn).await?;
        for (endpoint_id, sealed) in secrets {
            retired.entry(endpoint_id).or_default().push(sealed);
        }
    }
    Ok(retired)
}
