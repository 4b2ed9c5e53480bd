//! Plain sends: text, interactive, media and provider templates given in full, on the channel
//! chosen by the usual rules (`POST /messages`, `/messages/media`, `/messages/template`
//! without catalog fields, the legacy `/api/send*` routes and flow triggers).

use uuid::Uuid;

use crate::providers::ProviderError;
use switchboard_domain::channel::ChannelType;
use switchboard_domain::channel_selection::{ChannelRequest, select_channel};
use switchboard_domain::contact::{WindowError, check_service_window};
use switchboard_domain::message::{Content, MessageType};
use switchboard_domain::phone::Phone;
use switchboard_store::{
    ClaimToken, ConversationPolicy, IdempotencyCompletion, NewOutbound, RecipientRef,
    RecordedOutbound, StoreError, StoredResponse,
};

use super::provider::classify_outcome;
use super::recipient::{find_recipient, recipient_contact};
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
}

/// Builds the stored (and live) response of a recorded send: the 201 body, or the 422 of a
/// provider rejection.
pub type Responder =
    Box<dyn FnOnce(&RecordedOutbound, Option<&ProviderError>) -> StoredResponse + Send>;

/// Completes an idempotency claim in the transaction of the send.
pub struct SendCompletion {
    pub token: ClaimToken,
    pub respond: Responder,
}

/// Sends a message: chooses the channel, finds the recipient, checks the provider's and the
/// window's rules, calls the provider (outside any transaction) and records the result with
/// its events, and with the completion of the idempotency claim when given, in one
/// transaction.
pub async fn send(
    ctx: &SendContext<'_>,
    input: SendInput,
    completion: Option<SendCompletion>,
) -> Result<RecordedOutbound, SendError> {
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
    let provider = provider_for(ctx.store, ctx.secrets, ctx.providers, &channel).await?;
    let message_type = input.content.message_type();
    if !provider.supports(message_type) {
        return Err(SendError::ChannelUnusable {
            channel_id: channel.id,
            reason: "unsupported",
            message: format!(
                "{} channels cannot send {} messages.",
                channel.channel_type, message_type
            ),
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
    let now = ctx.clock.now();
    // A contact to be created on record, as the provider sees it.
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

    // Media on a channel whose provider takes uploads: fetched, checked and uploaded (or a
    // fresh upload reused) before the send; its refusals (`invalid_media`) record nothing.
    let prepared = super::media::prepare(ctx, provider.as_ref(), &channel, &input.content).await?;

    // The provider call: no transaction is open.
    let (outcome, steps) = match prepared {
        super::media::Prepared::Ready(content) => {
            super::provider::call(provider.as_ref(), &channel, &recipient, &content, ctx.clock)
                .await
        }
        super::media::Prepared::UploadRejected(e) => {
            let steps = super::media::upload_rejected_steps(&e, &channel, ctx.clock);
            (Err(e), steps)
        }
    };
    let (status, provider_message_id, error) = classify_outcome(&outcome, &channel)?;
    let rejection = outcome.as_ref().err().cloned();
    let policy = if rejection.is_some() || channel.channel_type == ChannelType::WhatsappCloud {
        // WhatsApp conversations are opened by the contact (or by conversation initiation);
        // a failed message never opens one.
        ConversationPolicy::ContinueIfOpen
    } else {
        ConversationPolicy::OpenOrContinue
    };
    let new = NewOutbound {
        org_id: input.org_id,
        channel_id: channel.id,
        api_key_id: input.api_key_id,
        recipient: match (&existing, &input.phone) {
            (Some(c), _) => RecipientRef::Contact(c.id),
            (None, Some(p)) => RecipientRef::Phone(p.clone()),
            (None, None) => unreachable!("checked above"),
        },
        conversation: policy,
        uuid: Uuid::now_v7(),
        message_type,
        status,
        content: input.content.to_json(),
        provider_message_id,
        error,
        now: ctx.clock.now(),
        steps,
    };
    let rejection_for_response = rejection.clone();
    let completion = completion.map(|c| IdempotencyCompletion {
        token: c.token,
        respond: Box::new(move |r: &RecordedOutbound| {
            (c.respond)(r, rejection_for_response.as_ref())
        }) as Box<dyn FnOnce(&RecordedOutbound) -> StoredResponse + Send>,
    });
    let recorded = ctx
        .store
        .record_outbound(
            new,
            completion,
            Box::new(|r| recorded_effects(r, "message.sent")),
        )
        .await
        .map_err(|e| match e {
            StoreError::ClaimLost => SendError::LostClaim,
            other => SendError::Store(other),
        })?;
    match rejection {
        None => Ok(recorded),
        Some(error) => Err(SendError::ProviderRejected {
            recorded: Box::new(recorded),
            error,
        }),
    }
}
