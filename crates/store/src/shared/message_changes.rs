//! What providers tell of messages, applied in one transaction per callback: a batch of
//! inbound messages and statuses (`MessageStore::record_provider_batch`), and the customer's
//! edits and deletions (`MessageStore::record_message_changes`). The message rows themselves
//! are `messages.rs`'s.

use serde_json::Value;
use sqlx::types::Json;

use super::Backend;
use super::messages::*;
use crate::{
    BatchChange, BatchEffectsFn, BatchOutcome, ChangeOutcome, InboundOutcome, InboundSender,
    MessageRecord, MessageRef, MessageStep, NewChange, NewStatus, ProviderBatch, RecordedOutbound,
    StatusOutcome, StoreError, StoreResult,
};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;
use switchboard_domain::message::timeline::StepKind;
use switchboard_domain::message::{Direction, MessageStatus};

use super::Conn;
use super::contacts::{contact_by_phone, contact_by_telegram};
use super::conversations::{fetch_conversation, open_or_continue};

impl Backend {
    pub(super) async fn provider_batch_in(
        &self,
        mut batch: ProviderBatch,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<BatchOutcome> {
        // One lock order for every transaction: by sender.
        batch.messages.sort_by(|a, b| {
            let key = |s: &InboundSender| match s {
                InboundSender::Phone(p) => (0, p.as_str().to_owned()),
                InboundSender::Telegram { chat_id } => (1, chat_id.clone()),
            };
            key(&a.sender).cmp(&key(&b.sender))
        });
        let mut tx = self.write().await?;
        let mut outcome = BatchOutcome::default();
        for m in &batch.messages {
            if message_by_provider_id(&mut tx, batch.channel_id, &m.provider_message_id)
                .await?
                .is_some()
            {
                outcome.messages.push(InboundOutcome::Duplicate {
                    provider_message_id: m.provider_message_id.clone(),
                });
                continue;
            }
            let (contact, contact_created) = match &m.sender {
                InboundSender::Phone(phone) => {
                    contact_by_phone(
                        &mut tx,
                        batch.org_id,
                        phone,
                        m.profile_name.as_deref(),
                        batch.now,
                    )
                    .await?
                }
                InboundSender::Telegram { chat_id } => {
                    contact_by_telegram(
                        &mut tx,
                        batch.org_id,
                        chat_id,
                        m.profile_name.as_deref(),
                        batch.now,
                    )
                    .await?
                }
            };
            let (conversation, conversation_created) = open_or_continue(
                &mut tx,
                batch.org_id,
                contact.id,
                batch.channel_id,
                batch.now,
            )
            .await?;
            let sent_at = m.sent_at.min(batch.now);
            let Some(id) = insert_message(
                &mut tx,
                m.uuid,
                batch.org_id,
                batch.channel_id,
                contact.id,
                Some(conversation.id),
                None,
                Direction::Inbound,
                m.message_type,
                MessageStatus::Received,
                &m.content,
                Some(&m.provider_message_id),
                None,
                sent_at,
                batch.now,
                &[status_step(batch.now, MessageStatus::Received, None)],
                Some(&m.context),
            )
            .await?
            else {
                // Stored by a concurrent delivery of the same provider message.
                outcome.messages.push(InboundOutcome::Duplicate {
                    provider_message_id: m.provider_message_id.clone(),
                });
                continue;
            };
            // The window runs from the contact's latest message; an older one does not move it.
            sqlx::query(
                "UPDATE conversations SET last_inbound_at = $1, updated_at = $2
                 WHERE id = $3 AND (last_inbound_at IS NULL OR last_inbound_at < $1)",
            )
            .bind(sent_at)
            .bind(batch.now)
            .bind(conversation.id)
            .execute(&mut *tx)
            .await?;
            let recorded = RecordedOutbound {
                message: fetch_message(&mut tx, id).await?,
                contact,
                contact_created,
                conversation: Some(fetch_conversation(&mut tx, conversation.id).await?),
                conversation_created,
            };
            tx.write_effects(&effects(BatchChange::Inbound(&recorded)))
                .await?;
            outcome
                .messages
                .push(InboundOutcome::Stored(Box::new(recorded)));
        }
        for s in &batch.statuses {
            let applied = apply_status(&mut tx, batch.channel_id, batch.now, s, &effects).await?;
            outcome.statuses.push(applied);
        }
        tx.commit(Effects::none()).await?;
        Ok(outcome)
    }

    pub(super) async fn message_changes_in(
        &self,
        channel_id: i64,
        changes: Vec<NewChange>,
        now: Timestamp,
        effects: BatchEffectsFn<'_>,
    ) -> StoreResult<Vec<ChangeOutcome>> {
        let mut out = Vec::with_capacity(changes.len());
        if changes.is_empty() {
            return Ok(out);
        }
        let mut tx = self.write().await?;
        for c in &changes {
            let found = message_by_provider_id(&mut tx, channel_id, &c.provider_message_id).await?;
            let Some(m) = found.filter(|m| m.direction == Direction::Inbound) else {
                out.push(ChangeOutcome::Ignored);
                continue;
            };
            let unchanged = match &c.edited {
                Some((t, content)) => *t == m.message_type && *content == m.content,
                None => false,
            };
            if m.deleted_at.is_some() || unchanged {
                out.push(ChangeOutcome::Ignored);
                continue;
            }
            let at = c.at.min(now);
            let (kind, change) = match &c.edited {
                Some((t, content)) => {
                    sqlx::query(
                        "UPDATE messages SET type = $1, content = $2, edited_at = $3, updated_at = $4 WHERE id = $5",
                    )
                    .bind(t.as_str())
                    .bind(Json(content))
                    .bind(at)
                    .bind(now)
                    .bind(m.id)
                    .execute(&mut *tx)
                    .await?;
                    (StepKind::Edited, "edited")
                }
                None => {
                    sqlx::query(
                        "UPDATE messages SET content = $1, deleted_at = $2, updated_at = $3 WHERE id = $4",
                    )
                    .bind(Json(Value::Null))
                    .bind(at)
                    .bind(now)
                    .bind(m.id)
                    .execute(&mut *tx)
                    .await?;
                    (StepKind::Deleted, "deleted")
                }
            };
            insert_steps(
                &mut tx,
                m.id,
                &[MessageStep {
                    at: now,
                    kind,
                    detail: serde_json::json!({}),
                }],
            )
            .await?;
            let updated = fetch_message(&mut tx, m.id).await?;
            tx.write_effects(&effects(BatchChange::Changed {
                message: &updated,
                change,
            }))
            .await?;
            out.push(ChangeOutcome::Applied(Box::new(updated)));
        }
        tx.commit(Effects::none()).await?;
        Ok(out)
    }
}

/// One status callback, applied forward only: its outcome (not found, ignored: inbound,
/// late or repeated, or applied with the status it moved from).
async fn apply_status(
    tx: &mut super::write::WriteTx<'_>,
    channel_id: i64,
    now: Timestamp,
    s: &NewStatus,
    effects: &BatchEffectsFn<'_>,
) -> StoreResult<StatusOutcome> {
    let found = match &s.message {
        MessageRef::Id(id) => match fetch_message(tx, *id).await {
            Ok(m) if m.channel.id == channel_id => Some(m),
            Ok(_) | Err(StoreError::NotFound) => None,
            Err(e) => return Err(e),
        },
        MessageRef::Provider(pid) => message_by_provider_id(tx, channel_id, pid).await?,
    };
    let Some(message) = found else {
        return Ok(StatusOutcome::NotFound);
    };
    if message.direction != Direction::Outbound {
        return Ok(StatusOutcome::Ignored { message });
    }
    if !message.status.can_advance_to(s.status) {
        // A late or repeated status moves nothing, but the pricing and conversation it
        // reports are the message's last (unchanged when the same callback comes again).
        keep_billing(tx, &message, s).await?;
        let message = fetch_message(tx, message.id).await?;
        return Ok(StatusOutcome::Ignored { message });
    }
    // Conditional on the status still allowing the move: concurrent updates cannot
    // move a message backwards.
    let sql = format!(
        "UPDATE messages SET status = $1, error = COALESCE($2, error), updated_at = $3,
                pricing = COALESCE($5, pricing),
                provider_conversation = COALESCE($6, provider_conversation)
         WHERE id = $4 AND {}",
        predecessor_condition(s.status)
    );
    let done = sqlx::query(&sql)
        .bind(s.status.as_str())
        .bind(s.error.as_ref().map(Json))
        .bind(now)
        .bind(message.id)
        .bind(s.pricing.as_ref().map(Json))
        .bind(s.provider_conversation.as_ref().map(Json))
        .execute(&mut **tx)
        .await?;
    if done.rows_affected() == 0 {
        let message = fetch_message(tx, message.id).await?;
        return Ok(StatusOutcome::Ignored { message });
    }
    let previous = message.status;
    let updated = fetch_message(tx, message.id).await?;
    insert_steps(
        tx,
        message.id,
        &[status_step(now, s.status, updated.error.as_ref())],
    )
    .await?;
    tx.write_effects(&effects(BatchChange::Status {
        message: &updated,
        previous,
    }))
    .await?;
    Ok(StatusOutcome::Applied {
        message: updated,
        previous,
    })
}

/// Keeps the pricing and conversation a status reported as the message's last, when they
/// differ from what it has (no event: the status did not change).
async fn keep_billing(conn: &mut Conn, message: &MessageRecord, s: &NewStatus) -> StoreResult<()> {
    let pricing = s
        .pricing
        .as_ref()
        .filter(|p| message.pricing.as_ref() != Some(*p));
    let conversation = s
        .provider_conversation
        .as_ref()
        .filter(|c| message.provider_conversation.as_ref() != Some(*c));
    if pricing.is_none() && conversation.is_none() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE messages SET pricing = COALESCE($1, pricing),
                provider_conversation = COALESCE($2, provider_conversation)
         WHERE id = $3",
    )
    .bind(pricing.map(Json))
    .bind(conversation.map(Json))
    .bind(message.id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The condition `status IN (...)` for the statuses from which `next` can be reached
/// (built from the enum's constant names, never from input).
fn predecessor_condition(next: MessageStatus) -> String {
    let names: Vec<String> = MessageStatus::predecessors(next)
        .into_iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    if names.is_empty() {
        "FALSE".to_owned()
    } else {
        format!("status IN ({})", names.join(", "))
    }
}
