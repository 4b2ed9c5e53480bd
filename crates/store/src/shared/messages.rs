use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Backend, Db};
use crate::{
    BatchEffectsFn, BatchOutcome, ChangeOutcome, ClaimCompletion, ConversationPolicy, EffectsFn,
    HistoryCursor, MessageFilter, MessageRecord, MessageStep, MessageStore, NewChange, NewConsent,
    NewOutbound, ProviderBatch, RecipientRef, RecordedOutbound, StoreError, StoreResult,
};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::{ChannelIdentity, ChannelType};
use switchboard_domain::contact::{Contact, Conversation};
use switchboard_domain::message::timeline::{self, StepKind};
use switchboard_domain::message::{Direction, InboundContext, MessageStatus, MessageType};

use super::Conn;
use super::contacts::contact_by_phone;
use super::conversations::{
    contact_with_open_conversation, continue_or_open, fetch_conversation, open_conversation_of,
};

macro_rules! select_messages {
    ($rest:literal) => {
        concat!(
            "SELECT m.id, m.uuid, m.org_id, m.channel_id, ch.uuid AS channel_uuid, ch.slug AS channel_slug,
                    ch.type AS channel_type, ch.name AS channel_name, ch.identifier AS channel_identifier,
                    m.contact_id, ct.uuid AS contact_uuid, m.conversation_id, cv.uuid AS conversation_uuid,
                    m.api_key_id, m.direction, m.type, m.status, m.content, m.provider_message_id, m.error,
                    m.created_at, m.updated_at, cs.uuid AS consent_uuid, m.trace,
                    m.context, m.edited_at, m.deleted_at, m.pricing, m.provider_conversation
             FROM messages m
             JOIN channels ch ON ch.id = m.channel_id
             JOIN contacts ct ON ct.id = m.contact_id
             LEFT JOIN conversations cv ON cv.id = m.conversation_id
             LEFT JOIN consents cs ON cs.id = m.consent_id ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct MessageRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    channel_id: i64,
    channel_uuid: Uuid,
    channel_slug: String,
    channel_type: String,
    channel_name: String,
    channel_identifier: String,
    contact_id: i64,
    contact_uuid: Uuid,
    conversation_id: Option<i64>,
    conversation_uuid: Option<Uuid>,
    api_key_id: Option<i64>,
    direction: String,
    #[sqlx(rename = "type")]
    message_type: String,
    status: String,
    content: Json<Value>,
    provider_message_id: Option<String>,
    error: Option<Json<Value>>,
    created_at: Timestamp,
    updated_at: Timestamp,
    consent_uuid: Option<Uuid>,
    trace: Option<String>,
    context: Option<Json<Value>>,
    edited_at: Option<Timestamp>,
    deleted_at: Option<Timestamp>,
    pricing: Option<Json<Value>>,
    provider_conversation: Option<Json<Value>>,
}

impl TryFrom<MessageRow> for MessageRecord {
    type Error = StoreError;
    fn try_from(r: MessageRow) -> Result<Self, StoreError> {
        Ok(MessageRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            channel: ChannelIdentity {
                id: r.channel_id,
                uuid: r.channel_uuid,
                slug: r.channel_slug,
                channel_type: r
                    .channel_type
                    .parse::<ChannelType>()
                    .map_err(StoreError::Other)?,
                name: r.channel_name,
                identifier: r.channel_identifier,
            },
            contact_id: r.contact_id,
            contact_uuid: r.contact_uuid,
            conversation_id: r.conversation_id,
            conversation_uuid: r.conversation_uuid,
            api_key_id: r.api_key_id,
            direction: r
                .direction
                .parse::<Direction>()
                .map_err(StoreError::Other)?,
            message_type: r
                .message_type
                .parse::<MessageType>()
                .map_err(StoreError::Other)?,
            status: r
                .status
                .parse::<MessageStatus>()
                .map_err(StoreError::Other)?,
            content: r.content.0,
            provider_message_id: r.provider_message_id,
            error: r.error.map(|e| e.0),
            created_at: r.created_at,
            updated_at: r.updated_at,
            consent_uuid: r.consent_uuid,
            trace: r.trace,
            context: r.context.and_then(|c| serde_json::from_value(c.0).ok()),
            edited_at: r.edited_at,
            deleted_at: r.deleted_at,
            pricing: r.pricing.map(|p| p.0),
            provider_conversation: r.provider_conversation.map(|p| p.0),
        })
    }
}

#[derive(sqlx::FromRow)]
struct AttemptStepRow {
    started_at: Timestamp,
    number: i64,
    duration_ms: Option<i64>,
    response_status: Option<i64>,
    error_code: Option<String>,
    delivery_uuid: Uuid,
    endpoint_uuid: Option<Uuid>,
    event_name: String,
    event_uuid: Uuid,
}

/// The first attempts kept in the delivery rows of the message's events (see
/// `super::first_attempt`), as the attempt log's steps.
async fn first_attempts_of(store: &Backend, message_id: i64) -> StoreResult<Vec<AttemptStepRow>> {
    let rows: Vec<(String, Uuid, Option<Uuid>, String, Uuid)> = sqlx::query_as(
        "SELECT d.first_attempt, d.uuid, ep.uuid, ev.name, ev.uuid
         FROM events ev
         JOIN webhook_deliveries d ON d.event_id = ev.id
         LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
         WHERE ev.message_id = $1 AND d.first_attempt IS NOT NULL",
    )
    .bind(message_id)
    .fetch_all(store.reader())
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(
            |(text, delivery_uuid, endpoint_uuid, event_name, event_uuid)| {
                let a = super::first_attempt::parse(&text)?;
                Some(AttemptStepRow {
                    started_at: a.started_at,
                    number: a.number,
                    duration_ms: a.duration_ms,
                    response_status: a.response_status,
                    error_code: a.error_code,
                    delivery_uuid,
                    endpoint_uuid,
                    event_name,
                    event_uuid,
                })
            },
        )
        .collect())
}

pub(super) async fn fetch_message(conn: &mut Conn, id: i64) -> StoreResult<MessageRecord> {
    let row: MessageRow = sqlx::query_as(select_messages!("WHERE m.id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn insert_message(
    conn: &mut Conn,
    uuid: Uuid,
    org_id: i64,
    channel_id: i64,
    contact_id: i64,
    conversation_id: Option<i64>,
    api_key_id: Option<i64>,
    direction: Direction,
    message_type: MessageType,
    status: MessageStatus,
    content: &Value,
    provider_message_id: Option<&str>,
    error: Option<&Value>,
    created_at: Timestamp,
    now: Timestamp,
    journey: &[MessageStep],
    context: Option<&InboundContext>,
) -> StoreResult<Option<i64>> {
    Ok(sqlx::query_scalar(
        "INSERT INTO messages (uuid, org_id, channel_id, contact_id, conversation_id, api_key_id, direction, type,
                               status, content, provider_message_id, error, created_at, updated_at, trace, journey,
                               context)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         ON CONFLICT (provider_message_id, channel_id) WHERE provider_message_id IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(uuid)
    .bind(org_id)
    .bind(channel_id)
    .bind(contact_id)
    .bind(conversation_id)
    .bind(api_key_id)
    .bind(direction.as_str())
    .bind(message_type.as_str())
    .bind(status.as_str())
    .bind(Json(content))
    .bind(provider_message_id)
    .bind(error.map(Json))
    .bind(created_at)
    .bind(now)
    .bind(crate::observe::current_trace())
    .bind(Json(journey))
    .bind(context.map(Json))
    .fetch_optional(&mut *conn)
    .await?)
}

/// Appends steps to a message's timeline.
pub(super) async fn insert_steps(
    conn: &mut Conn,
    message_id: i64,
    steps: &[MessageStep],
) -> StoreResult<()> {
    if steps.is_empty() {
        return Ok(());
    }
    let mut qb =
        sqlx::QueryBuilder::<Db>::new("INSERT INTO message_steps (message_id, at, kind, detail) ");
    qb.push_values(steps, |mut row, s| {
        row.push_bind(message_id)
            .push_bind(s.at)
            .push_bind(s.kind.as_str())
            .push_bind(Json(&s.detail));
    });
    qb.build().execute(&mut *conn).await?;
    Ok(())
}

pub(super) fn status_step(
    at: Timestamp,
    status: MessageStatus,
    error: Option<&Value>,
) -> MessageStep {
    MessageStep {
        at,
        kind: StepKind::Status,
        detail: timeline::status(status, error),
    }
}

pub(super) async fn message_by_provider_id(
    conn: &mut Conn,
    channel_id: i64,
    provider_message_id: &str,
) -> StoreResult<Option<MessageRecord>> {
    let row: Option<MessageRow> = sqlx::query_as(select_messages!(
        "WHERE m.channel_id = $1 AND m.provider_message_id = $2"
    ))
    .bind(channel_id)
    .bind(provider_message_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(TryInto::try_into).transpose()
}

impl Backend {
    /// Records an outbound message in one transaction: its contact (the organization's, or
    /// the one with the phone, created with `contact_name` when new), its consent evidence
    /// when given (linked to the message and to a conversation the message opens), its
    /// conversation per the policy, the message, the completion of the idempotency claim and
    /// the effects. Plain sends and catalog template sends both record through it.
    pub(super) async fn write_outbound(
        &self,
        new: NewOutbound,
        contact_name: Option<String>,
        consent: Option<NewConsent>,
        completion: Option<ClaimCompletion>,
        effects: EffectsFn<'_, RecordedOutbound>,
    ) -> StoreResult<RecordedOutbound> {
        let mut tx = self.write().await?;
        let recorded = write_outbound_in(&mut tx, new, contact_name, consent).await?;
        if let Some(completion) = completion {
            let completion = super::completions::Completion::send(&completion, &recorded)?;
            super::completions::complete_tx(&mut tx, &completion).await?;
        }
        tx.commit(effects(&recorded)).await?;
        Ok(recorded)
    }
}

/// Writes one outbound message (its contact, consent and conversation as its policy says, and
/// its send-queue row when it is recorded `queued`) inside the caller's transaction.
pub(super) async fn write_outbound_in(
    tx: &mut Conn,
    new: NewOutbound,
    contact_name: Option<String>,
    consent: Option<NewConsent>,
) -> StoreResult<RecordedOutbound> {
    // An existing contact is read with its open conversation on the channel (one statement);
    // a contact found or created by phone has its conversation looked up after.
    let (contact, contact_created, looked_up) = match &new.recipient {
        RecipientRef::Contact(id) => {
            let (c, open) = contact_with_open_conversation(tx, *id, new.channel.id).await?;
            if c.org_id != new.org_id {
                return Err(StoreError::NotFound);
            }
            (c, false, Some(open))
        }
        RecipientRef::Phone(phone) => {
            let (c, created) =
                contact_by_phone(tx, new.org_id, phone, contact_name.as_deref(), new.now).await?;
            (c, created, None)
        }
    };
    let consent_id = match &consent {
        Some(c) => Some(super::templates::insert_consent(tx, &new, contact.id, c).await?),
        None => None,
    };
    let (conversation, conversation_created) =
        record_conversation(tx, &new, &contact, looked_up, consent_id).await?;
    let trace = crate::observe::current_trace();
    let mut provider_message_id = new.provider_message_id.as_deref();
    let mut journey = new.steps.clone();
    journey.push(status_step(new.now, new.status, new.error.as_ref()));
    let id = loop {
        let inserted = insert_message(
            tx,
            new.uuid,
            new.org_id,
            new.channel.id,
            contact.id,
            conversation.as_ref().map(|c| c.id),
            new.api_key_id,
            Direction::Outbound,
            new.message_type,
            new.status,
            &new.content,
            provider_message_id,
            new.error.as_ref(),
            new.now,
            new.now,
            &journey,
            new.context.as_ref(),
        )
        .await?;
        match (inserted, provider_message_id) {
            (Some(id), _) => break id,
            // The provider accepted the message but gave an id this channel already has
            // (a Telegram bot replaced by another numbers its messages from 1 again): the
            // message was sent, so it is recorded, without the id, rather than lost.
            (None, Some(_)) => {
                tracing::warn!(
                    channel_id = new.channel.id,
                    message_uuid = %new.uuid,
                    "the provider's message id is already recorded on this channel; the message is recorded without it"
                );
                provider_message_id = None;
            }
            (None, None) => {
                return Err(StoreError::UniqueViolation(Some(
                    "messages_provider_id_channel".into(),
                )));
            }
        }
    };
    if let Some(consent_id) = consent_id {
        sqlx::query("UPDATE messages SET consent_id = $1 WHERE id = $2")
            .bind(consent_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    if let Some(queue) = &new.queue {
        super::queue_entries::enqueue(tx, id, &new, queue).await?;
    }
    // The row holds what was bound: the record is built from it, not read back.
    let message = new.as_written(crate::messaging::Written {
        id,
        provider_message_id: provider_message_id.map(str::to_owned),
        contact: &contact,
        conversation: conversation.as_ref(),
        consent_uuid: consent_id.and(consent.as_ref().map(|c| c.uuid)),
        trace,
    });
    let recorded = RecordedOutbound {
        message,
        contact,
        contact_created,
        conversation,
        conversation_created,
    };
    Ok(recorded)
}

/// The conversation of an outbound record under its policy: `looked_up` is the contact's open
/// conversation when it was read with the contact (`None`: not read yet). An initiation's
/// consent (`consent_id`) is kept on the conversation it opens or continues.
async fn record_conversation(
    tx: &mut Conn,
    new: &NewOutbound,
    contact: &Contact,
    looked_up: Option<Option<Conversation>>,
    consent_id: Option<i64>,
) -> StoreResult<(Option<Conversation>, bool)> {
    Ok(match new.conversation {
        ConversationPolicy::OpenOrContinue => {
            let open = match looked_up {
                Some(open) => open,
                None => open_conversation_of(tx, contact.id, new.channel.id).await?,
            };
            let (c, created) =
                continue_or_open(tx, open, new.org_id, contact.id, new.channel.id, new.now).await?;
            match consent_id {
                // The consent under which the business initiated it (kept when it had one).
                Some(consent_id) => {
                    sqlx::query(
                        "UPDATE conversations SET consent_id = $1 WHERE id = $2 AND consent_id IS NULL",
                    )
                    .bind(consent_id)
                    .bind(c.id)
                    .execute(&mut *tx)
                    .await?;
                    (Some(fetch_conversation(tx, c.id).await?), created)
                }
                None => (Some(c), created),
            }
        }
        ConversationPolicy::ContinueIfOpen => match looked_up {
            Some(open) => (open, false),
            None => (
                open_conversation_of(tx, contact.id, new.channel.id).await?,
                false,
            ),
        },
    })
}

#[async_trait]
impl MessageStore for Backend {
    async fn record_outbound(
        &self,
        new: NewOutbound,
        completion: Option<ClaimCompletion>,
        effects: EffectsFn<'_, RecordedOutbound>,
    ) -> StoreResult<RecordedOutbound> {
        self.write_outbound(new, None, None, completion, effects)
            .await
    }

    async fn record_outbound_grouped(
        &self,
        record: crate::GroupedOutbound,
    ) -> StoreResult<RecordedOutbound> {
        self.record_grouped(record).await
    }

    async fn record_provider_batch(
        &self,
        batch: ProviderBatch,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<BatchOutcome> {
        self.provider_batch_in(batch, effects).await
    }

    async fn find_message(&self, org_id: i64, uuid: Uuid) -> StoreResult<MessageRecord> {
        let row: Option<MessageRow> =
            sqlx::query_as(select_messages!("WHERE m.uuid = $1 AND m.org_id = $2"))
                .bind(uuid)
                .bind(org_id)
                .fetch_optional(self.reader())
                .await?;
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    async fn record_message_changes(
        &self,
        channel_id: i64,
        changes: Vec<NewChange>,
        now: Timestamp,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<Vec<ChangeOutcome>> {
        self.message_changes_in(channel_id, changes, now, effects)
            .await
    }

    async fn message_uuids_by_provider_ids(
        &self,
        org_id: i64,
        provider_message_ids: &[String],
    ) -> StoreResult<HashMap<String, Uuid>> {
        if provider_message_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "SELECT provider_message_id, uuid FROM messages WHERE org_id = ",
        );
        qb.push_bind(org_id);
        qb.push(" AND provider_message_id IN (");
        let mut ids = qb.separated(", ");
        for id in provider_message_ids.iter().take(100) {
            ids.push_bind(id);
        }
        qb.push(") ORDER BY id");
        let rows: Vec<(String, Uuid)> = qb.build_query_as().fetch_all(self.reader()).await?;
        // The first message with the id (a provider id is unique per channel only).
        let mut out = HashMap::new();
        for (pid, uuid) in rows {
            out.entry(pid).or_insert(uuid);
        }
        Ok(out)
    }

    async fn message_timeline(&self, message_id: i64) -> StoreResult<Vec<MessageStep>> {
        // The first steps, kept with the message; then each later status change.
        let journey: Option<Json<Vec<MessageStep>>> =
            sqlx::query_scalar("SELECT journey FROM messages WHERE id = $1")
                .bind(message_id)
                .fetch_optional(self.reader())
                .await?
                .flatten();
        let rows: Vec<(Timestamp, String, Json<Value>)> = sqlx::query_as(
            "SELECT at, kind, detail FROM message_steps WHERE message_id = $1 ORDER BY at, id",
        )
        .bind(message_id)
        .fetch_all(self.reader())
        .await?;
        let mut steps: Vec<MessageStep> = journey.map(|j| j.0).unwrap_or_default();
        let later = rows
            .into_iter()
            .map(|(at, kind, detail)| {
                Ok(MessageStep {
                    at,
                    kind: StepKind::parse(&kind)
                        .ok_or_else(|| StoreError::Other(format!("unknown step kind {kind}")))?,
                    detail: detail.0,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        steps.extend(later);
        // Every attempt to deliver one of the message's events, from the ledger.
        let attempts: Vec<AttemptStepRow> = sqlx::query_as(
            "SELECT a.started_at, a.number, a.duration_ms, a.response_status, a.error_code,
                    d.uuid AS delivery_uuid, ep.uuid AS endpoint_uuid, ev.name AS event_name,
                    ev.uuid AS event_uuid
             FROM events ev
             JOIN webhook_deliveries d ON d.event_id = ev.id
             JOIN webhook_attempts a ON a.delivery_id = d.id
             LEFT JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
             WHERE ev.message_id = $1
             ORDER BY a.started_at, a.id",
        )
        .bind(message_id)
        .fetch_all(self.reader())
        .await?;
        let attempts = first_attempts_of(self, message_id)
            .await?
            .into_iter()
            .chain(attempts);
        steps.extend(attempts.map(|a| MessageStep {
            at: a.started_at,
            kind: StepKind::WebhookAttempt,
            detail: serde_json::json!({
                "event": a.event_name,
                "event_id": a.event_uuid,
                "endpoint_uuid": a.endpoint_uuid,
                "delivery_id": a.delivery_uuid,
                "attempt": a.number,
                "response_status": a.response_status,
                "duration_ms": a.duration_ms,
                "error_code": a.error_code,
            }),
        }));
        // Oldest first; a stable sort keeps each source's own order for equal times.
        steps.sort_by_key(|s| s.at);
        Ok(steps)
    }

    async fn get_message(&self, id: i64) -> StoreResult<MessageRecord> {
        let row: MessageRow = sqlx::query_as(select_messages!("WHERE m.id = $1"))
            .bind(id)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }

    async fn list_messages(
        &self,
        org_id: i64,
        filter: &MessageFilter,
        after: Option<HistoryCursor>,
        limit: i64,
    ) -> StoreResult<Vec<MessageRecord>> {
        // Only the filters that are set appear in the statement, so that each combination gets
        // a plan that uses its index (a generic `($n IS NULL OR ...)` plan would not).
        let mut q = sqlx::QueryBuilder::<Db>::new(select_messages!("WHERE m.org_id = "));
        q.push_bind(org_id);
        if let Some(id) = filter.channel_id {
            q.push(" AND m.channel_id = ").push_bind(id);
        }
        if let Some(id) = filter.contact_id {
            q.push(" AND m.contact_id = ").push_bind(id);
        }
        if let Some(id) = filter.conversation_id {
            q.push(" AND m.conversation_id = ").push_bind(id);
        }
        if let Some(d) = filter.direction {
            q.push(" AND m.direction = ").push_bind(d.as_str());
        }
        if let Some(st) = filter.status {
            q.push(" AND m.status = ").push_bind(st.as_str());
        }
        if let Some(t) = filter.since {
            q.push(" AND m.created_at >= ").push_bind(t);
        }
        if let Some(t) = filter.until {
            q.push(" AND m.created_at < ").push_bind(t);
        }
        if let Some(c) = after {
            // A row-value comparison: an index bound on (org_id, created_at, id), so a page
            // deep in the history costs what the first page costs (an OR of the two
            // conditions is only a filter, read from the newest row down).
            q.push(" AND (m.created_at, m.id) < (")
                .push_bind(c.created_at)
                .push(", ")
                .push_bind(c.id)
                .push(")");
        }
        q.push(" ORDER BY m.created_at DESC, m.id DESC LIMIT ")
            .push_bind(limit);
        let rows: Vec<MessageRow> = q.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
