//! Messaging use cases shared by the HTTP API, the provider callbacks and the admin tools:
//! sending (channel selection, recipient, the customer-service window, the provider call, the
//! record with its events and idempotent response), receiving (provider callbacks and the
//! sandbox tools) and contacts.
//!
//! Events (outbox, written in the transaction of the change, with the channel identity):
//! * `message.sent`: every outbound message recorded by a send, with its `status` (`sent`, or
//!   `failed` when the provider rejected it);
//! * `message.received`: every new inbound message;
//! * `message.status.update`: every status change of an outbound message;
//! * `contact.created`, `conversation.created`: when a send or an inbound message creates them.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::crypto::SecretBox;
use crate::providers::{ParsedCallback, Provider, ProviderError, ProviderHub};
use crate::views::messages::{ContactOut, ConversationOut, MessageOut};
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::channel_selection::{ChannelRequest, SelectionError, select_channel};
use switchboard_domain::clock::Clock;
use switchboard_domain::contact::{
    Contact, WindowError, check_service_window, validate_contact_name,
};
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::message::{Content, Direction, MAX_TEXT_CHARS, MessageStatus, MessageType};
use switchboard_domain::phone::Phone;
use switchboard_domain::{Timestamp, ValidationErrors};
use switchboard_store::{
    BatchChange, BatchOutcome, ClaimToken, ConversationPolicy, IdempotencyCompletion,
    InboundOutcome, InboundSender, MessageRecord, MessageRef, NewContact, NewInbound, NewOutbound,
    NewStatus, ProviderBatch, RecipientRef, RecordedOutbound, StatusOutcome, Store, StoreError,
    StoredResponse,
};

use super::{OpError, OpResult};

// ---------------------------------------------------------------------------------------------
// Events

fn message_data(m: &MessageRecord) -> Value {
    json!({
        "message_id": m.id,
        "message_uuid": m.uuid,
        "contact_uuid": m.contact_uuid,
        "conversation_uuid": m.conversation_uuid,
        "status": m.status,
        "type": m.message_type,
        "direction": m.direction,
        "provider_message_id": m.provider_message_id,
        "error": m.error,
        "message": MessageOut::from(m),
    })
}

/// `contact.created` / `conversation.created` for what `r` created, then `name` for its message.
pub(crate) fn recorded_effects(r: &RecordedOutbound, name: &str) -> Effects {
    let m = &r.message;
    let channel = Some(m.channel.clone());
    let mut effects = Effects::none();
    if r.contact_created {
        effects = effects.event(NewEvent::new(
            m.org_id,
            "contact.created",
            json!({ "contact_uuid": r.contact.uuid, "contact": ContactOut::from(&r.contact) }),
            channel.clone(),
            m.updated_at,
        ));
    }
    if let (true, Some(c)) = (r.conversation_created, &r.conversation) {
        effects = effects.event(NewEvent::new(
            m.org_id,
            "conversation.created",
            json!({
                "conversation_uuid": c.uuid,
                "contact_uuid": c.contact_uuid,
                "channel_id": c.channel_id,
                "conversation": ConversationOut::from(c),
            }),
            channel.clone(),
            m.updated_at,
        ));
    }
    effects.event(NewEvent::new(
        m.org_id,
        name,
        message_data(m),
        channel,
        m.updated_at,
    ))
}

fn batch_effects(change: BatchChange<'_>) -> Effects {
    match change {
        BatchChange::Inbound(r) => recorded_effects(r, "message.received"),
        BatchChange::Status { message, previous } => {
            let mut data = message_data(message);
            data["previous_status"] = json!(previous);
            Effects::none().event(NewEvent::new(
                message.org_id,
                "message.status.update",
                data,
                Some(message.channel.clone()),
                message.updated_at,
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sending

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

/// Why a send did not happen (each is one error code of the API).
#[derive(Debug)]
pub enum SendError {
    /// 422 `validation_failed`.
    Validation(ValidationErrors),
    /// 422 `channel_conflict`, `no_default_channel` or `invalid_channel`.
    Channel(SelectionError),
    /// 422 `invalid_channel`: the channel cannot do this; `reason` is `not_configured` (its
    /// provider settings lack what this needs) or `unsupported` (its type cannot).
    ChannelUnusable {
        channel_id: i64,
        reason: &'static str,
        message: String,
    },
    /// 422 with the refusal's code (`invalid_channel`, `invalid_template`, `consent_required`):
    /// a catalog template send broke a rule of conversation initiation or campaign sends.
    Refused(super::templates::Refusal),
    /// 422 `conversation_required`.
    ConversationRequired,
    /// 422 `outside_service_window`.
    OutsideServiceWindow {
        conversation_uuid: Uuid,
        last_inbound_at: Option<Timestamp>,
        window_expired_at: Option<Timestamp>,
    },
    /// 422 `provider_rejected`; the message was recorded as `failed`.
    ProviderRejected {
        recorded: Box<RecordedOutbound>,
        error: ProviderError,
    },
    /// 503 `provider_unavailable`; nothing was recorded.
    ProviderUnavailable(String),
    /// 409 `idempotency_in_progress`: another request took the idempotency key over while this
    /// one ran; nothing was recorded.
    LostClaim,
    Store(StoreError),
}

impl From<StoreError> for SendError {
    fn from(e: StoreError) -> Self {
        SendError::Store(e)
    }
}

impl From<OpError> for SendError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Store(s) => SendError::Store(s),
            other => SendError::Store(StoreError::Other(other.to_string())),
        }
    }
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

/// Everything a send needs.
pub struct SendContext<'a> {
    pub store: &'a dyn Store,
    pub secrets: &'a SecretBox,
    pub clock: &'a dyn Clock,
    pub providers: &'a ProviderHub,
    /// The channel lists, cached (invalidated with every channel change).
    pub cache: &'a crate::cache::ConfigCache,
}

impl SendContext<'_> {
    /// The organization's channels, from the cache when it is fresh.
    pub async fn channels(&self, org_id: i64) -> Result<std::sync::Arc<Vec<Channel>>, SendError> {
        Ok(self.cache.channels(self.store, org_id).await?)
    }
}

/// The adapter of a channel, with its configuration decrypted.
pub async fn provider_for(
    store: &dyn Store,
    secrets: &SecretBox,
    providers: &ProviderHub,
    channel: &Channel,
) -> OpResult<Box<dyn Provider>> {
    let config = match channel.channel_type {
        ChannelType::Sandbox | ChannelType::LeadIngestion => Value::Null,
        _ => super::channels::provider_config(store, secrets, channel.id).await?,
    };
    Ok(providers.for_channel(channel.channel_type, &channel.identifier, &config))
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

    // The provider call: no transaction is open.
    let started = std::time::Instant::now();
    let outcome = provider.send(&recipient, &input.content).await;
    metrics::histogram!("provider_send_duration_seconds", "channel_type" => channel.channel_type.as_str())
        .record(started.elapsed().as_secs_f64());
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
            StoreError::Conflict(_) => SendError::LostClaim,
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

/// The recipient of a send: the organization's contact by UUID (which must agree with `phone`
/// when both are given), or by phone (`None` when the organization has no contact with it).
pub(crate) async fn find_recipient(
    store: &dyn Store,
    org_id: i64,
    contact_uuid: Option<Uuid>,
    phone: Option<&Phone>,
) -> Result<Option<Contact>, SendError> {
    match (contact_uuid, phone) {
        (Some(uuid), phone) => {
            let contact = store.find_contact(org_id, uuid).await?.ok_or_else(|| {
                SendError::Validation(
                    switchboard_domain::FieldError::new(
                        "contact_uuid",
                        "no contact with this UUID exists in the organization",
                    )
                    .into(),
                )
            })?;
            if let Some(p) = phone {
                if contact.phone.as_ref() != Some(p) {
                    return Err(SendError::Validation(
                        switchboard_domain::FieldError::new(
                            "phone",
                            "does not match the phone of the contact given by contact_uuid",
                        )
                        .into(),
                    ));
                }
            }
            Ok(Some(contact))
        }
        (None, Some(phone)) => Ok(store.find_contact_by_phone(org_id, phone).await?),
        (None, None) => Err(SendError::Validation(
            switchboard_domain::FieldError::new(
                "contact_uuid",
                "is required (or give the recipient's phone)",
            )
            .into(),
        )),
    }
}

/// The recipient as the provider sees it: the existing contact, or the one to be created
/// with the message.
pub(crate) fn recipient_contact(
    existing: Option<&Contact>,
    org_id: i64,
    phone: Option<&Phone>,
    name: Option<&str>,
    now: Timestamp,
) -> Contact {
    existing.cloned().unwrap_or_else(|| Contact {
        id: 0,
        uuid: Uuid::nil(),
        org_id,
        phone: phone.cloned(),
        name: name.map(str::to_owned),
        telegram_chat_id: None,
        created_at: now,
        updated_at: now,
    })
}

/// What a provider's answer means for the record: (status, provider id, error), or the send
/// error when nothing is to be recorded (unavailable, not configured, unsupported).
pub(crate) fn classify_outcome(
    outcome: &Result<crate::providers::Accepted, ProviderError>,
    channel: &Channel,
) -> Result<(MessageStatus, Option<String>, Option<Value>), SendError> {
    let result = match outcome {
        Ok(_) => "accepted",
        Err(ProviderError::Rejected { .. }) => "rejected",
        Err(ProviderError::Unavailable(_)) => "unavailable",
        Err(ProviderError::NotConfigured(_)) => "not_configured",
        Err(ProviderError::Unsupported(_)) => "unsupported",
    };
    metrics::counter!("provider_sends_total", "channel_type" => channel.channel_type.as_str(), "result" => result).increment(1);
    match outcome {
        Ok(accepted) => Ok((
            accepted.status,
            Some(accepted.provider_message_id.clone()),
            None,
        )),
        Err(e @ ProviderError::Rejected { .. }) => Ok((
            MessageStatus::Failed,
            None,
            Some(e.to_json(channel.channel_type)),
        )),
        Err(ProviderError::Unavailable(m)) => Err(SendError::ProviderUnavailable(m.clone())),
        Err(ProviderError::NotConfigured(m)) => Err(SendError::ChannelUnusable {
            channel_id: channel.id,
            reason: "not_configured",
            message: m.clone(),
        }),
        Err(ProviderError::Unsupported(m)) => Err(SendError::ChannelUnusable {
            channel_id: channel.id,
            reason: "unsupported",
            message: m.clone(),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Receiving

/// Records what a provider reported for a channel (inbound messages and status updates).
pub async fn ingest(
    store: &dyn Store,
    clock: &dyn Clock,
    channel: &Channel,
    parsed: ParsedCallback,
) -> OpResult<BatchOutcome> {
    let now = clock.now();
    let batch = ProviderBatch {
        org_id: channel.org_id,
        channel_id: channel.id,
        messages: parsed
            .messages
            .into_iter()
            .map(|m| NewInbound {
                sender: m.sender,
                profile_name: m.profile_name,
                uuid: Uuid::now_v7(),
                message_type: m.message_type,
                content: m.content,
                provider_message_id: m.provider_message_id,
                sent_at: m.sent_at.unwrap_or(now).min(now),
            })
            .collect(),
        statuses: parsed
            .statuses
            .into_iter()
            .map(|s| NewStatus {
                message: MessageRef::Provider(s.provider_message_id),
                status: s.status,
                error: s.error,
            })
            .collect(),
        now,
    };
    let outcome = store
        .record_provider_batch(batch, Box::new(batch_effects))
        .await?;
    metrics::counter!("provider_callbacks_total", "channel_type" => channel.channel_type.as_str())
        .increment(1);
    Ok(outcome)
}

async fn sandbox_channel(store: &dyn Store, id: i64) -> OpResult<Channel> {
    let channel = store.get_channel(id).await.map_err(|e| match e {
        StoreError::NotFound => OpError::NotFound(format!("channel {id} does not exist")),
        other => other.into(),
    })?;
    if channel.channel_type != ChannelType::Sandbox {
        return Err(OpError::Invalid(format!(
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
    let phone = Phone::parse(from).map_err(|e| OpError::Invalid(format!("--from: {e}")))?;
    if text.trim().is_empty() || text.contains('\0') || text.chars().count() > MAX_TEXT_CHARS {
        return Err(OpError::Invalid(format!(
            "--text: expected 1 to {MAX_TEXT_CHARS} characters"
        )));
    }
    let channel = sandbox_channel(store, channel_id).await?;
    let outcome = ingest(
        store,
        clock,
        &channel,
        ParsedCallback {
            messages: vec![crate::providers::ParsedInbound {
                sender: InboundSender::Phone(phone),
                profile_name: None,
                message_type: MessageType::Text,
                content: json!({ "body": text }),
                provider_message_id: format!("sandbox-in-{}", Uuid::now_v7().simple()),
                sent_at: at,
            }],
            statuses: vec![],
            templates: vec![],
            skipped: 0,
        },
    )
    .await?;
    match outcome.messages.into_iter().next() {
        Some(InboundOutcome::Stored(r)) => Ok(r.message.clone()),
        _ => Err(OpError::Conflict("the message was not stored".into())),
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
        StoreError::NotFound => OpError::NotFound(format!("message {message_id} does not exist")),
        other => other.into(),
    })?;
    let channel = sandbox_channel(store, message.channel.id).await?;
    if message.direction != Direction::Outbound {
        return Err(OpError::Invalid(format!(
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
                }],
                now: clock.now(),
            },
            Box::new(batch_effects),
        )
        .await?;
    match outcome.statuses.into_iter().next() {
        Some(StatusOutcome::Applied { message, .. }) => Ok(message),
        Some(StatusOutcome::Ignored { message }) => Err(OpError::Conflict(format!(
            "message {message_id} is {}; it cannot move to {status} (statuses only move forward: sent, delivered, read; failed before delivery)",
            message.status
        ))),
        _ => Err(OpError::NotFound(format!(
            "message {message_id} does not exist"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Contacts

/// `admin contact create`.
pub async fn create_contact(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    phone: &str,
    name: Option<&str>,
) -> OpResult<Contact> {
    let phone = Phone::parse(phone).map_err(|e| OpError::Invalid(format!("--phone: {e}")))?;
    let name = name
        .map(|n| validate_contact_name(n).map_err(|e| OpError::Invalid(format!("--name: {e}"))))
        .transpose()?;
    super::orgs::require_org(store, org_id).await?;
    let now = clock.now();
    store
        .create_contact(
            NewContact {
                org_id,
                uuid: Uuid::now_v7(),
                phone: Some(phone.clone()),
                name,
                telegram_chat_id: None,
                now,
            },
            Box::new(move |c| {
                Effects::none().event(NewEvent::new(
                    c.org_id,
                    "contact.created",
                    json!({ "contact_uuid": c.uuid, "contact": ContactOut::from(c) }),
                    None,
                    now,
                ))
            }),
        )
        .await
        .map_err(|e| match e {
            StoreError::UniqueViolation(_) => OpError::Conflict(format!(
                "--phone: organization {org_id} already has a contact with {phone}"
            )),
            StoreError::ForeignKeyViolation => {
                OpError::NotFound(format!("organization {org_id} does not exist"))
            }
            other => other.into(),
        })
}
