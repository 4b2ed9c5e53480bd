//! The campaign worker: sends each pending recipient of every running campaign through the
//! catalog template send of campaign mode (`ops::sending::send_catalog`, the rules and audit
//! of `POST /messages/template` with `template_uuid` and `consent`).
//!
//! Crash safety: a worker claims recipients with a lease (a fresh token and an expiry, like the
//! webhook dispatcher); a claim whose lease expired (its instance stopped) is taken over. Each
//! recipient's send also holds an idempotency record (key `campaign:<campaign uuid>:<recipient
//! id>` of the campaign's API key) that the send's own transaction completes together with the
//! message; a worker that takes a recipient over finds the completed record and records its
//! outcome without sending again. The one window left is the one every send has: an instance
//! that stops during the provider call, before the message is recorded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::Config;
use crate::crypto::SecretBox;
use crate::ops::sending::{
    CatalogMode, CatalogRequest, CatalogSendInput, SendCompletion, SendContext, SendError,
    send_catalog,
};
use crate::providers::ProviderHub;
use crate::views::campaigns::describe;
use switchboard_domain::clock::SharedClock;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::template::parse_request_template;
use switchboard_store::legacy::{
    CampaignRecord, ClaimedRecipient, NewCampaign, RecipientOutcome, RecipientStatus,
};
use switchboard_store::{ClaimOutcome, IdempotencyClaim, SharedStore, Stored};

/// How many recipients one claim takes.
const BATCH: i64 = 16;
/// How often an idle worker looks for work.
const POLL: Duration = Duration::from_millis(200);

/// The event of a campaign: `campaign.scheduled` and `campaign.started` when it is created,
/// `campaign.completed` or `campaign.failed` when its last recipient is done.
pub(crate) fn campaign_event(name: &str, c: &CampaignRecord) -> NewEvent {
    NewEvent::new(
        c.org_id,
        name,
        json!({ "campaign_uuid": c.uuid, "campaign": describe(c) }),
        None,
        c.updated_at,
    )
}

/// Stores a campaign checked by the caller (`POST /api/campaigns`) with its pending recipients,
/// and `campaign.scheduled` and `campaign.started`, in one transaction; the worker sends it.
pub async fn create_campaign(
    store: &dyn switchboard_store::Store,
    new: NewCampaign,
) -> Result<CampaignRecord, switchboard_store::StoreError> {
    store
        .create_campaign(
            new,
            Box::new(|c| {
                Effects::none()
                    .event(campaign_event("campaign.scheduled", c))
                    .event(campaign_event("campaign.started", c))
            }),
        )
        .await
}

/// What the worker needs.
#[derive(Clone)]
pub struct CampaignWorker {
    pub store: SharedStore,
    pub secrets: SecretBox,
    pub clock: SharedClock,
    pub providers: ProviderHub,
    pub config: Arc<Config>,
    /// The channel lists, cached like the API's.
    pub cache: Arc<crate::cache::ConfigCache>,
}

impl CampaignWorker {
    /// How long a claim holds a recipient: the idempotency lease (`serve` warns when it is not
    /// longer than the provider timeout), which a recipient's send record also has.
    fn lease(&self) -> Duration {
        self.config.idempotency_lease
    }

    /// Runs until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let worked = match self.run_once().await {
                Ok(n) => n > 0,
                Err(e) => {
                    tracing::warn!(error = %e, "campaign worker: could not claim recipients");
                    false
                }
            };
            if !worked {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
    }

    /// Claims and processes one batch; returns how many recipients were claimed.
    pub async fn run_once(&self) -> Result<usize, switchboard_store::StoreError> {
        let claimed = self
            .store
            .claim_campaign_recipients(self.clock.now(), self.lease(), BATCH)
            .await?;
        let n = claimed.len();
        for c in claimed {
            self.process(c).await;
        }
        Ok(n)
    }

    async fn process(&self, c: ClaimedRecipient) {
        let outcome = match self.send(&c).await {
            Some(o) => o,
            // Left for the lease to expire and another attempt.
            None => return,
        };
        let result = self
            .store
            .finish_campaign_recipient(
                c.recipient.id,
                c.token,
                outcome,
                self.clock.now(),
                Box::new(move |campaign| {
                    let name = match campaign.counts.sent {
                        0 => "campaign.failed",
                        _ => "campaign.completed",
                    };
                    Effects::none().event(campaign_event(name, campaign))
                }),
            )
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, recipient_id = c.recipient.id, "campaign worker: could not record a recipient's outcome");
        }
    }

    /// Sends one recipient; `None` when it should be tried again later.
    async fn send(&self, c: &ClaimedRecipient) -> Option<RecipientOutcome> {
        let campaign = &c.campaign;
        let key = format!("campaign:{}:{}", campaign.uuid, c.recipient.id);
        let claim = IdempotencyClaim {
            api_key_id: campaign.api_key_id,
            key: key.clone(),
            method: "POST".into(),
            path: "/api/campaigns".into(),
            fingerprint: Sha256::digest(key.as_bytes()).to_vec(),
            owner: Uuid::new_v4(),
            now: self.clock.now(),
            lease: self.config.idempotency_lease,
            retention: self.config.idempotency_retention,
        };
        let token = match self.store.claim_idempotency(claim).await {
            Ok(ClaimOutcome::Claimed { token, .. }) => token,
            Ok(ClaimOutcome::Replay(stored)) => return Some(replayed(&stored)),
            Ok(ClaimOutcome::InProgress) => return None,
            Ok(ClaimOutcome::Conflict) => {
                return Some(RecipientOutcome {
                    status: RecipientStatus::Failed,
                    message_id: None,
                    error_code: Some("internal_error".into()),
                    error_message: Some("the recipient's send record does not match".into()),
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "campaign worker: could not claim a recipient's send");
                return None;
            }
        };
        let ctx = SendContext {
            store: self.store.as_ref(),
            secrets: &self.secrets,
            clock: self.clock.as_ref(),
            providers: &self.providers,
            cache: &self.cache,
        };
        let input = self.input(c);
        let completion = SendCompletion {
            claim: token.into(),
            request_id: None,
        };
        let release = || async {
            if let Err(e) = self.store.release_idempotency(token).await {
                tracing::warn!(error = %e, "campaign worker: could not release a send claim");
            }
        };
        match send_catalog(&ctx, input, Some(completion)).await {
            Ok(sent) => Some(RecipientOutcome {
                status: RecipientStatus::Sent,
                message_id: Some(sent.recorded.message.id),
                error_code: None,
                error_message: None,
            }),
            Err(SendError::ProviderRejected { recorded, error }) => Some(RecipientOutcome {
                status: RecipientStatus::Failed,
                message_id: Some(recorded.message.id),
                error_code: Some("provider_rejected".into()),
                error_message: Some(format!("{error:?}").chars().take(500).collect()),
            }),
            Err(SendError::ProviderUnavailable(reason)) => {
                release().await;
                if c.recipient.attempts >= 3 {
                    Some(RecipientOutcome {
                        status: RecipientStatus::Failed,
                        message_id: None,
                        error_code: Some("provider_unavailable".into()),
                        error_message: Some(reason.chars().take(500).collect()),
                    })
                } else {
                    None
                }
            }
            Err(SendError::LostClaim) => None,
            Err(SendError::Store(e)) => {
                release().await;
                tracing::warn!(error = %e, "campaign worker: a recipient's send failed on the database");
                None
            }
            Err(e) => {
                release().await;
                // A rule refused the recipient: the code and message the API gives for it.
                Some(RecipientOutcome {
                    status: RecipientStatus::Refused,
                    message_id: None,
                    error_code: Some(e.code().to_owned()),
                    error_message: Some(e.message().chars().take(500).collect()),
                })
            }
        }
    }

    /// The catalog send of a claimed recipient: the campaign's template and the recipient's
    /// consent, on the campaign's channel.
    fn input(&self, c: &ClaimedRecipient) -> CatalogSendInput {
        let campaign = &c.campaign;
        let request = &campaign.request;
        let template = parse_request_template(request.get("template"))
            .ok()
            .flatten();
        CatalogSendInput {
            mode: CatalogMode::Campaign,
            org_id: campaign.org_id,
            api_key_id: campaign.api_key_id,
            api_key_prefix: campaign.api_key_prefix.clone(),
            key_default_channel: None,
            channel_id: Some(campaign.channel_id),
            channel_slug: None,
            contact_uuid: Some(c.recipient.contact_uuid),
            phone: None,
            first_name: None,
            request: CatalogRequest {
                template_uuid: request
                    .get("template_uuid")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                template,
                consent: Some(c.recipient.consent.clone()),
            },
            rules: self.config.consent_rules(),
            reply_to: None,
        }
    }
}

/// The outcome of a recipient whose send completed before (a worker stopped after the send):
/// its claim kept the record (or, written by an earlier version, `{"message_id"}`).
fn replayed(stored: &Stored) -> RecipientOutcome {
    let (status, message_id) = match stored {
        Stored::Send(s) => (s.status, Some(s.recorded.message.id)),
        Stored::Response(r) => (
            r.status,
            serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v.get("message_id").and_then(Value::as_i64)),
        ),
        Stored::Batch(_) => (0, None),
    };
    if status == 201 {
        RecipientOutcome {
            status: RecipientStatus::Sent,
            message_id,
            error_code: None,
            error_message: None,
        }
    } else {
        RecipientOutcome {
            status: RecipientStatus::Failed,
            message_id,
            error_code: Some("provider_rejected".into()),
            error_message: None,
        }
    }
}
