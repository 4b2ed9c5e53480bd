//! What a provider's answer to a send means.

use serde_json::Value;

use crate::providers::ProviderError;
use switchboard_domain::channel::Channel;
use switchboard_domain::message::MessageStatus;

use super::SendError;

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
    metrics::counter!("switchboard_provider_sends_total", "channel_type" => channel.channel_type.as_str(), "result" => result).increment(1);
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
