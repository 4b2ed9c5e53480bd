//! Batch sends (`POST /messages/batch`): every item is checked by the rules of a single send
//! ([`super::plain::prepare`]) before anything is written; then the batch and its items, each a
//! message recorded `queued` with its send-queue row, are written in one transaction (with
//! `contact.created` / `conversation.created` for what they create and the completion of the
//! request's idempotency claim). The send worker (`super::queued`) sends them within each
//! channel's pace; each emits `message.sent` when it is sent or fails.

use uuid::Uuid;

use super::plain::{Adapters, PreparedSend, SendInput, prepare_with};
use super::{SendContext, SendError};
use crate::ops::message_events::recorded_effects;
use switchboard_domain::message::timeline::StepKind;
use switchboard_domain::message::{InboundContext, MessageStatus};
use switchboard_store::queue::{BatchRecord, NewBatch, QueueEntry};
use switchboard_store::{ClaimToken, MessageStep, NewOutbound, StoreError};

/// The most items in one batch.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// Checks every item; the errors by item index, or every item ready to record.
pub async fn check_batch(
    ctx: &SendContext<'_>,
    items: Vec<(usize, SendInput)>,
) -> Result<Vec<PreparedSend>, Vec<(usize, SendError)>> {
    let mut ready = Vec::with_capacity(items.len());
    let mut errors = Vec::new();
    let mut adapters = Adapters::new();
    for (index, input) in items {
        match prepare_with(ctx, input, &mut adapters).await {
            Ok(p) => ready.push(p),
            Err(e) => errors.push((index, e)),
        }
    }
    if errors.is_empty() {
        Ok(ready)
    } else {
        Err(errors)
    }
}

/// Records a checked batch: its items become `queued` messages, due now.
pub async fn record_batch(
    ctx: &SendContext<'_>,
    org_id: i64,
    api_key_id: i64,
    items: Vec<PreparedSend>,
    completion: Option<ClaimToken>,
) -> Result<BatchRecord, SendError> {
    let now = ctx.clock.now();
    let news: Vec<NewOutbound> = items
        .iter()
        .map(|p| NewOutbound {
            org_id,
            channel: p.channel.identity(),
            api_key_id: Some(api_key_id),
            recipient: p.recipient_ref(),
            conversation: p.conversation_policy(false),
            uuid: Uuid::now_v7(),
            message_type: p.input.content.message_type(),
            status: MessageStatus::Queued,
            content: p.input.content.to_json(),
            provider_message_id: None,
            error: None,
            now,
            steps: vec![MessageStep {
                at: now,
                kind: StepKind::Accepted,
                detail: serde_json::json!({}),
            }],
            queue: Some(QueueEntry {
                batch_id: None,
                not_before: now,
            }),
            context: p.reply_to.clone().map(InboundContext::replying_to),
        })
        .collect();
    let (batch, _) = ctx
        .store
        .record_batch(
            NewBatch {
                uuid: Uuid::now_v7(),
                org_id,
                api_key_id: Some(api_key_id),
                now,
            },
            news,
            completion,
            Box::new(|r| recorded_effects(r, "message.sent")),
        )
        .await
        .map_err(|e| match e {
            StoreError::ClaimLost => SendError::LostClaim,
            other => SendError::Store(other),
        })?;
    ctx.providers.wake_send_worker();
    metrics::counter!("switchboard_batch_items_total").increment(batch.total as u64);
    Ok(batch)
}
