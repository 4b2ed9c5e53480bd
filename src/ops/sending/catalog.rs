//! Catalog template sends: conversation initiation (specification 4.3.1–4.3.5) and
//! synchronized campaign recipients (4.3.6), with their consent evidence and audit entries.
//!
//! Organization log entries written here:
//! * `conversation.initiated` (audit, actor the API key): who initiated which conversation,
//!   with which template, under which consent;
//! * `campaign_send.validated` (audit, with the recorded message) and `campaign_send.refused`
//!   (audit, in a transaction of its own, with the refusal code).
//!
//! Every `audit` entry also goes to webhooks as `audit.recorded` (the store does that).

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::providers::{Accepted, Outgoing, Provider, ProviderError};
use switchboard_domain::channel::{Channel, ChannelType};
use switchboard_domain::channel_selection::{ChannelRequest, SelectionError, select_channel};
use switchboard_domain::contact::Contact;
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};
use switchboard_domain::message::{Content, InboundContext, MessageType, ReplyTo};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::{Consent, ConsentRules};
use switchboard_domain::{FieldError, Timestamp};
use switchboard_store::MessageStep;
use switchboard_store::{
    ConsentContext, ConversationPolicy, EffectsFn, NewConsent, NewOutbound, RecordedOutbound,
    StoreError, TemplateRecord,
};

use super::catalog_check::{CatalogRequest, ValidatedCatalogSend, validate_catalog_send};
use super::plain::SendCompletion;
use super::provider::classify_outcome;
use super::recipient::{find_recipient, recipient_contact, recipient_ref};
use super::{Refusal, SendContext, SendError};
use crate::ops::channels::provider_for;
use crate::ops::message_events::recorded_effects;
use crate::views::sends::catalog_extra;
use crate::views::templates::{ConsentOut, TemplateOut};

/// Organization log types written here.
pub mod log_types {
    pub const CONVERSATION_INITIATED: &str = "conversation.initiated";
    pub const CAMPAIGN_SEND_VALIDATED: &str = "campaign_send.validated";
    pub const CAMPAIGN_SEND_REFUSED: &str = "campaign_send.refused";
}

fn template_summary(t: &TemplateRecord) -> Value {
    json!({
        "uuid": t.uuid,
        "name": t.name,
        "language": t.language,
        "category": t.category,
    })
}

/// Which catalog send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogMode {
    /// `ensure_conversation: true`: explicit `channel_id`; the conversation is opened or
    /// continued.
    Initiation,
    /// A synchronized campaign recipient: normal channel selection; no conversation is opened.
    Campaign,
}

/// A catalog send, its fields already checked for shape.
#[derive(Clone, Debug)]
pub struct CatalogSendInput {
    pub mode: CatalogMode,
    pub org_id: i64,
    /// The API key sending (the actor of the audit entries).
    pub api_key_id: i64,
    pub api_key_prefix: String,
    pub key_default_channel: Option<i64>,
    pub channel_id: Option<i64>,
    pub channel_slug: Option<String>,
    pub contact_uuid: Option<Uuid>,
    pub phone: Option<Phone>,
    /// The name of a contact created by the send.
    pub first_name: Option<String>,
    pub request: CatalogRequest,
    pub rules: ConsentRules,
    /// The message this one replies to: a message of the same contact.
    pub reply_to: Option<Uuid>,
}

/// What a catalog send adds to the send response: the catalog template sent and the consent
/// evidence stored with the message.
#[derive(Clone, Debug)]
pub struct CatalogExtra {
    pub template: TemplateRecord,
    /// The stored evidence's UUID.
    pub consent_uuid: Uuid,
    pub consent: Consent,
    /// When the evidence was stored.
    pub recorded_at: Timestamp,
}

impl CatalogExtra {
    /// What the answer shows beside the record: the consent stored and the template used.
    pub fn shown(&self) -> Value {
        catalog_extra(
            &ConsentOut::new(self.consent_uuid, &self.consent, self.recorded_at),
            &TemplateOut::from(&self.template),
        )
    }
}

/// A recorded catalog send.
#[derive(Clone, Debug)]
pub struct CatalogSent {
    pub recorded: RecordedOutbound,
    pub extra: CatalogExtra,
}

/// The channel of an initiation: `channel_id` of an active, template-capable channel of the
/// organization; `channel_slug` and defaults do not count.
fn explicit_channel(
    channels: &[Channel],
    channel_id: Option<i64>,
    channel_slug: Option<&str>,
) -> Result<Channel, SendError> {
    let id = match (channel_id, channel_slug) {
        (Some(_), Some(_)) => return Err(SendError::Channel(SelectionError::Conflict)),
        (Some(id), None) => id,
        (None, slug) => {
            let message = if slug.is_some() {
                "Conversation initiation needs an explicit channel_id; channel_slug does not count."
            } else {
                "Conversation initiation needs an explicit channel_id; the key's and the organization's default channels do not count."
            };
            return Err(Refusal::channel(
                "channel_id_required",
                Vec::new(),
                "channel_id",
                message.into(),
            )
            .into_send());
        }
    };
    let Some(channel) = channels.iter().find(|c| c.id == id) else {
        return Err(Refusal::channel(
            "not_found",
            Vec::new(),
            "channel_id",
            "The channel does not exist in this organization.".into(),
        )
        .into_send());
    };
    Ok(channel.clone())
}

impl Refusal {
    pub(super) fn into_send(self) -> SendError {
        SendError::Refused(self)
    }
}

/// A compact, bounded copy of the consent object as given (for refusal audits).
fn consent_as_given(v: Option<&Value>) -> Value {
    let Some(Value::Object(o)) = v else {
        return Value::Null;
    };
    let mut out = Map::new();
    for key in ["confirmed", "purpose", "source", "reference", "captured_at"] {
        match o.get(key) {
            Some(Value::String(s)) => {
                out.insert(key.into(), json!(s.chars().take(256).collect::<String>()));
            }
            Some(b @ Value::Bool(_)) => {
                out.insert(key.into(), b.clone());
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                out.insert(key.into(), json!("(not a string)"));
            }
        }
    }
    Value::Object(out)
}

fn consent_details(uuid: Uuid, c: &Consent) -> Value {
    json!({
        "uuid": uuid,
        "confirmed": true,
        "purpose": c.purpose,
        "source": c.source,
        "reference": c.reference,
        "captured_at": c.captured_at,
    })
}

/// Sends a catalog template (conversation initiation or campaign recipient): chooses the
/// channel, validates template and consent ([`validate_catalog_send`]), finds the recipient,
/// calls the provider (outside any transaction) and records the message with its consent
/// evidence, its events (`contact.created` and `conversation.created` when new,
/// `message.sent`) and its audit entry, and the completion of the idempotency claim, in one
/// transaction. A campaign send refused before the provider call writes a
/// `campaign_send.refused` audit entry in a transaction of its own.
pub async fn send_catalog(
    ctx: &SendContext<'_>,
    input: CatalogSendInput,
    completion: Option<SendCompletion>,
) -> Result<CatalogSent, SendError> {
    let actor = Actor::ApiKey {
        api_key_id: input.api_key_id,
        api_key_prefix: input.api_key_prefix.clone(),
    };
    let mut chosen: Option<i64> = None;
    let checked = check_catalog_send(ctx, &input, &mut chosen).await;
    let (channel, validated, existing, reply_to) = match checked {
        Ok(x) => x,
        Err(e) => {
            if input.mode == CatalogMode::Campaign {
                if let Some(refusal) = Refusal::of_send_error(&e) {
                    audit_refusal(ctx, &input, &actor, chosen, &refusal).await?;
                }
            }
            return Err(e);
        }
    };
    let ValidatedCatalogSend {
        template,
        consent,
        content,
    } = validated;
    let provider = provider_for(ctx.store, ctx.secrets, ctx.providers, &channel).await?;
    let now = ctx.clock.now();
    let recipient = recipient_contact(
        existing.as_ref(),
        input.org_id,
        input.phone.as_ref(),
        input.first_name.as_deref(),
        now,
    );

    // The provider call: no transaction is open.
    // Catalog sends wait for their pace like every send; one the pace puts beyond its bound,
    // or that the provider throttles, is answered 503 `provider_unavailable` (nothing is
    // recorded; the client retries with the same Idempotency-Key).
    let out = Outgoing::of(&content).replying_to(reply_to.as_ref());
    let (outcome, steps) =
        paced_or_unavailable(ctx, provider.as_ref(), &channel, &recipient, &out).await?;
    let (status, provider_message_id, error) = match classify_outcome(&outcome, &channel) {
        Ok(x) => x,
        Err(e) => {
            // A channel that lacks its provider settings refuses the recipient too.
            if let (CatalogMode::Campaign, SendError::ChannelUnusable { .. }) = (input.mode, &e) {
                if let Some(refusal) = Refusal::of_send_error(&e) {
                    audit_refusal(ctx, &input, &actor, Some(channel.id), &refusal).await?;
                }
            }
            return Err(e);
        }
    };
    let rejection = outcome.as_ref().err().cloned();
    let policy = match (input.mode, &rejection) {
        (CatalogMode::Initiation, None) => ConversationPolicy::OpenOrContinue,
        // A failed message never opens a conversation; campaign sends never do.
        _ => ConversationPolicy::ContinueIfOpen,
    };
    let consent_uuid = Uuid::now_v7();
    let now = ctx.clock.now();
    let extra = CatalogExtra {
        template: template.clone(),
        consent_uuid,
        consent: consent.clone(),
        recorded_at: now,
    };
    let new = NewOutbound {
        org_id: input.org_id,
        channel: channel.identity(),
        api_key_id: Some(input.api_key_id),
        recipient: recipient_ref(existing.as_ref(), input.phone.as_ref()),
        conversation: policy,
        uuid: Uuid::now_v7(),
        message_type: MessageType::Template,
        status,
        content: stored_content(&content, &template),
        provider_message_id,
        error,
        now,
        steps,
        queue: None,
        context: reply_to.map(InboundContext::replying_to),
    };
    let new_consent = new_consent(consent_uuid, template.id, &input, &consent);
    let rejected = rejection.is_some();
    let completion = completion.map(|c| c.claim(rejected, Some(extra.shown())));
    let effects = catalog_effects(
        input.mode,
        rejected,
        actor,
        template_summary(&template),
        consent_details(consent_uuid, &consent),
    );
    let recorded = ctx
        .store
        .record_consented_outbound(
            new,
            input.first_name.clone(),
            new_consent,
            completion,
            effects,
        )
        .await
        .map_err(|e| match e {
            StoreError::ClaimLost => SendError::LostClaim,
            other => SendError::Store(other),
        })?;
    match rejection {
        None => Ok(CatalogSent { recorded, extra }),
        Some(error) => Err(SendError::ProviderRejected {
            recorded: Box::new(recorded),
            error,
        }),
    }
}

/// The provider call of a catalog send, within the channel's pace: a send the pace puts beyond
/// its bound, or that the provider throttles, is 503 `provider_unavailable` (nothing is
/// recorded; the client retries with the same Idempotency-Key).
async fn paced_or_unavailable(
    ctx: &SendContext<'_>,
    provider: &dyn Provider,
    channel: &Channel,
    recipient: &Contact,
    out: &Outgoing<'_>,
) -> Result<(Result<Accepted, ProviderError>, Vec<MessageStep>), SendError> {
    match super::provider::paced_call(
        provider,
        ctx.providers.pacer(),
        channel,
        recipient,
        out,
        ctx.clock,
        super::provider::PACE_BOUND,
        0,
    )
    .await
    {
        super::provider::Dispatch::Called(outcome, steps) => Ok((outcome, steps)),
        super::provider::Dispatch::Deferred { reason, .. } => Err(SendError::ProviderUnavailable(
            format!("the channel's send rate does not allow this send now ({reason}); retry later"),
        )),
    }
}

/// A catalog send's content as stored: the template sent, with its catalog uuid and category.
fn stored_content(content: &Content, template: &TemplateRecord) -> Value {
    let mut stored = content.to_json();
    stored["template_uuid"] = json!(template.uuid);
    stored["category"] = json!(template.category);
    stored
}

/// The consent evidence a catalog send stores with its message.
fn new_consent(
    uuid: Uuid,
    template_id: i64,
    input: &CatalogSendInput,
    consent: &Consent,
) -> NewConsent {
    NewConsent {
        uuid,
        template_id,
        api_key_id: Some(input.api_key_id),
        context: match input.mode {
            CatalogMode::Initiation => ConsentContext::Initiation,
            CatalogMode::Campaign => ConsentContext::Campaign,
        },
        purpose: consent.purpose,
        source: consent.source,
        reference: consent.reference.clone(),
        captured_at: consent.captured_at,
    }
}

/// The effects of a recorded catalog send: `message.sent`, and the audit entry of its mode
/// (`conversation.initiated` for an initiation the provider accepted,
/// `campaign_send.validated` for a campaign recipient).
fn catalog_effects(
    mode: CatalogMode,
    rejected: bool,
    actor: Actor,
    summary: Value,
    consent_json: Value,
) -> EffectsFn<'static, RecordedOutbound> {
    Box::new(move |r: &RecordedOutbound| {
        let effects = recorded_effects(r, "message.sent");
        let m = &r.message;
        let phone = r.contact.phone.as_ref().map(|p| p.as_str().to_owned());
        match mode {
            CatalogMode::Initiation if !rejected => {
                let c = r
                    .conversation
                    .as_ref()
                    .expect("an initiation opens a conversation");
                effects.log(OrgEvent::new(
                    m.org_id,
                    log_types::CONVERSATION_INITIATED,
                    EventCategory::Audit,
                    actor.clone(),
                    Some(Subject::new("conversation", c.uuid)),
                    json!({
                        "conversation_uuid": c.uuid,
                        "conversation_created": r.conversation_created,
                        "contact_uuid": r.contact.uuid,
                        "contact_created": r.contact_created,
                        "phone": phone,
                        "channel_id": m.channel.id,
                        "message_id": m.id,
                        "message_uuid": m.uuid,
                        "provider_message_id": m.provider_message_id,
                        "template": summary,
                        "consent": consent_json,
                    }),
                    m.updated_at,
                ))
            }
            CatalogMode::Initiation => effects,
            CatalogMode::Campaign => effects.log(OrgEvent::new(
                m.org_id,
                log_types::CAMPAIGN_SEND_VALIDATED,
                EventCategory::Audit,
                actor.clone(),
                Some(Subject::new("message", m.uuid)),
                json!({
                    "message_id": m.id,
                    "message_uuid": m.uuid,
                    "status": m.status,
                    "contact_uuid": r.contact.uuid,
                    "contact_created": r.contact_created,
                    "phone": phone,
                    "conversation_uuid": m.conversation_uuid,
                    "channel_id": m.channel.id,
                    "template": summary,
                    "consent": consent_json,
                }),
                m.updated_at,
            )),
        }
    })
}

/// Everything checked before the provider call: the channel, template and consent, the
/// recipient. `chosen` receives the channel's id once known (for the refusal audit).
async fn check_catalog_send(
    ctx: &SendContext<'_>,
    input: &CatalogSendInput,
    chosen: &mut Option<i64>,
) -> Result<
    (
        Channel,
        ValidatedCatalogSend,
        Option<Contact>,
        Option<ReplyTo>,
    ),
    SendError,
> {
    let channels = ctx.channels(input.org_id).await?;
    let channel = match input.mode {
        CatalogMode::Initiation => {
            explicit_channel(&channels, input.channel_id, input.channel_slug.as_deref())?
        }
        CatalogMode::Campaign => {
            // Normal selection (channel_id, channel_slug, the key's default, the organization's).
            select_channel(
                &channels,
                &ChannelRequest {
                    channel_id: input.channel_id,
                    channel_slug: input.channel_slug.as_deref(),
                    key_default: input.key_default_channel,
                },
            )
            .map_err(SendError::Channel)?
            .clone()
        }
    };
    *chosen = Some(channel.id);
    let validated = validate_catalog_send(
        ctx.store,
        input.org_id,
        &channel,
        &input.request,
        ctx.clock.now(),
        &input.rules,
    )
    .await?;
    let existing = find_recipient(
        ctx.store,
        input.org_id,
        input.contact_uuid,
        input.phone.as_ref(),
    )
    .await?;
    if let Some(c) = &existing {
        if c.phone.is_none() && channel.channel_type == ChannelType::WhatsappCloud {
            return Err(SendError::Validation(
                FieldError::new(
                    "contact_uuid",
                    "the contact has no phone number, which WhatsApp needs",
                )
                .into(),
            ));
        }
    }
    let reply_to =
        super::plain::resolve_reply(ctx, input.org_id, input.reply_to, existing.as_ref()).await?;
    Ok((channel, validated, existing, reply_to))
}

/// Writes the `campaign_send.refused` audit entry of a refused campaign send (its own
/// transaction: the request fails, so nothing else is written).
async fn audit_refusal(
    ctx: &SendContext<'_>,
    input: &CatalogSendInput,
    actor: &Actor,
    channel_id: Option<i64>,
    refusal: &Refusal,
) -> Result<(), SendError> {
    let template_uuid = input
        .request
        .template_uuid
        .as_deref()
        .and_then(|s| Uuid::parse_str(s.trim()).ok());
    let details = json!({
        "code": refusal.code,
        "message": refusal.message,
        "reason": refusal.details.get("reason"),
        "fields": refusal.details.get("fields"),
        "channel_id": channel_id.or(input.channel_id),
        "channel_slug": input.channel_slug.as_deref().map(|s| s.chars().take(200).collect::<String>()),
        "template_uuid": template_uuid,
        "template_name": input.request.template.as_ref().and_then(|t| t.name.clone()),
        "contact_uuid": input.contact_uuid,
        "phone": input.phone.as_ref().map(|p| p.as_str()),
        "consent": consent_as_given(input.request.consent.as_ref()),
    });
    ctx.store
        .write_effects(Effects::none().log(OrgEvent::new(
            input.org_id,
            log_types::CAMPAIGN_SEND_REFUSED,
            EventCategory::Audit,
            actor.clone(),
            template_uuid.map(|u| Subject::new("template", u)),
            details,
            ctx.clock.now(),
        )))
        .await?;
    Ok(())
}
