//! The send worker: sends the messages recorded `queued` (batch items, and sends that pacing or
//! the provider's throttling put off), within each channel's pace.
//!
//! Exactly once across instances and crashes: a worker claims due messages with a lease; right
//! before the provider call (at its slot of the pace, not ahead of it) it marks the message *in
//! flight* (committed); the outcome is written with the removal of the queue row under the
//! lease, in one transaction with `message.sent`. So an instance that dies leaves in flight only
//! the messages whose provider call it had started. Such a message, taken over from an expired
//! lease, may already be with the provider: on WhatsApp Cloud the send carried our message uuid
//! (`biz_opaque_callback_data`), which the provider's status callbacks echo, so the message is
//! recorded `sent` with the provider id a callback reported, and waited for (up to
//! `SWITCHBOARD_SEND_OUTCOME_WAIT` after the call) while none has come yet; only then, and at
//! once on channels without such an echo (Telegram), it is failed with
//! `provider_outcome_unknown` rather than sent a second time. A message the pace or the
//! provider's throttling puts off goes back to the queue with its new time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::provider::{
    Dispatch, call_or_defer, classify_outcome, on_time, reserve_slot, wait_for_slot,
};
use super::{SendContext, SendError};
use crate::crypto::SecretBox;
use crate::ops::channels::provider_for;
use crate::ops::message_events::sent_effects;
use crate::providers::{Outgoing, Provider, ProviderError, ProviderHub, echoes_send_reference};
use crate::trace;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::SharedClock;
use switchboard_domain::message::timeline::{self, StepKind};
use switchboard_domain::message::{Content, MessageStatus};
use switchboard_store::queue::{ClaimedSend, LeaseResult, QueuedOutcome};
use switchboard_store::{MessageRecord, MessageStep, SharedStore, StoreResult};

/// How long a claim holds its messages beyond the provider's time limit: longer than a pace
/// wait and the claim's other steps (an instance that dies leaves its claims for this long).
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How long a worker waits for a slot of the pace before it puts the message back.
const WORKER_PACE_BOUND: Duration = Duration::from_secs(2);
/// How often an idle worker looks for due messages (other instances' queues, deferred ones).
const POLL: Duration = Duration::from_millis(200);
/// Provider outages a message rides out before it fails with `provider_unavailable`.
const MAX_UNAVAILABLE_ATTEMPTS: i64 = 10;

/// What the worker needs.
#[derive(Clone)]
pub struct SendWorker {
    pub store: SharedStore,
    pub secrets: SecretBox,
    pub clock: SharedClock,
    pub providers: ProviderHub,
    pub cache: Arc<crate::cache::ConfigCache>,
    /// Messages in flight at once in this instance (and claimed at once).
    pub concurrency: usize,
    /// The longest one message's provider work may take (`SWITCHBOARD_PROVIDER_TIMEOUT`, plus
    /// a media fetch and upload, `SWITCHBOARD_MEDIA_TIMEOUT` each): a lease outlasts it.
    pub provider_timeout: Duration,
    /// How long after its provider call a message left in flight by a stopped instance waits
    /// for the provider's status callback (`SWITCHBOARD_SEND_OUTCOME_WAIT`).
    pub outcome_wait: Duration,
}

impl SendWorker {
    /// Keeps up to `concurrency` messages in hand: claims more as soon as one is done (no
    /// round waits for its slowest message). On shutdown it stops claiming and lets the
    /// messages in hand finish (a provider call is never cut off half-way by a clean stop).
    pub async fn run(self, shutdown: CancellationToken) {
        let wake = self.providers.send_worker_wakeup();
        let mut in_hand = tokio::task::JoinSet::new();
        loop {
            let free = self.concurrency.saturating_sub(in_hand.len());
            let claimed = if free == 0 {
                Vec::new()
            } else {
                match self
                    .store
                    .claim_queued(
                        self.clock.now(),
                        self.provider_timeout + WORKER_PACE_BOUND + LEASE_MARGIN,
                        free as i64,
                    )
                    .await
                {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "the send worker could not claim queued messages");
                        Vec::new()
                    }
                }
            };
            let got = claimed.len();
            for c in claimed {
                let this = self.clone();
                in_hand.spawn(async move {
                    let id = c.message.id;
                    if let Err(e) = this.process(c).await {
                        tracing::warn!(message_id = id, error = %e, "the send worker could not finish a queued message; its lease will expire and it is tried again");
                    }
                });
            }
            if got > 0 && in_hand.len() < self.concurrency {
                // There may be more due right away.
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(_) = in_hand.join_next(), if !in_hand.is_empty() => {}
                _ = wake.notified() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
        let drain = async { while in_hand.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(self.provider_timeout + WORKER_PACE_BOUND, drain).await;
    }

    /// A message an earlier claim left in flight (its instance stopped during the provider
    /// call): `sent` with the provider id a status callback reported; waited for while the
    /// provider may still report it; else failed with `provider_outcome_unknown`, never sent a
    /// second time.
    async fn settle_in_flight(&self, c: &ClaimedSend) -> StoreResult<()> {
        let now = self.clock.now();
        if let Some(id) = &c.reported_provider_message_id {
            tracing::info!(
                message_uuid = %c.message.uuid,
                "a queued message in flight when its instance stopped was settled by the provider's status callback: sent"
            );
            metrics::counter!("switchboard_send_queue_outcome_settled_total").increment(1);
            let step = MessageStep {
                at: now,
                kind: StepKind::ProviderResponse,
                detail: timeline::provider_response(Some(id), None),
            };
            let outcome = Outcome {
                status: MessageStatus::Sent,
                provider_message_id: Some(id.clone()),
                error: None,
            };
            return self.finish(c, outcome, vec![step]).await;
        }
        let until = c
            .in_flight_at
            .unwrap_or(now)
            .saturating_add(self.outcome_wait);
        if echoes_send_reference(c.message.channel.channel_type) && now < until {
            self.store
                .await_outcome(c.message.id, c.token, until)
                .await?;
            return Ok(());
        }
        metrics::counter!("switchboard_send_queue_outcome_unknown_total").increment(1);
        self.finish(
            c,
            failed(
                "provider_outcome_unknown",
                "The service stopped during the provider call, and the provider did not report the message: it may or may not have it, so it is not sent again.",
            ),
            Vec::new(),
        )
        .await
    }

    async fn process(&self, c: ClaimedSend) -> StoreResult<()> {
        let m = &c.message;
        if c.was_in_flight {
            return self.settle_in_flight(&c).await;
        }
        let ctx = self.context();
        let channels = match ctx.channels(m.org_id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = ?e, "the send worker could not read the channels");
                return self.defer(&c, Duration::from_secs(1), false).await;
            }
        };
        let Some(channel) = channels.iter().find(|ch| ch.id == m.channel.id).cloned() else {
            return self
                .finish(
                    &c,
                    failed("invalid_channel", "The message's channel no longer exists."),
                    Vec::new(),
                )
                .await;
        };
        let provider = match provider_for(ctx.store, ctx.secrets, ctx.providers, &channel).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "the send worker could not read the channel's provider settings");
                return self.defer(&c, Duration::from_secs(1), false).await;
            }
        };
        let Some(recipient) = self
            .store
            .find_contact_with_deleted(m.org_id, m.contact_uuid)
            .await?
        else {
            return self
                .finish(
                    &c,
                    failed("not_found", "The message's contact no longer exists."),
                    Vec::new(),
                )
                .await;
        };
        let Some(content) = Content::from_stored(m.message_type, &m.content) else {
            return self
                .finish(
                    &c,
                    failed("invalid_request", "The message's content cannot be sent."),
                    Vec::new(),
                )
                .await;
        };
        let Some(content) = self
            .sendable(&ctx, &c, provider.as_ref(), &channel, content)
            .await?
        else {
            return Ok(());
        };
        // The provider call joins the trace of the request that queued the message.
        let parent = parent_trace(m);
        let pacer = self.providers.pacer();
        let slot = match reserve_slot(
            provider.as_ref(),
            pacer,
            &channel,
            &recipient,
            ctx.clock,
            WORKER_PACE_BOUND,
        )
        .await
        {
            Ok(slot) => slot,
            Err(Dispatch::Deferred { not_before, .. }) => {
                let after = Duration::from_millis(
                    (not_before.millis() - self.clock.now().millis()).max(0) as u64,
                );
                return self.defer(&c, after, false).await;
            }
            Err(Dispatch::Called(..)) => unreachable!("a reservation calls nothing"),
        };
        wait_for_slot(slot).await;
        if !on_time(slot) {
            // Woken too late for the slot: back to the queue, due at once, to take a new one.
            return self.defer(&c, Duration::ZERO, false).await;
        }
        // In flight (committed) right before the call: an instance that dies while the message
        // waits for its slot leaves it as it was, to be sent by the next claim.
        if let LeaseResult::Lost = self
            .store
            .mark_in_flight(m.id, c.token, self.clock.now())
            .await?
        {
            return Ok(());
        }
        if !on_time(slot) {
            // The mark made the call late for its slot (a slow write): nothing was called, so
            // back to the queue (no longer in flight) for a new slot, rather than burst.
            return self.defer(&c, Duration::ZERO, false).await;
        }
        let reference = m.uuid.to_string();
        let out = outgoing(m, &content, &reference);
        let dispatch = trace::scope(
            parent,
            call_or_defer(
                provider.as_ref(),
                pacer,
                &channel,
                &recipient,
                &out,
                ctx.clock,
                c.attempts,
            ),
        )
        .await;
        self.after_call(&c, &channel, dispatch).await
    }

    /// What a send needs, from the worker's dependencies.
    fn context(&self) -> SendContext<'_> {
        SendContext {
            store: self.store.as_ref(),
            secrets: &self.secrets,
            clock: self.clock.as_ref(),
            providers: &self.providers,
            cache: &self.cache,
        }
    }

    /// The content to send: media on a channel whose provider takes uploads is fetched,
    /// checked and uploaded (or a fresh upload reused) at send time (a batch item was not
    /// fetched when it was queued). `None`: the message was finished (failed) or deferred.
    async fn sendable(
        &self,
        ctx: &SendContext<'_>,
        c: &ClaimedSend,
        provider: &dyn Provider,
        channel: &Channel,
        content: Content,
    ) -> StoreResult<Option<Content>> {
        // Media on a channel whose provider takes uploads: fetched, checked and uploaded (or a
        // fresh upload reused) at send time (a batch item was not fetched when it was queued).
        Ok(Some(
            match super::media::prepare(ctx, provider, channel, &content).await {
                Ok(super::media::Prepared::AsIs) => content,
                Ok(super::media::Prepared::Ready(content)) => content,
                Ok(super::media::Prepared::UploadRejected(e)) => {
                    let steps = super::media::upload_rejected_steps(&e, channel, ctx.clock)
                        .into_iter()
                        .filter(|s| s.kind != StepKind::Accepted)
                        .collect();
                    let error = e.to_json(channel.channel_type);
                    let outcome = Outcome {
                        status: MessageStatus::Failed,
                        provider_message_id: None,
                        error: Some(error),
                    };
                    self.finish(c, outcome, steps).await?;
                    return Ok(None);
                }
                Err(SendError::ProviderUnavailable(m))
                    if c.attempts + 1 < MAX_UNAVAILABLE_ATTEMPTS =>
                {
                    tracing::info!(error = %m, "the provider is unavailable for a media upload; the queued message is tried again later");
                    let backoff =
                        switchboard_domain::pacing::throttle_backoff(c.attempts, Duration::ZERO);
                    self.defer(c, backoff, true).await?;
                    return Ok(None);
                }
                Err(SendError::Store(e)) => return Err(e),
                Err(e) => {
                    let outcome = Outcome {
                        status: MessageStatus::Failed,
                        provider_message_id: None,
                        error: Some(json!({
                            "code": e.code(),
                            "message": e.message(),
                            "details": e.details(),
                        })),
                    };
                    self.finish(c, outcome, Vec::new()).await?;
                    return Ok(None);
                }
            },
        ))
    }

    /// What the provider's answer means for the queued message: finished (sent, or failed
    /// with the provider's error), or deferred (throttled; unavailable, while attempts remain).
    async fn after_call(
        &self,
        c: &ClaimedSend,
        channel: &Channel,
        dispatch: Dispatch,
    ) -> StoreResult<()> {
        match dispatch {
            Dispatch::Deferred { not_before, .. } => {
                let after = Duration::from_millis(
                    (not_before.millis() - self.clock.now().millis()).max(0) as u64,
                );
                self.defer(c, after, true).await
            }
            Dispatch::Called(outcome, steps) => {
                let steps: Vec<MessageStep> = steps
                    .into_iter()
                    .filter(|s| s.kind != StepKind::Accepted)
                    .collect();
                match classify_outcome(&outcome, channel) {
                    Ok((status, provider_message_id, error)) => {
                        self.finish(
                            c,
                            Outcome {
                                status,
                                provider_message_id,
                                error,
                            },
                            steps,
                        )
                        .await
                    }
                    Err(_) => match outcome {
                        Err(ProviderError::Unavailable(m))
                            if c.attempts + 1 < MAX_UNAVAILABLE_ATTEMPTS =>
                        {
                            tracing::info!(error = %m, "the provider is unavailable; the queued message is tried again later");
                            let backoff = switchboard_domain::pacing::throttle_backoff(
                                c.attempts,
                                Duration::ZERO,
                            );
                            self.defer(c, backoff, true).await
                        }
                        Err(e) => {
                            let error = e.to_json(channel.channel_type);
                            self.finish(
                                c,
                                Outcome {
                                    status: MessageStatus::Failed,
                                    provider_message_id: None,
                                    error: Some(error),
                                },
                                steps,
                            )
                            .await
                        }
                        Ok(_) => unreachable!("an accepted send classifies"),
                    },
                }
            }
        }
    }

    async fn defer(&self, c: &ClaimedSend, after: Duration, attempted: bool) -> StoreResult<()> {
        let not_before = self.clock.now().saturating_add(after);
        self.store
            .defer_queued(c.message.id, c.token, not_before, attempted)
            .await?;
        Ok(())
    }

    async fn finish(
        &self,
        c: &ClaimedSend,
        outcome: Outcome,
        steps: Vec<MessageStep>,
    ) -> StoreResult<()> {
        let result = outcome.status.as_str();
        let done = self
            .store
            .finish_queued(
                c.message.id,
                c.token,
                QueuedOutcome {
                    status: outcome.status,
                    provider_message_id: outcome.provider_message_id,
                    error: outcome.error,
                    steps,
                    now: self.clock.now(),
                },
                Box::new(sent_effects),
            )
            .await?;
        if let LeaseResult::Done(_) = done {
            metrics::counter!("switchboard_send_queue_sent_total", "status" => result).increment(1);
        }
        Ok(())
    }
}

struct Outcome {
    status: MessageStatus,
    provider_message_id: Option<String>,
    error: Option<serde_json::Value>,
}

fn failed(code: &str, message: &str) -> Outcome {
    Outcome {
        status: MessageStatus::Failed,
        provider_message_id: None,
        error: Some(json!({ "code": code, "message": message })),
    }
}

/// The trace the provider call of a queued message joins: the request's that queued it.
fn parent_trace(m: &MessageRecord) -> switchboard_domain::trace::TraceContext {
    m.trace
        .as_deref()
        .and_then(switchboard_domain::trace::TraceContext::parse)
        .map(|t| t.child())
        .unwrap_or_else(switchboard_domain::trace::TraceContext::new_root)
}

/// The provider call of a queued message: its content (as sent: media by id), the message it
/// replies to, and its uuid as the reference the provider echoes.
fn outgoing<'a>(m: &'a MessageRecord, content: &'a Content, reference: &'a str) -> Outgoing<'a> {
    let reply_to = m.context.as_ref().and_then(|c| c.reply_to.as_ref());
    Outgoing::of(content)
        .replying_to(reply_to)
        .referenced(reference)
}
