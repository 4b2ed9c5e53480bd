//! What a provider's answer to a send means.

use serde_json::Value;

use std::time::Duration;

use crate::providers::pacing::Pacer;
use crate::providers::{Accepted, Outgoing, Provider, ProviderError};
use crate::trace;
use switchboard_domain::Timestamp;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::Clock;
use switchboard_domain::contact::Contact;
use switchboard_domain::message::MessageStatus;
use switchboard_domain::message::timeline::{self, StepKind};
use switchboard_domain::pacing::{Pace, throttle_backoff};
use switchboard_store::MessageStep;

use super::SendError;

/// The provider call of a send (no transaction is open): a span of the request's trace (the
/// provider gets its `traceparent`), the latency metric, and the timeline's steps so far:
/// `accepted` (every check passed), `provider_request`, `provider_response`.
pub(crate) async fn call(
    provider: &dyn Provider,
    channel: &Channel,
    recipient: &Contact,
    out: &Outgoing<'_>,
    clock: &dyn Clock,
) -> (Result<Accepted, ProviderError>, Vec<MessageStep>) {
    let accepted_at = clock.now();
    let mut span = trace::Span::start("provider.send", trace::Kind::Client, trace::current());
    span.attr("switchboard.channel_type", channel.channel_type.as_str());
    span.attr("switchboard.channel_uuid", channel.uuid.to_string());
    let started = std::time::Instant::now();
    let request_at = clock.now();
    let outcome = trace::scope(span.context(), provider.send(recipient, out)).await;
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
                ProviderError::Throttled { .. } => "throttled by the provider",
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

/// The longest a send waits for its pace (CONVENTIONS: "waits (up to 10 s)").
pub(crate) const PACE_BOUND: Duration = Duration::from_secs(10);

/// The outcome of a paced provider call.
pub(crate) enum Dispatch {
    /// The provider answered (or could not be reached).
    Called(Result<Accepted, ProviderError>, Vec<MessageStep>),
    /// Not sent now: the pace allows it only after the bound, or the provider throttled it;
    /// to be tried again at `not_before`.
    Deferred {
        not_before: Timestamp,
        steps: Vec<MessageStep>,
        reason: &'static str,
    },
}

/// A provider call within the channel's pace ([`wait_for_pace`], then [`call_or_defer`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn paced_call(
    provider: &dyn Provider,
    pacer: &Pacer,
    channel: &Channel,
    recipient: &Contact,
    out: &Outgoing<'_>,
    clock: &dyn Clock,
    bound: Duration,
    attempts: i64,
) -> Dispatch {
    if let Some(deferred) = wait_for_pace(provider, pacer, channel, recipient, clock, bound).await {
        return deferred;
    }
    call_or_defer(provider, pacer, channel, recipient, out, clock, attempts).await
}

/// Reserves the send's slot in the channel's pace when it comes within `bound`: the instant to
/// call the provider at (now for unpaced channel types); else the send is deferred (nothing is
/// reserved).
pub(crate) async fn reserve_slot(
    provider: &dyn Provider,
    pacer: &Pacer,
    channel: &Channel,
    recipient: &Contact,
    clock: &dyn Clock,
    bound: Duration,
) -> Result<tokio::time::Instant, Dispatch> {
    let now = tokio::time::Instant::now();
    let (Some(rate), Some(phone)) = (provider.max_per_second(), recipient.phone.as_ref()) else {
        return Ok(now);
    };
    match pacer.reserve(channel.id, rate, phone.digits(), bound).await {
        Pace::Go { wait_us } => {
            if wait_us > 0 {
                metrics::histogram!("switchboard_pacing_wait_seconds").record(wait_us as f64 / 1e6);
            }
            Ok(now + Duration::from_micros(wait_us.max(0) as u64))
        }
        Pace::Later { after_us } => {
            metrics::counter!("switchboard_pacing_deferred_total").increment(1);
            Err(Dispatch::Deferred {
                not_before: clock
                    .now()
                    .saturating_add(Duration::from_micros(after_us as u64)),
                steps: vec![MessageStep {
                    at: clock.now(),
                    kind: StepKind::Accepted,
                    detail: serde_json::json!({}),
                }],
                reason: "paced",
            })
        }
    }
}

/// How late after its slot a send may still go: a task woken later than this (the runtime was
/// busy) gives its slot up and asks again, so that late sends never bunch up with punctual
/// ones into a burst above the rate.
pub(crate) const LATE_TOLERANCE: Duration = Duration::from_millis(25);

/// Sleeps until `slot` unless it has come already (an unpaced channel's slot is now). Tokio's
/// timer rounds a deadline up to its next millisecond tick, so sleeping until an instant
/// already past still waits for that tick: 0 to 1 ms on every send of an unpaced channel.
pub(crate) async fn wait_for_slot(slot: tokio::time::Instant) {
    if slot > tokio::time::Instant::now() {
        tokio::time::sleep_until(slot).await;
    }
}

/// Whether a send woken now for `slot` is still on time.
pub(crate) fn on_time(slot: tokio::time::Instant) -> bool {
    let on_time = tokio::time::Instant::now() <= slot + LATE_TOLERANCE;
    if !on_time {
        metrics::counter!("switchboard_pacing_late_total").increment(1);
    }
    on_time
}

/// Waits for the send's slot in the channel's pace (sleeping, outside any transaction) when it
/// comes within `bound`; else the send is deferred. A wake-up too late for its slot asks again.
pub(crate) async fn wait_for_pace(
    provider: &dyn Provider,
    pacer: &Pacer,
    channel: &Channel,
    recipient: &Contact,
    clock: &dyn Clock,
    bound: Duration,
) -> Option<Dispatch> {
    let until = tokio::time::Instant::now() + bound;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match reserve_slot(provider, pacer, channel, recipient, clock, left).await {
            Ok(slot) => {
                wait_for_slot(slot).await;
                if on_time(slot) {
                    return None;
                }
            }
            Err(deferred) => return Some(deferred),
        }
    }
}

/// The provider call; a throttling answer defers the send with backoff (`attempts`: earlier
/// tries of this message; a per-recipient throttle, 131056, waits at least the recipient
/// interval).
pub(crate) async fn call_or_defer(
    provider: &dyn Provider,
    pacer: &Pacer,
    channel: &Channel,
    recipient: &Contact,
    out: &Outgoing<'_>,
    clock: &dyn Clock,
    attempts: i64,
) -> Dispatch {
    let (outcome, steps) = call(provider, channel, recipient, out, clock).await;
    if let Err(ProviderError::Throttled { code, .. }) = &outcome {
        metrics::counter!("switchboard_provider_sends_total", "channel_type" => channel.channel_type.as_str(), "result" => "throttled").increment(1);
        let floor = if code.as_ref().and_then(Value::as_i64) == Some(131056) {
            pacer.recipient_interval()
        } else {
            Duration::ZERO
        };
        return Dispatch::Deferred {
            not_before: clock
                .now()
                .saturating_add(throttle_backoff(attempts, floor)),
            steps,
            reason: "throttled",
        };
    }
    Dispatch::Called(outcome, steps)
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
        Err(ProviderError::Throttled { .. }) => "throttled",
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
        Err(ProviderError::Throttled { message, .. }) => Err(SendError::ProviderUnavailable(
            format!("the provider throttled the send: {message}"),
        )),
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
