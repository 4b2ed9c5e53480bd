//! Receiving: what providers report for a channel (inbound messages, status updates) and the
//! sandbox tools that play a provider's part (`admin sandbox inbound|status`).

use serde_json::json;
use uuid::Uuid;

use crate::providers::{ParsedCallback, ParsedInbound};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::clock::Clock;
use switchboard_domain::contact::InboundSender;
use switchboard_domain::message::{
    Direction, MAX_TEXT_CHARS, MessageChange, MessageKind, MessageStatus,
};
use switchboard_domain::phone::Phone;
use switchboard_store::contacts::ContactPatch;
use switchboard_store::{
    BatchOutcome, InboundOutcome, InboundSender as StoredSender, MessageRecord, MessageRef,
    NewChange, NewInbound, NewStatus, ProviderBatch, StatusOutcome, Store, StoreError,
};

use super::message_events::batch_effects;
use super::{OpError, OpResult};

/// Records what a provider reported for a channel (inbound messages and status updates).
pub async fn ingest(
    store: &dyn Store,
    clock: &dyn Clock,
    channel: &Channel,
    parsed: ParsedCallback,
) -> OpResult<BatchOutcome> {
    let now = clock.now();
    report_queued_sends(store, channel, &parsed, now).await?;
    let mut parsed = parsed;
    resolve_references(store, channel.org_id, &mut parsed.messages).await?;
    let batch = ProviderBatch {
        org_id: channel.org_id,
        channel_id: channel.id,
        messages: std::mem::take(&mut parsed.messages)
            .into_iter()
            .map(|m| NewInbound {
                // The store has its own copy of the sender type (providers do not use the store).
                sender: match m.sender {
                    InboundSender::Phone(phone) => StoredSender::Phone(phone),
                    InboundSender::Telegram { chat_id } => StoredSender::Telegram { chat_id },
                },
                profile_name: m.profile_name,
                uuid: Uuid::now_v7(),
                message_type: m.kind.message_type(),
                content: m.kind.member(),
                provider_message_id: m.provider_message_id,
                sent_at: m.sent_at.unwrap_or(now).min(now),
                context: m.context,
            })
            .collect(),
        statuses: std::mem::take(&mut parsed.statuses)
            .into_iter()
            .map(|s| NewStatus {
                message: MessageRef::Provider(s.provider_message_id),
                status: s.status,
                error: s.error,
                pricing: s.pricing,
                provider_conversation: s.provider_conversation,
            })
            .collect(),
        now,
    };
    let mut outcome = store
        .record_provider_batch(batch, Box::new(batch_effects))
        .await?;
    // After the messages: an edit may come in the same callback as the message it edits.
    let changes = parsed
        .changes
        .into_iter()
        .map(|c| NewChange {
            provider_message_id: c.provider_message_id,
            edited: match c.change {
                MessageChange::Edited(kind) => Some((kind.message_type(), kind.member())),
                MessageChange::Deleted => None,
            },
            at: c.at.unwrap_or(now).min(now),
        })
        .collect();
    outcome.changes = store
        .record_message_changes(channel.id, changes, now, Box::new(batch_effects))
        .await?;
    move_changed_numbers(store, clock, &outcome).await?;
    metrics::counter!("switchboard_provider_callbacks_total", "channel_type" => channel.channel_type.as_str())
        .increment(1);
    link_statuses(&outcome);
    Ok(outcome)
}

/// A `system` message of kind `user_changed_number` moves its contact to the new phone (the
/// contact's uuid stays) and emits `contact.updated`. When another contact of the
/// organization has the new phone already, the contact stays as it is (logged at `warn`).
async fn move_changed_numbers(
    store: &dyn Store,
    clock: &dyn Clock,
    outcome: &BatchOutcome,
) -> OpResult<()> {
    for m in &outcome.messages {
        let InboundOutcome::Stored(r) = m else {
            continue;
        };
        let Some(MessageKind::System { system }) =
            MessageKind::from_stored(r.message.message_type, &r.message.content)
        else {
            continue;
        };
        let new_phone = match (system.kind.as_str(), system.new_phone.as_deref()) {
            ("user_changed_number", Some(p)) => Phone::parse(p).ok(),
            _ => None,
        };
        let Some(new_phone) = new_phone.filter(|p| r.contact.phone.as_ref() != Some(p)) else {
            continue;
        };
        let patch = ContactPatch {
            phone: Some(new_phone),
            name: None,
        };
        match super::contacts::update_contact(store, clock, r.contact.org_id, r.contact.uuid, patch)
            .await
        {
            Ok(_) => {}
            Err(StoreError::UniqueViolation(_)) | Err(StoreError::NotFound) => {
                tracing::warn!(
                    contact_uuid = %r.contact.uuid,
                    "a customer's number change was not applied: another contact has the new number"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Resolves the provider ids inbound messages refer to (the message replied to, the message
/// reacted to) into the uuids of the organization's messages with them, inbound or outbound.
async fn resolve_references(
    store: &dyn Store,
    org_id: i64,
    messages: &mut [ParsedInbound],
) -> OpResult<()> {
    let wanted: Vec<String> = messages
        .iter()
        .flat_map(|m| {
            m.context
                .reply_to
                .as_ref()
                .map(|r| r.provider_message_id.clone())
                .into_iter()
                .chain(m.kind.target_provider_id().map(str::to_owned))
        })
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let found = store.message_uuids_by_provider_ids(org_id, &wanted).await?;
    for m in messages {
        if let Some(r) = m.context.reply_to.as_mut() {
            r.message_uuid = found.get(&r.provider_message_id).copied();
        }
        let target = m
            .kind
            .target_provider_id()
            .and_then(|id| found.get(id))
            .copied();
        m.kind.set_target_uuid(target);
    }
    Ok(())
}

/// A status that echoes a queued send's reference (our message uuid: WhatsApp Cloud's
/// `biz_opaque_callback_data`) tells the send worker that the provider has the message, with its
/// id: a send whose instance stopped during the provider call is recorded `sent` with it instead
/// of failing as unknown (`super::sending::queued`).
async fn report_queued_sends(
    store: &dyn Store,
    channel: &Channel,
    parsed: &ParsedCallback,
    now: Timestamp,
) -> OpResult<()> {
    for s in &parsed.statuses {
        let Some(uuid) = s.reference.as_deref().and_then(|r| Uuid::parse_str(r).ok()) else {
            continue;
        };
        store
            .report_provider_id(channel.id, uuid, &s.provider_message_id, now)
            .await?;
    }
    Ok(())
}

/// A callback runs in a trace of its own (its request's); each status it applies to a message
/// is a span of that trace linked to the trace that sent the message, so that a tracing system
/// shows the journey across both.
fn link_statuses(outcome: &BatchOutcome) {
    if crate::trace::export::tracer().is_none() {
        return;
    }
    for s in &outcome.statuses {
        let StatusOutcome::Applied { message, previous } = s else {
            continue;
        };
        let links: Vec<_> = message
            .trace
            .as_deref()
            .and_then(switchboard_domain::trace::TraceContext::parse)
            .into_iter()
            .collect();
        let mut span = crate::trace::Span::start_at(
            "message.status",
            crate::trace::Kind::Internal,
            crate::trace::current(),
            &links,
            None,
        );
        span.attr("switchboard.message_uuid", message.uuid.to_string());
        span.attr("switchboard.status", message.status.as_str());
        span.attr("switchboard.previous_status", previous.as_str());
    }
}

async fn sandbox_channel(store: &dyn Store, id: i64) -> OpResult<Channel> {
    let channel = store.get_channel(id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::not_found(format!("channel {id} does not exist")),
        other => other.into(),
    })?;
    if channel.channel_type != ChannelType::Sandbox {
        return Err(OpError::invalid(format!(
            "channel {id} is a {} channel; the sandbox tools work on sandbox channels only",
            channel.channel_type
        )));
    }
    Ok(channel)
}

/// `admin sandbox inbound`: a text from `from` on a sandbox channel, sent at `at` (default:
/// now; never later than now).
pub async fn sandbox_inbound(
    store: &dyn Store,
    clock: &dyn Clock,
    channel_id: i64,
    from: &str,
    text: &str,
    at: Option<Timestamp>,
) -> OpResult<MessageRecord> {
    let phone = Phone::parse(from).map_err(|e| OpError::invalid_field("from", e.to_string()))?;
    if text.trim().is_empty() || text.contains('\0') || text.chars().count() > MAX_TEXT_CHARS {
        return Err(OpError::invalid_field(
            "text",
            format!("expected 1 to {MAX_TEXT_CHARS} characters"),
        ));
    }
    let channel = sandbox_channel(store, channel_id).await?;
    let outcome = ingest(
        store,
        clock,
        &channel,
        ParsedCallback {
            messages: vec![ParsedInbound {
                sender: InboundSender::Phone(phone),
                profile_name: None,
                kind: MessageKind::text(text),
                context: Default::default(),
                provider_message_id: format!("sandbox-in-{}", Uuid::now_v7().simple()),
                sent_at: at,
            }],
            ..Default::default()
        },
    )
    .await?;
    match outcome.messages.into_iter().next() {
        Some(InboundOutcome::Stored(r)) => Ok(r.message.clone()),
        _ => Err(OpError::conflict("the message was not stored")),
    }
}

/// `admin sandbox status`: moves an outbound message of a sandbox channel forward.
pub async fn sandbox_status(
    store: &dyn Store,
    clock: &dyn Clock,
    message_id: i64,
    status: MessageStatus,
    error: Option<String>,
) -> OpResult<MessageRecord> {
    let message = store.get_message(message_id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::not_found(format!("message {message_id} does not exist")),
        other => other.into(),
    })?;
    let channel = sandbox_channel(store, message.channel.id).await?;
    if message.direction != Direction::Outbound {
        return Err(OpError::invalid(format!(
            "message {message_id} is inbound; only outbound messages change status"
        )));
    }
    let error = (status == MessageStatus::Failed).then(|| {
        json!({
            "code": "delivery_failed",
            "message": error.unwrap_or_else(|| "The sandbox reported a failure.".into()),
            "provider": "sandbox",
        })
    });
    let outcome = store
        .record_provider_batch(
            ProviderBatch {
                org_id: channel.org_id,
                channel_id: channel.id,
                messages: vec![],
                statuses: vec![NewStatus {
                    message: MessageRef::Id(message_id),
                    status,
                    error,
                    pricing: None,
                    provider_conversation: None,
                }],
                now: clock.now(),
            },
            Box::new(batch_effects),
        )
        .await?;
    match outcome.statuses.into_iter().next() {
        Some(StatusOutcome::Applied { message, .. }) => Ok(message),
        Some(StatusOutcome::Ignored { message }) => Err(OpError::conflict(format!(
            "message {message_id} is {}; it cannot move to {status} (statuses only move forward: sent, delivered, read; failed before delivery)",
            message.status
        ))),
        _ => Err(OpError::not_found(format!(
            "message {message_id} does not exist"
        ))),
    }
}
