//! What a provider's answer to a send means.

use serde_json::Value;

use crate::providers::{Accepted, Provider, ProviderError};
use crate::trace;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::Clock;
use switchboard_domain::contact::Contact;
use switchboard_domain::message::timeline::{self, StepKind};
use switchboard_domain::message::{Content, MessageStatus};
use switchboard_store::MessageStep;

use super::SendError;

/// The provider call of a send (no transaction is open): a span of the request's trace (the
/// provider gets its `traceparent`), the latency metric, and the timeline's steps so far:
/// `accepted` (every check passed), `provider_request`, `provider_response`.
pub(crate) async fn call(
    provider: &dyn Provider,
    channel: &Channel,
    recipient: &Contact,
    content: &Content,
    clock: &dyn Clock,
) -> (Result<Accepted, ProviderError>, Vec<MessageStep>) {
    let accepted_at = clock.now();
    let mut span = trace::Span::start("provider.send", trace::Kind::Client, trace::current());
    span.attr("switchboard.channel_type", channel.channel_type.as_str());
    span.attr("switchboard.channel_uuid", channel.uuid.to_string());
    let started = std::time::Instant::now();
    let request_at = clock.now();
    let outcome = trace::scope(span.context(), provider.send(recipient, content)).await;
    let response_at = clock.now();
    metrics::histogram!("switchboard_provider_send_duration_seconds", "channel_type" => channel.channel_type.as_str())
        .record(started.elapsed().as_secs_f64());
    let (provider_message_id, error) = match &outcome {
        Ok(a) => (Some(a.provider_message_id.as_str()), None),
        Err(e) => (None, Some(e.to_json(channel.channel_type))),
    };
    if let Err(e) = &outcome {
        span.fail(
            match e {
                ProviderError::Rejected { .. } => "rejected by the provider",
                ProviderError::Unavailable(_) => "provider unavailable",
                ProviderError::NotConfigured(_) => "channel not configured",
                ProviderError::Unsupported(_) => "not supported by the channel",
            }
            .into(),
        );
    }
    drop(span);
    let mut steps = vec![
        MessageStep {
            at: accepted_at,
            kind: StepKind::Accepted,
            detail: serde_json::json!({}),
        },
        MessageStep {
            at: request_at,
            kind: StepKind::ProviderRequest,
            detail: serde_json::json!({ "provider": channel.channel_type }),
        },
    ];
    // A call that did not reach an answer records nothing (the send fails and no message is
    // kept); every other answer is the response step.
    if !matches!(outcome, Err(ProviderError::Unavailable(_))) {
        steps.push(MessageStep {
            at: response_at,
            kind: StepKind::ProviderResponse,
            detail: timeline::provider_response(provider_message_id, error.as_ref()),
        });
    }
    (outcome, steps)
}

/// What a provider's answer means for the record: (status, provider id, error), or the send
/// error when nothing is to be recorded (unavailable, not configured, unsupported).
pub(crate) fn classify_outcome(
    outcome: &Result<Accepted, ProviderError>,
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
