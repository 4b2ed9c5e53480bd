//! The sandbox: no provider and no network. A send is `sent` at once with a generated provider
//! id; inbound messages and status changes come from `switchboard admin sandbox`.

use async_trait::async_trait;
use uuid::Uuid;

use super::{Accepted, Outgoing, Provider, ProviderError};
use switchboard_domain::channel::ChannelType;
use switchboard_domain::contact::Contact;
use switchboard_domain::message::{MessageStatus, MessageType};

pub struct Sandbox;

/// The provider id a sandbox send gets.
pub fn generate_id() -> String {
    format!("sandbox-{}", Uuid::now_v7().simple())
}

#[async_trait]
impl Provider for Sandbox {
    fn channel_type(&self) -> ChannelType {
        ChannelType::Sandbox
    }

    fn supports(&self, _: MessageType) -> bool {
        true
    }

    fn check_recipient(&self, _: &Contact) -> Result<(), String> {
        Ok(())
    }

    fn calls_out(&self) -> bool {
        false
    }

    async fn send(&self, _: &Contact, _: &Outgoing<'_>) -> Result<Accepted, ProviderError> {
        Ok(Accepted {
            provider_message_id: generate_id(),
            status: MessageStatus::Sent,
        })
    }
}
