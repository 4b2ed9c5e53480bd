//! Sending: the one pipeline every send goes through, whoever asks (the v1 and legacy HTTP
//! routes, flow triggers, the campaign worker).
//!
//! * [`plain`]: text, interactive, media and provider templates given in full;
//! * [`catalog`]: catalog template sends (conversation initiation, campaign recipients), whose
//!   rules are in [`catalog_check`];
//! * [`flow`]: flow triggers, a flow's action as a plain send;
//! * `media`: the media pipeline of providers that take uploads (WhatsApp Cloud): fetch,
//!   check, upload or reuse, send by id;
//! * [`error`]: [`SendError`], the one error of every send, with its stable code.
//!
//! Every send chooses the channel, finds the recipient, checks the provider's and the window's
//! rules, calls the provider outside any transaction and records the message with its events
//! (`crate::ops::message_events`) and the completion of the idempotency claim in one
//! transaction.

pub mod batch;
pub mod catalog;
pub mod catalog_check;
pub mod error;
pub mod flow;
mod media;
pub mod plain;
mod provider;
pub mod queued;
mod recipient;

use std::sync::Arc;

use crate::crypto::SecretBox;
use crate::providers::ProviderHub;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::Clock;
use switchboard_store::Store;

pub use catalog::{CatalogExtra, CatalogMode, CatalogSendInput, CatalogSent, send_catalog};
pub use catalog_check::{CatalogRequest, ValidatedCatalogSend, validate_catalog_send};
pub use error::{Refusal, SendError};
pub use flow::{FlowTrigger, send_flow};
pub use plain::{PreparedSend, SendCompletion, SendInput, prepare, send, send_prepared};

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
    pub async fn channels(&self, org_id: i64) -> Result<Arc<Vec<Channel>>, SendError> {
        Ok(self.cache.channels(self.store, org_id).await?)
    }
}
