use async_trait::async_trait;
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::event_payload::event_data;
use super::{Backend, Db};
use crate::{EventStore, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::event::{Actor, Effects, EventCategory, NewEvent, OrgEvent, Subject};

/// What [`write_effects_tx`] wrote, for the wake-ups after the commit.
pub(super) struct Written {
    /// Outbox events were written.
    pub events: bool,
    /// The events fanned out into webhook deliveries.
    pub deliveries: bool,
}

/// Writes outbox events and organization log entries inside the caller's transaction (see
/// `WriteTx`, the only caller). Every log entry of category `audit` also goes to the outbox as
/// `audit.recorded`. With `defer`, the log entries are written now and the outbox events are
/// added to `defer` (each with its trace resolved now) for [`write_events_tx`] to write
/// together before the commit.
pub(super) async fn write_effects_tx(
    conn: &mut <Db as sqlx::Database>::Connection,
    effects: &Effects,
    fan: &mut super::fan_out::FanOut,
    defer: Option<&mut Vec<NewEvent>>,
) -> StoreResult<Written> {
    let audit: Vec<NewEvent> = effects
        .log
        .iter()
        .filter(|e| e.category == EventCategory::Audit)
        .map(OrgEvent::audit_recorded)
        .collect();
    for e in &effects.log {
        insert_log_entry(conn, e).await?;
    }
    let written = !effects.outbox.is_empty() || !audit.is_empty();
    let events = effects.outbox.iter().chain(&audit).map(|e| NewEvent {
        trace: e.trace.clone().or_else(crate::observe::current_trace),
        ..e.clone()
    });
    if let Some(deferred) = defer {
        deferred.extend(events);
        return Ok(Written {
            events: written,
            deliveries: false,
        });
    }
    // Each event fans out into webhook deliveries in this same transaction.
    let events: Vec<NewEvent> = events.collect();
    Ok(Written {
        events: written,
        deliveries: write_events_tx(conn, &events, fan).await?,
    })
}

/// Writes outbox events (those that [`write_effects_tx`] deferred, or its own) and their
/// deliveries, with a few multi-row statements. Returns whether deliveries were written.
pub(super) async fn write_events_tx(
    conn: &mut <Db as sqlx::Database>::Connection,
    events: &[NewEvent],
    fan: &mut super::fan_out::FanOut,
) -> StoreResult<bool> {
    if events.is_empty() {
        return Ok(false);
    }
    let before = fan.deliveries();
    super::fan_out::insert_events(conn, events, fan).await?;
    Ok(fan.deliveries() > before)
}

async fn insert_log_entry(
    conn: &mut <Db as sqlx::Database>::Connection,
    e: &OrgEvent,
) -> StoreResult<()> {
    let (actor_type, key_id, key_prefix) = match &e.actor {
        Actor::ApiKey {
            api_key_id,
            api_key_prefix,
        } => ("api_key", Some(*api_key_id), Some(api_key_prefix.as_str())),
        Actor::Admin => ("admin", None, None),
        Actor::System => ("system", None, None),
    };
    sqlx::query(
        "INSERT INTO org_events (uuid, org_id, type, category, actor_type, actor_key_id, actor_key_prefix,
                                 subject_type, subject_id, details, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(e.uuid)
    .bind(e.org_id)
    .bind(&e.event_type)
    .bind(e.category.as_str())
    .bind(actor_type)
    .bind(key_id)
    .bind(key_prefix)
    .bind(e.subject.as_ref().map(|s| s.kind.as_str()))
    .bind(e.subject.as_ref().map(|s| s.id.as_str()))
    .bind(Json(&e.details))
    .bind(e.created_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct EventRow {
    uuid: Uuid,
    org_id: i64,
    name: String,
    data: Json<Value>,
    channel: Option<Json<ChannelIdentity>>,
    occurred_at: Timestamp,
    test: bool,
    trace: Option<String>,
    envelope: Option<String>,
}

#[derive(sqlx::FromRow)]
pub(super) struct OrgEventRow {
    uuid: Uuid,
    org_id: i64,
    #[sqlx(rename = "type")]
    event_type: String,
    category: String,
    actor_type: String,
    actor_key_id: Option<i64>,
    actor_key_prefix: Option<String>,
    subject_type: Option<String>,
    subject_id: Option<String>,
    details: Json<Value>,
    created_at: Timestamp,
}

impl TryFrom<OrgEventRow> for OrgEvent {
    type Error = StoreError;
    fn try_from(r: OrgEventRow) -> Result<Self, StoreError> {
        let actor = match (r.actor_type.as_str(), r.actor_key_id) {
            ("api_key", Some(id)) => Actor::ApiKey {
                api_key_id: id,
                api_key_prefix: r.actor_key_prefix.unwrap_or_default(),
            },
            ("admin", _) => Actor::Admin,
            ("system", _) => Actor::System,
            (other, _) => return Err(StoreError::Other(format!("unknown actor type {other}"))),
        };
        Ok(OrgEvent {
            uuid: r.uuid,
            org_id: r.org_id,
            event_type: r.event_type,
            category: r
                .category
                .parse::<EventCategory>()
                .map_err(StoreError::Other)?,
            actor,
            subject: match (r.subject_type, r.subject_id) {
                (Some(kind), Some(id)) => Some(Subject { kind, id }),
                _ => None,
            },
            details: r.details.0,
            created_at: r.created_at,
        })
    }
}

#[async_trait]
impl EventStore for Backend {
    async fn write_effects(&self, effects: Effects) -> StoreResult<()> {
        if effects.is_empty() {
            return Ok(());
        }
        self.write().await?.commit(effects).await
    }

    async fn list_outbox_events(&self, org_id: i64, limit: i64) -> StoreResult<Vec<NewEvent>> {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT uuid, org_id, name, data, channel, occurred_at, test, trace, envelope FROM events WHERE org_id = $1 ORDER BY id LIMIT $2",
        )
        .bind(org_id)
        .bind(limit)
        .fetch_all(self.reader())
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(NewEvent {
                    uuid: r.uuid,
                    org_id: r.org_id,
                    name: r.name,
                    data: event_data(r.data.0, r.envelope.as_deref())?,
                    channel: r.channel.map(|c| c.0),
                    occurred_at: r.occurred_at,
                    test: r.test,
                    sample: false,
                    trace: r.trace,
                })
            })
            .collect()
    }

    async fn list_org_events(&self, org_id: i64, limit: i64) -> StoreResult<Vec<OrgEvent>> {
        let rows: Vec<OrgEventRow> = sqlx::query_as(
            "SELECT uuid, org_id, type, category, actor_type, actor_key_id, actor_key_prefix, subject_type, subject_id,
                    details, created_at
             FROM org_events WHERE org_id = $1 ORDER BY id LIMIT $2",
        )
        .bind(org_id)
        .bind(limit)
        .fetch_all(self.reader())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
