//! The fan-out: every outbox event becomes one delivery per subscribed active endpoint, in
//! the transaction that writes the event.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::endpoint_columns::{ENDPOINT_COLUMNS, EndpointColumns};
use super::webhook_sql as sql;
use super::{Conn, Db};
use crate::StoreResult;
use crate::handoff::{Candidate, Handed, HandedDelivery, Handoff, Uncommitted};
use crate::webhooks::{ClaimedDelivery, ClaimedEndpoint, ClaimedFrom};
use switchboard_domain::Timestamp;
use switchboard_domain::event::NewEvent;
use switchboard_domain::webhooks::catalogue::{INTEGRATION_TEST, subscribed};
use switchboard_domain::webhooks::endpoint::EndpointOrdering;
use switchboard_domain::webhooks::filter::Filter;

/// An active endpoint, as the fan-out needs it.
struct Target {
    id: i64,
    uuid: Uuid,
    url: String,
    events: Vec<String>,
    ordering: EndpointOrdering,
    filter: Option<Filter>,
    /// The endpoint's own attempt time limit (a handed delivery's lease covers it).
    timeout_ms: Option<i64>,
    /// The endpoint as a claimed delivery carries it, when that is all of it (no retired
    /// secret in its grace period): a delivery handed off carries it to the dispatcher.
    claimed: Option<ClaimedEndpoint>,
}

#[derive(sqlx::FromRow)]
struct TargetRow {
    events: Json<Vec<String>>,
    ordering: String,
    filter: Option<String>,
    /// Whether the endpoint has retired secrets still in their grace period.
    retiring: bool,
    #[sqlx(flatten)]
    ep: EndpointColumns,
}

/// An endpoint's stored filter, parsed. A filter is checked before it is stored; one that no
/// longer parses (a rule changed since) filters nothing rather than losing events.
pub(super) fn stored_filter(text: Option<&str>) -> Option<Filter> {
    let text = text?;
    match serde_json::from_str::<Value>(text)
        .map_err(|e| e.to_string())
        .and_then(|v| Filter::parse(&v))
    {
        Ok(f) => Some(f),
        Err(issue) => {
            tracing::warn!(%issue, "an endpoint's stored filter does not parse: it filters nothing");
            None
        }
    }
}

/// The state of one `write_effects_tx` call: each organization's active endpoints are loaded
/// once, how many deliveries were written for a claim (to wake the dispatchers), and those
/// written leased to this process's dispatcher (see `crate::handoff`).
#[derive(Default)]
pub(crate) struct FanOut {
    targets: HashMap<i64, Vec<Target>>,
    deliveries: usize,
    handoff: Option<Handoff>,
    /// Deliveries taken from the offer by this fan-out (given back if dropped unsent).
    handed: Option<Uncommitted>,
}

impl FanOut {
    async fn targets(
        &mut self,
        conn: &mut Conn,
        org_id: i64,
        now: Timestamp,
    ) -> StoreResult<&[Target]> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.targets.entry(org_id) {
            static ACTIVE_ENDPOINTS: LazyLock<String> = LazyLock::new(|| {
                format!(
                    "SELECT ep.events, ep.ordering, ep.filter,
                            EXISTS (SELECT 1 FROM webhook_endpoint_secrets s
                                    WHERE s.endpoint_id = ep.id AND s.expires_at > $2) AS retiring,
                            {ENDPOINT_COLUMNS}
                     FROM webhook_endpoints ep
                     WHERE ep.org_id = $1 AND ep.status = {} AND ep.deleted_at IS NULL ORDER BY ep.legacy, ep.id",
                    *sql::ACTIVE
                )
            });
            let rows: Vec<TargetRow> = sqlx::query_as(&ACTIVE_ENDPOINTS)
                .bind(org_id)
                .bind(now)
                .fetch_all(&mut *conn)
                .await?;
            let mut targets = Vec::with_capacity(rows.len());
            for row in rows {
                let retiring = row.retiring;
                let Some(endpoint) = row.ep.into_endpoint(Vec::new())? else {
                    continue;
                };
                targets.push(Target {
                    id: endpoint.id,
                    uuid: endpoint.uuid,
                    // A broker target is the same target only with the same stream (or
                    // subject, routing key): its whole target is the key.
                    url: match (
                        endpoint.controls.destination.as_str(),
                        &endpoint.controls.target,
                    ) {
                        ("https", _) | (_, None) => endpoint.url.clone(),
                        (kind, Some(target)) => format!("{kind} {target}"),
                    },
                    events: row.events.0,
                    ordering: EndpointOrdering::parse(&row.ordering).unwrap_or_default(),
                    filter: stored_filter(row.filter.as_deref()),
                    timeout_ms: endpoint.controls.timeout_ms,
                    claimed: (!retiring).then_some(endpoint),
                });
            }
            slot.insert(targets);
        }
        Ok(&self.targets[&org_id])
    }

    /// The endpoint `id` of the organization's targets as a claimed delivery carries it.
    fn claimed_endpoint(&self, org_id: i64, id: i64) -> Option<&ClaimedEndpoint> {
        self.targets
            .get(&org_id)?
            .iter()
            .find(|t| t.id == id)?
            .claimed
            .as_ref()
    }

    /// A fan-out that hands deliveries to this process's dispatcher when its offer has room.
    pub(crate) fn with_handoff(handoff: Handoff) -> FanOut {
        FanOut {
            handed: Some(Uncommitted::new(handoff.clone())),
            handoff: Some(handoff),
            ..FanOut::default()
        }
    }

    /// How many deliveries were written for a claim (not handed off).
    pub(crate) fn deliveries(&self) -> usize {
        self.deliveries
    }

    /// Moves the deliveries handed off so far into `into` (the transaction's, which passes
    /// them to the dispatcher after its commit).
    pub(crate) fn take_handed(&mut self, into: &mut Uncommitted) {
        if let Some(handed) = &mut self.handed {
            into.absorb(handed);
        }
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

pub(super) async fn insert_event_row(conn: &mut Conn, e: &NewEvent) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope, test, trace, message_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
    )
    .bind(e.uuid)
    .bind(e.org_id)
    .bind(&e.name)
    .bind(super::event_payload::DATA_IN_ENVELOPE)
    .bind(e.channel.as_ref().map(Json))
    .bind(e.occurred_at)
    .bind(e.envelope_text())
    .bind(e.test)
    .bind(e.trace.clone().or_else(crate::observe::current_trace))
    .bind(e.message_id())
    .fetch_one(&mut *conn)
    .await?)
}

/// A delivery to write.
pub(in super::super) struct NewDelivery<'a> {
    pub uuid: Uuid,
    pub org_id: i64,
    pub event_id: i64,
    pub endpoint_id: i64,
    pub event_name: &'a str,
    /// `event`, `test` or `recovery`.
    pub trigger: &'static str,
    /// The contact chain on an ordered endpoint (see `EndpointOrdering::order_key`).
    pub order_key: Option<Uuid>,
    pub now: Timestamp,
}

/// Writes a delivery, due at once, unless it belongs to a contact's chain on an ordered
/// endpoint in which an earlier delivery is unfinished: then it is held (`due_at` NULL) until
/// that one ends (`chains::release_next`). The chain row, locked for the rest of the
/// transaction, gives the sequence number and makes the decision race-free across instances.
/// Returns whether the delivery is due now.
pub(in super::super) async fn insert_delivery(
    conn: &mut Conn,
    d: &NewDelivery<'_>,
) -> StoreResult<bool> {
    if let Some(key) = d.order_key {
        let sequence = super::chains::next_sequence(conn, d.endpoint_id, key).await?;
        // Held when the chain has an unfinished delivery: decided by the INSERT itself (one
        // statement fewer per ordered delivery; the chain's lock is already held).
        static INSERT_ORDERED: LazyLock<String> = LazyLock::new(|| {
            format!(
                "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, attempts,
                                                 due_at, next_attempt_at, created_at, updated_at, trigger, order_key,
                                                 sequence)
                 SELECT $1, $2, $3, $4, $5, {initial}, 0, h.due, h.due, $7, $7, $8, $9, $10
                 FROM (SELECT CASE WHEN EXISTS (
                           SELECT 1 FROM webhook_deliveries u
                           WHERE u.endpoint_id = $4 AND u.order_key = $9 AND u.status IN {unfinished})
                       THEN NULL ELSE $6 END AS due) h
                 RETURNING due_at",
                initial = *sql::INITIAL,
                unfinished = *sql::UNFINISHED,
            )
        });
        let due_at: Option<Timestamp> = sqlx::query_scalar(&INSERT_ORDERED)
            .bind(d.uuid)
            .bind(d.org_id)
            .bind(d.event_id)
            .bind(d.endpoint_id)
            .bind(d.event_name)
            .bind(d.now)
            .bind(d.now)
            .bind(d.trigger)
            .bind(key)
            .bind(sequence)
            .fetch_one(&mut *conn)
            .await?;
        return Ok(due_at.is_some());
    }
    // Unordered: due now, no chain.
    let (sequence, due_at) = (None::<i64>, Some(d.now));
    static INSERT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, attempts,
                                             due_at, next_attempt_at, created_at, updated_at, trigger, order_key,
                                             sequence)
             VALUES ($1, $2, $3, $4, $5, {}, 0, $6, $7, $8, $9, $10, $11, $12)",
            *sql::INITIAL
        )
    });
    sqlx::query(&INSERT)
        .bind(d.uuid)
        .bind(d.org_id)
        .bind(d.event_id)
        .bind(d.endpoint_id)
        .bind(d.event_name)
        .bind(due_at)
        .bind(due_at)
        .bind(d.now)
        .bind(d.now)
        .bind(d.trigger)
        .bind(d.order_key)
        .bind(sequence)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

/// Inserts unordered deliveries (no `order_key`: no chain to number), due now, in one
/// statement per 500 rows: a recovery page is one round trip, not one per event.
pub(in super::super) async fn insert_unordered_deliveries(
    conn: &mut Conn,
    ds: &[NewDelivery<'_>],
) -> StoreResult<()> {
    for chunk in ds.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, attempts,
                                             due_at, next_attempt_at, created_at, updated_at, trigger) ",
        );
        qb.push_values(chunk, |mut b, d| {
            debug_assert!(d.order_key.is_none());
            b.push_bind(d.uuid)
                .push_bind(d.org_id)
                .push_bind(d.event_id)
                .push_bind(d.endpoint_id)
                .push_bind(d.event_name)
                .push(&*sql::INITIAL)
                .push("0")
                .push_bind(d.now)
                .push_bind(d.now)
                .push_bind(d.now)
                .push_bind(d.now)
                .push_bind(d.trigger);
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// The deliveries an event fans out into, as `(endpoint id, order key, endpoint's own time
/// limit)`: one per active
/// endpoint of its organization whose subscriptions and filter match, one per distinct URL (unified
/// dispatch, specification 6.2.2): modern endpoints come before legacy records, so a URL that
/// both hold gets the modern (signed) delivery, and several records with one URL get one
/// delivery. `integration.test` events are delivered only by the test operation; a
/// `webhook.*` event about an endpoint never goes to that endpoint.
async fn targets_of(
    conn: &mut Conn,
    e: &NewEvent,
    fan: &mut FanOut,
) -> StoreResult<Vec<(i64, Option<Uuid>, Option<i64>)>> {
    if e.name == INTEGRATION_TEST || e.test {
        return Ok(Vec::new());
    }
    let exclude = if e.name.starts_with("webhook.") {
        e.data
            .get("endpoint_uuid")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
    } else {
        None
    };
    let mut chosen: Vec<(i64, Option<Uuid>, Option<i64>)> = Vec::new();
    let mut urls = HashSet::new();
    // The envelope as delivered, built once and only for an endpoint with a filter.
    let mut envelope: Option<Value> = None;
    for t in fan.targets(conn, e.org_id, e.occurred_at).await? {
        if Some(t.uuid) == exclude || !subscribed(&t.events, &e.name) {
            continue;
        }
        if let Some(filter) = &t.filter {
            if !filter.matches(envelope.get_or_insert_with(|| e.envelope())) {
                continue;
            }
        }
        if urls.insert(url_key(&t.url)) {
            chosen.push((t.id, t.ordering.order_key(&e.data), t.timeout_ms));
        }
    }
    Ok(chosen)
}

/// The most events inserted by one statement (10 parameters each: far below SQLite's limit of
/// 32 766 parameters).
const EVENTS_PER_STATEMENT: usize = 500;

/// Inserts outbox events and their deliveries (see [`targets_of`]), with one multi-row
/// `INSERT` per [`EVENTS_PER_STATEMENT`] events and one for all their unordered deliveries (a
/// few statements per change, or per group commit, instead of two or more per event).
/// Deliveries to ordered endpoints are numbered in their chains one at a time, in the events'
/// order. Each event must carry its trace already (the caller resolves it).
pub(crate) async fn insert_events(
    conn: &mut Conn,
    events: &[NewEvent],
    fan: &mut FanOut,
) -> StoreResult<()> {
    let mut ids: HashMap<Uuid, i64> = HashMap::with_capacity(events.len());
    // The envelopes as delivered: stored with the events, and carried by deliveries handed off.
    let envelopes: Vec<String> = events.iter().map(NewEvent::envelope_text).collect();
    for (chunk, texts) in events
        .chunks(EVENTS_PER_STATEMENT)
        .zip(envelopes.chunks(EVENTS_PER_STATEMENT))
    {
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO events (uuid, org_id, name, data, channel, occurred_at, envelope, test, trace, message_id) ",
        );
        qb.push_values(chunk.iter().zip(texts), |mut b, (e, envelope)| {
            b.push_bind(e.uuid)
                .push_bind(e.org_id)
                .push_bind(e.name.as_str())
                .push_bind(super::event_payload::DATA_IN_ENVELOPE)
                .push_bind(e.channel.as_ref().map(Json))
                .push_bind(e.occurred_at)
                .push_bind(envelope.as_str())
                .push_bind(e.test)
                .push_bind(e.trace.as_deref())
                .push_bind(e.message_id());
        });
        qb.push(" RETURNING id, uuid");
        let rows: Vec<(i64, Uuid)> = qb.build_query_as().fetch_all(&mut *conn).await?;
        ids.extend(rows.into_iter().map(|(id, uuid)| (uuid, id)));
    }
    let mut unordered: Vec<Unordered<'_>> = Vec::new();
    for (e, envelope) in events.iter().zip(&envelopes) {
        let event_id = *ids
            .get(&e.uuid)
            .ok_or_else(|| crate::StoreError::Other("an inserted event was not returned".into()))?;
        for (endpoint_id, order_key, timeout_ms) in targets_of(conn, e, fan).await? {
            let d = NewDelivery {
                uuid: Uuid::now_v7(),
                org_id: e.org_id,
                event_id,
                endpoint_id,
                event_name: &e.name,
                trigger: "event",
                order_key,
                now: e.occurred_at,
            };
            if order_key.is_some() {
                insert_delivery(conn, &d).await?;
                fan.deliveries += 1;
            } else {
                unordered.push(Unordered {
                    d,
                    timeout_ms,
                    event: e,
                    envelope,
                });
            }
        }
    }
    hand_off_or_insert(conn, unordered, fan).await
}

/// An unordered delivery to write, with its event (what a hand-off carries).
struct Unordered<'a> {
    d: NewDelivery<'a>,
    /// Its endpoint's own time limit.
    timeout_ms: Option<i64>,
    event: &'a NewEvent,
    envelope: &'a str,
}

/// Inserts unordered deliveries: those the dispatcher's offer takes leased to it (handed off
/// after the commit), the others due for a claim.
async fn hand_off_or_insert(
    conn: &mut Conn,
    unordered: Vec<Unordered<'_>>,
    fan: &mut FanOut,
) -> StoreResult<()> {
    let taken = match (&fan.handoff, unordered.first()) {
        (Some(handoff), Some(first)) => {
            let candidates: Vec<Candidate> = unordered
                .iter()
                .map(|u| Candidate {
                    endpoint_id: u.d.endpoint_id,
                    endpoint_timeout_ms: u.timeout_ms,
                })
                .collect();
            handoff.take(&candidates, first.d.now)
        }
        _ => None,
    };
    let Some((token, taken)) = taken else {
        fan.deliveries += unordered.len();
        let ds: Vec<NewDelivery<'_>> = unordered.into_iter().map(|u| u.d).collect();
        return insert_unordered_deliveries(conn, &ds).await;
    };
    let mut leased = Vec::new();
    let mut due = Vec::new();
    for (u, t) in unordered.into_iter().zip(taken) {
        match t {
            Some(t) => leased.push((u, t)),
            None => due.push(u.d),
        }
    }
    fan.deliveries += due.len();
    insert_unordered_deliveries(conn, &due).await?;
    let deliveries = insert_leased_deliveries(conn, &leased, token, fan).await?;
    if let Some(handed) = &mut fan.handed {
        handed.push(Handed { token, deliveries });
    }
    Ok(())
}

/// Inserts unordered deliveries leased to this process (`token`), as a claim leaves them:
/// their first attempt counted and started now. Returns them as handed, each with the
/// delivery as a read-back would find it when its endpoint is all known (see
/// [`HandedDelivery::claimed`]).
async fn insert_leased_deliveries(
    conn: &mut Conn,
    ds: &[(Unordered<'_>, crate::handoff::Taken)],
    token: Uuid,
    fan: &FanOut,
) -> StoreResult<Vec<HandedDelivery>> {
    let mut handed = Vec::with_capacity(ds.len());
    for chunk in ds.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, attempts,
                                             due_at, next_attempt_at, created_at, updated_at, trigger,
                                             lease_token, lease_until, last_attempt_at) ",
        );
        qb.push_values(chunk, |mut b, (u, t)| {
            let d = &u.d;
            b.push_bind(d.uuid)
                .push_bind(d.org_id)
                .push_bind(d.event_id)
                .push_bind(d.endpoint_id)
                .push_bind(d.event_name)
                .push(&*sql::INITIAL)
                .push("1")
                .push_bind(d.now)
                .push("NULL")
                .push_bind(d.now)
                .push_bind(d.now)
                .push_bind(d.trigger)
                .push_bind(token)
                .push_bind(t.lease_until)
                .push_bind(d.now);
        });
        qb.push(" RETURNING id, uuid");
        let ids: HashMap<Uuid, i64> = qb
            .build_query_as::<(i64, Uuid)>()
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|(id, uuid)| (uuid, id))
            .collect();
        for (u, t) in chunk {
            let d = &u.d;
            let id = *ids.get(&d.uuid).ok_or_else(|| {
                crate::StoreError::Other("an inserted delivery was not returned".into())
            })?;
            let claimed = fan
                .claimed_endpoint(d.org_id, d.endpoint_id)
                .map(|endpoint| {
                    Box::new(ClaimedDelivery {
                        id,
                        token,
                        uuid: d.uuid,
                        org_id: d.org_id,
                        attempt: 1,
                        event: NewEvent {
                            uuid: u.event.uuid,
                            org_id: u.event.org_id,
                            name: u.event.name.clone(),
                            data: u.event.data.clone(),
                            channel: u.event.channel.clone(),
                            occurred_at: u.event.occurred_at,
                            test: false,
                            sample: false,
                            trace: u.event.trace.clone(),
                        },
                        envelope: u.envelope.to_owned(),
                        sequence: None,
                        endpoint: Some(endpoint.clone()),
                        lease_until: t.lease_until,
                        ahead: t.ahead,
                        claimed_from: ClaimedFrom {
                            last_attempt_at: None,
                            next_attempt_at: Some(d.now),
                        },
                    })
                });
            handed.push(HandedDelivery {
                id,
                endpoint_id: d.endpoint_id,
                ahead: t.ahead,
                lease_until: t.lease_until,
                written_at: d.now,
                claimed,
            });
        }
    }
    Ok(handed)
}
