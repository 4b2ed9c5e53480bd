//! Plain sends: text, interactive, media and provider templates given in full, on the channel
//! chosen by the usual rules (`POST /messages`, `/messages/media`, `/messages/template`
//! without catalog fields, the legacy `/api/send*` routes and flow triggers).

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::providers::{Outgoing, Provider};
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::channel_selection::{ChannelRequest, select_channel};
use switchboard_domain::contact::{Contact, WindowError, check_service_window};
use switchboard_domain::message::{Content, InboundContext, MessageStatus, MessageType, ReplyTo};
use switchboard_domain::phone::Phone;
use switchboard_store::queue::QueueEntry;
use switchboard_store::{
    ClaimCompletion, ClaimRef, ConversationPolicy, GroupedOutbound, NewOutbound, RecipientRef,
    RecordedOutbound, StoreError,
};

use super::provider::{Dispatch, PACE_BOUND, classify_outcome};
use super::recipient::{find_recipient, recipient_contact, recipient_ref};
use super::{SendContext, SendError};
use crate::ops::channels::provider_for;
use crate::ops::message_events::recorded_effects;

/// A send, validated field by field by the caller.
#[derive(Clone, Debug)]
pub struct SendInput {
    pub org_id: i64,
    pub api_key_id: Option<i64>,
    pub key_default_channel: Option<i64>,
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
    pub content: Content,
    /// The message this one replies to: a message of the same contact.
    pub reply_to: Option<Uuid>,
}

/// Completes an idempotency claim in the transaction of the send (or writes the key there, when
/// the send claimed none before: [`PreparedSend::calls_out`]): the key keeps the record
/// (`switchboard_store::RecordedSend`), from which the API renders the answer.
#[derive(Clone)]
pub struct SendCompletion {
    pub claim: ClaimRef,
    /// The id of the request (its error bodies carry it), captured in the request's own task.
    pub request_id: Option<String>,
}

impl SendCompletion {
    /// What the store keeps: 201, or 422 when the provider rejected the message.
    pub fn claim(self, rejected: bool, extra: Option<serde_json::Value>) -> ClaimCompletion {
        ClaimCompletion {
            claim: self.claim,
            status: if rejected { 422 } else { 201 },
            request_id: self.request_id,
            extra,
        }
    }
}

/// A send whose every rule passed: what the provider call and the record need.
pub struct PreparedSend {
    pub channel: Channel,
    pub provider: Arc<dyn Provider>,
    /// The organization's contact, when the recipient already is one.
    pub existing: Option<Contact>,
    /// The recipient as the provider sees it (a contact to be created on record when new).
    pub recipient: Contact,
    pub input: SendInput,
    /// The message replied to, with its provider id.
    pub reply_to: Option<ReplyTo>,
}

impl PreparedSend {
    /// Whether sending it reaches anything outside this process (the provider's API, a media
    /// fetch): its idempotency claim must then come before [`send_prepared`].
    pub fn calls_out(&self) -> bool {
        self.provider.calls_out()
    }

    pub fn recipient_ref(&self) -> RecipientRef {
        recipient_ref(self.existing.as_ref(), self.input.phone.as_ref())
    }

    /// What a message of this send does to its conversation: WhatsApp conversations are opened
    /// by the contact (or by conversation initiation), and a failed message never opens one.
    pub fn conversation_policy(&self, failed: bool) -> ConversationPolicy {
        if failed || self.channel.channel_type == ChannelType::WhatsappCloud {
            ConversationPolicy::ContinueIfOpen
        } else {
            ConversationPolicy::OpenOrContinue
        }
    }
}

/// Adapters already built, by channel id (a batch builds each channel's once: its provider
/// settings are read and decrypted once, not per item).
pub type Adapters = HashMap<i64, Arc<dyn Provider>>;

/// Checks every rule of a send before anything is written or sent: the channel (selection, the
/// provider's support and content rules), the recipient, the customer-service window.
pub async fn prepare(ctx: &SendContext<'_>, input: SendInput) -> Result<PreparedSend, SendError> {
    prepare_with(ctx, input, &mut Adapters::new()).await
}

/// [`prepare`], reusing (and adding to) `adapters`.
pub async fn prepare_with(
    ctx: &SendContext<'_>,
    input: SendInput,
    adapters: &mut Adapters,
) -> Result<PreparedSend, SendError> {
    let channels = ctx.channels(input.org_id).await?;
    let channel = select_channel(
        &channels,
        &ChannelRequest {
            channel_id: input.channel_id,
            channel_slug: input.channel_slug.as_deref(),
            key_default: input.key_default_channel,
        },
    )
    .map_err(SendError::Channel)?
    .clone();
    let provider = match adapters.get(&channel.id) {
        Some(p) => p.clone(),
        None => {
            let p: Arc<dyn Provider> =
                Arc::from(provider_for(ctx.store, ctx.secrets, ctx.providers, &channel).await?);
            adapters.insert(channel.id, p.clone());
            p
        }
    };
    let message_type = input.content.message_type();
    if !provider.supports(message_type) {
        let message = format!(
            "{} channels cannot send {} messages.",
            channel.channel_type, message_type
        );
        // A channel that sends nothing at all (lead ingestion) is the wrong channel; a channel
        // type that cannot send this kind is CONVENTIONS' `unsupported_for_channel`.
        return Err(if channel.channel_type.can_send_messages() {
            SendError::UnsupportedForChannel {
                channel_id: channel.id,
                channel_type: channel.channel_type,
                message,
            }
        } else {
            SendError::ChannelUnusable {
                channel_id: channel.id,
                reason: "unsupported",
                message,
            }
        });
    }
    let errors = provider.check_content(&input.content);
    if !errors.is_empty() {
        return Err(SendError::Validation(errors));
    }

    // The recipient: an existing contact of the organization, or a phone number.
    let existing = find_recipient(
        ctx.store,
        input.org_id,
        input.contact_uuid,
        input.phone.as_ref(),
    )
    .await?;
    let mut input = input;
    resolve_reaction(ctx, &mut input, existing.as_ref()).await?;
    let reply_to = resolve_reply(ctx, input.org_id, input.reply_to, existing.as_ref()).await?;
    let now = ctx.clock.now();
    let recipient = recipient_contact(
        existing.as_ref(),
        input.org_id,
        input.phone.as_ref(),
        None,
        now,
    );
    if let Err(issue) = provider.check_recipient(&recipient) {
        let field = if input.contact_uuid.is_some() {
            "contact_uuid"
        } else {
            "phone"
        };
        return Err(SendError::Validation(
            switchboard_domain::FieldError::new(field, issue).into(),
        ));
    }

    // The customer-service window of WhatsApp: free-form messages only inside it.
    let windowed =
        channel.channel_type == ChannelType::WhatsappCloud && message_type != MessageType::Template;
    if windowed {
        let conversation = match &existing {
            Some(c) => ctx.store.find_open_conversation(c.id, channel.id).await?,
            None => None,
        };
        match check_service_window(conversation.as_ref(), now) {
            Ok(()) => {}
            Err(WindowError::ConversationRequired) => return Err(SendError::ConversationRequired),
            Err(WindowError::OutsideServiceWindow) => {
                let c = conversation.expect("an open conversation");
                return Err(SendError::OutsideServiceWindow {
                    conversation_uuid: c.uuid,
                    last_inbound_at: c.last_inbound_at,
                    window_expired_at: c.window_expires_at(),
                });
            }
        }
    }
    Ok(PreparedSend {
        channel,
        provider,
        existing,
        recipient,
        input,
        reply_to,
    })
}

/// A reaction goes to a message of the same contact (ours, with the provider's id): its
/// provider id is filled in; any other message is a 422 `validation_failed` on
/// `reaction.message_uuid`.
async fn resolve_reaction(
    ctx: &SendContext<'_>,
    input: &mut SendInput,
    recipient: Option<&Contact>,
) -> Result<(), SendError> {
    let Content::Reaction(r) = &mut input.content else {
        return Ok(());
    };
    let field = "reaction.message_uuid";
    let Some(uuid) = r.message_uuid else {
        return Err(field_error(field, "is required"));
    };
    let target =
        recipients_message(ctx, input.org_id, uuid, recipient, field, "a reaction").await?;
    r.provider_message_id = target.provider_message_id;
    Ok(())
}

/// `reply_to` names a message of the same contact, sent or received (not a reaction): the
/// message replied to, with the provider id the provider's call quotes.
pub(super) async fn resolve_reply(
    ctx: &SendContext<'_>,
    org_id: i64,
    reply_to: Option<Uuid>,
    recipient: Option<&Contact>,
) -> Result<Option<ReplyTo>, SendError> {
    let Some(uuid) = reply_to else {
        return Ok(None);
    };
    let target = recipients_message(ctx, org_id, uuid, recipient, "reply_to", "a reply").await?;
    if matches!(target.message_type, MessageType::Reaction) {
        return Err(field_error(
            "reply_to",
            "is a reaction: a reply quotes a message, not a reaction to one",
        ));
    }
    Ok(Some(ReplyTo {
        message_uuid: Some(uuid),
        provider_message_id: target.provider_message_id,
    }))
}

/// The message (by uuid) a reaction or a reply points at: one of the recipient's, with the
/// provider's id; anything else is a 422 `validation_failed` on `field`.
async fn recipients_message(
    ctx: &SendContext<'_>,
    org_id: i64,
    uuid: Uuid,
    recipient: Option<&Contact>,
    field: &str,
    what: &str,
) -> Result<ProviderMessage, SendError> {
    let target = match ctx.store.find_message(org_id, uuid).await {
        Ok(m) => m,
        Err(StoreError::NotFound) => {
            return Err(field_error(field, "is not a message of the organization"));
        }
        Err(e) => return Err(e.into()),
    };
    if recipient.is_none_or(|c| c.uuid != target.contact_uuid) {
        return Err(field_error(
            field,
            &format!(
                "is a message of another contact: {what} goes to a message of the recipient's"
            ),
        ));
    }
    match target.provider_message_id {
        Some(provider_message_id) => Ok(ProviderMessage {
            message_type: target.message_type,
            provider_message_id,
        }),
        None => Err(field_error(
            field,
            "has no provider message id yet (it was never sent)",
        )),
    }
}

/// A message of the recipient's, as a reaction or a reply names it at the provider.
struct ProviderMessage {
    message_type: MessageType,
    provider_message_id: String,
}

fn field_error(field: &str, issue: &str) -> SendError {
    SendError::Validation(switchboard_domain::FieldError::new(field, issue).into())
}

/// Sends a message: checks it ([`prepare`]), calls the provider within the channel's pace
/// (outside any transaction) and records the result with its events, and with the completion
/// of the idempotency claim when given, in one transaction. A send the pace puts beyond its
/// bound, or that the provider throttles, is recorded `queued` for the send worker
/// (`super::queued`), and its `message.sent` comes when the worker sends it.
pub async fn send(
    ctx: &SendContext<'_>,
    input: SendInput,
    completion: Option<SendCompletion>,
) -> Result<RecordedOutbound, SendError> {
    let prepared = prepare(ctx, input).await?;
    send_prepared(ctx, &prepared, completion).await
}

/// [`send`] of a send [`prepare`] checked: the provider call and the record. A send whose key
/// was not claimed before (`ClaimRef::New`) fails with `SendError::LostClaim` and writes nothing
/// when the key exists by the time of its record.
pub async fn send_prepared(
    ctx: &SendContext<'_>,
    prepared: &PreparedSend,
    completion: Option<SendCompletion>,
) -> Result<RecordedOutbound, SendError> {
    // Media on a channel whose provider takes uploads: fetched, checked and uploaded (or a
    // fresh upload reused) before the send; its refusals (`invalid_media`) record nothing.
    let media = super::media::prepare(
        ctx,
        prepared.provider.as_ref(),
        &prepared.channel,
        &prepared.input.content,
    )
    .await?;
    let dispatch = match media {
        super::media::Prepared::UploadRejected(e) => {
            let steps = super::media::upload_rejected_steps(&e, &prepared.channel, ctx.clock);
            Dispatch::Called(Err(e), steps)
        }
        ready => {
            let by_id = match ready {
                super::media::Prepared::Ready(c) => Some(c),
                _ => None,
            };
            let content = by_id.as_ref().unwrap_or(&prepared.input.content);
            let out = Outgoing::of(content).replying_to(prepared.reply_to.as_ref());
            super::provider::paced_call(
                prepared.provider.as_ref(),
                ctx.providers.pacer(),
                &prepared.channel,
                &prepared.recipient,
                &out,
                ctx.clock,
                PACE_BOUND,
                0,
            )
            .await
        }
    };
    let (status, provider_message_id, error, steps, rejection, queue) = match dispatch {
        Dispatch::Called(outcome, steps) => {
            let (status, provider_message_id, error) =
                classify_outcome(&outcome, &prepared.channel)?;
            (
                status,
                provider_message_id,
                error,
                steps,
                outcome.err(),
                None,
            )
        }
        Dispatch::Deferred {
            not_before, steps, ..
        } => (
            MessageStatus::Queued,
            None,
            None,
            steps,
            None,
            Some(QueueEntry {
                batch_id: None,
                not_before,
            }),
        ),
    };
    let new = NewOutbound {
        org_id: prepared.input.org_id,
        channel: prepared.channel.identity(),
        api_key_id: prepared.input.api_key_id,
        recipient: prepared.recipient_ref(),
        conversation: prepared.conversation_policy(rejection.is_some()),
        uuid: Uuid::now_v7(),
        message_type: prepared.input.content.message_type(),
        status,
        content: prepared.input.content.to_json(),
        provider_message_id,
        error,
        now: ctx.clock.now(),
        steps,
        queue,
        context: prepared.reply_to.clone().map(InboundContext::replying_to),
    };
    // Written by group commit: with the records of concurrent sends, in one transaction.
    let recorded = ctx
        .store
        .record_outbound_grouped(GroupedOutbound {
            new,
            completion: completion.map(|c| c.claim(rejection.is_some(), None)),
            effects: Arc::new(|r| recorded_effects(r, "message.sent")),
        })
        .await
        .map_err(|e| match e {
            StoreError::ClaimLost => SendError::LostClaim,
            other => SendError::Store(other),
        })?;
    if recorded.message.status == MessageStatus::Queued {
        ctx.providers.wake_send_worker();
    }
    match rejection {
        None => Ok(recorded),
        Some(error) => Err(SendError::ProviderRejected {
            recorded: Box::new(recorded),
            error,
        }),
    }
}
