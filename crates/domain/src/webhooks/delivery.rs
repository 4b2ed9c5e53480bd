//! What an attempt does to its delivery and to its endpoint's health (specification 3;
//! docs/webhooks.md, "Retries" and "Endpoint health"), as pure functions: the dispatcher
//! decides an attempt's [`Disposition`] ([`classify`], [`disposition`]), the store reads the
//! delivery and its locked endpoint, asks [`after_attempt`] for the [`Transition`] and writes
//! it. No I/O here; time and randomness are passed in.
//!
//! * A `2xx` delivers, and resets the endpoint's failure count to zero.
//! * A retryable failure with an attempt left (`retry::next_delay`) is retried at the scheduled
//!   time (`retrying`); without one the delivery is `retries_exhausted`. Any other `4xx` is a
//!   permanent rejection (`failed`).
//! * A delivery that ends `failed` or `retries_exhausted` counts one failure of its endpoint
//!   (once per delivery, not per attempt) and emits `webhook.delivery_failed` (unless it was a
//!   `webhook.*` event, so that failures never loop). When the count reaches the threshold
//!   (`SWITCHBOARD_WEBHOOK_DISABLE_AFTER`), the endpoint is disabled: its unfinished deliveries
//!   are held, `webhook.endpoint_disabled` goes to the organization's other endpoints and the
//!   log records `webhook_endpoint.disabled` (actor `system`).
//! * A disabled endpoint's deliveries are held (no next attempt) until it is re-enabled; its
//!   failures are not counted and its successes do not reset the count.
//! * A deleted endpoint's deliveries that did not succeed end `failed` (`endpoint_deleted`).
//! * An interrupted attempt (the instance shut down) is not a failure: the delivery is due
//!   again at once, `pending` if it was its first attempt, else `retrying`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::endpoint::EndpointStatus;
use super::events;
use super::retry::{self, StatusClass};
use crate::Timestamp;
use crate::event::{Actor, Effects};

/// The error code of a delivery whose endpoint was deleted before it succeeded.
pub const ENDPOINT_DELETED: &str = "endpoint_deleted";
/// The error message that goes with [`ENDPOINT_DELETED`].
pub const ENDPOINT_DELETED_MESSAGE: &str =
    "The endpoint was deleted before this delivery succeeded.";

/// The status of a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its first attempt (or a manual retry).
    Pending,
    /// An attempt failed and another one is scheduled.
    Retrying,
    /// A 2xx answer was received.
    Delivered,
    /// Permanently rejected (a 4xx other than 408, 425 and 429), or its endpoint was deleted.
    Failed,
    /// Every attempt failed.
    RetriesExhausted,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 5] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Retrying,
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
        DeliveryStatus::RetriesExhausted,
    ];

    /// The status of a new delivery.
    pub const INITIAL: DeliveryStatus = DeliveryStatus::Pending;

    /// Unfinished: an attempt is due, scheduled, under way or held (while the endpoint is
    /// disabled, or behind an earlier delivery of its contact's chain).
    pub const UNFINISHED: [DeliveryStatus; 2] = [DeliveryStatus::Pending, DeliveryStatus::Retrying];

    /// Finished ([`is_final`](Self::is_final)): no further automatic attempt.
    pub const FINAL: [DeliveryStatus; 3] = [
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
        DeliveryStatus::RetriesExhausted,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Retrying => "retrying",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::RetriesExhausted => "retries_exhausted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Whether no further automatic attempt will be made.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Delivered | DeliveryStatus::Failed | DeliveryStatus::RetriesExhausted
        )
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an attempt leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// A 2xx answer.
    Delivered,
    /// A retryable failure with an attempt left, at this time.
    RetryAt(Timestamp),
    /// A permanent failure (`failed`).
    Failed,
    /// A retryable failure with no attempt left (`retries_exhausted`).
    Exhausted,
    /// The attempt was interrupted (shutdown): not a failure; another attempt at this time.
    Interrupted(Timestamp),
}

/// How an attempt's result is treated: by its response status when there is one; without an
/// answer, [`ENDPOINT_DELETED`] is permanent and every other error (connection, DNS, TLS,
/// timeout, unsafe target, ...) is retryable.
pub fn classify(response_status: Option<u16>, error_code: Option<&str>) -> StatusClass {
    match (response_status, error_code) {
        (Some(s), _) => retry::classify_status(s),
        (None, Some(ENDPOINT_DELETED)) => StatusClass::Permanent,
        (None, _) => StatusClass::Retryable,
    }
}

/// The disposition of a finished attempt, the `attempts_made`-th of its delivery: a retryable
/// failure is retried after [`retry::next_delay`] (the configured `delays`, a longer
/// `retry_after`, and `jitter` in `[0, 1)` drawn by the caller) while an attempt is left.
pub fn disposition(
    class: StatusClass,
    attempts_made: i64,
    delays: &[Duration],
    retry_after: Option<Duration>,
    jitter: f64,
    now: Timestamp,
) -> Disposition {
    match class {
        StatusClass::Success => Disposition::Delivered,
        StatusClass::Permanent => Disposition::Failed,
        StatusClass::Retryable => {
            let attempts = u32::try_from(attempts_made).unwrap_or(u32::MAX);
            match retry::next_delay(attempts, delays, retry_after, jitter) {
                Some(delay) => Disposition::RetryAt(now.saturating_add(delay)),
                None => Disposition::Exhausted,
            }
        }
    }
}

/// The delivery an attempt was made for.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    pub org_id: i64,
    pub uuid: Uuid,
    pub event_uuid: Uuid,
    pub event_name: &'a str,
    /// Attempts made, this one included.
    pub attempts: i64,
}

/// The health of a delivery's endpoint when the outcome is recorded (locked by the store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointHealth {
    pub uuid: Uuid,
    pub name: String,
    pub url: String,
    pub status: EndpointStatus,
    pub deleted: bool,
    pub consecutive_failures: i64,
    /// A legacy webhook record (its way back after an automatic disable differs).
    pub legacy: bool,
}

impl EndpointHealth {
    fn active(&self) -> bool {
        !self.deleted && self.status == EndpointStatus::Active
    }

    /// The health after `t` (for the next outcomes recorded in the same transaction).
    pub fn apply(&mut self, t: &Transition) {
        if let Some(n) = t.consecutive_failures {
            self.consecutive_failures = n;
        }
        if t.disabled_reason.is_some() {
            self.status = EndpointStatus::Disabled;
        }
    }
}

/// The attempt whose outcome is recorded.
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    pub disposition: Disposition,
    pub response_status: Option<i64>,
    pub error_code: Option<&'a str>,
    pub error_message: Option<&'a str>,
}

/// What an attempt changes: the delivery's new state, the endpoint's health and the effects.
#[derive(Clone, Debug)]
pub struct Transition {
    pub status: DeliveryStatus,
    /// When the next attempt is due; `None` when none is scheduled (the delivery is finished,
    /// or held while its endpoint is disabled).
    pub next_attempt_at: Option<Timestamp>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// `now` when delivered.
    pub delivered_at: Option<Timestamp>,
    /// The endpoint's new count of consecutive failed deliveries, when it changes.
    pub consecutive_failures: Option<i64>,
    /// `Some(reason)`: the endpoint is disabled by this outcome, and its unfinished deliveries
    /// are held.
    pub disabled_reason: Option<String>,
    /// The events and organization log entries the outcome causes.
    pub effects: Effects,
}

/// What recording an attempt's outcome does (see the module documentation). `endpoint` is
/// `None` for a delivery without an endpoint; `disable_after` is the threshold of consecutive
/// failed deliveries.
pub fn after_attempt(
    delivery: &Delivery<'_>,
    endpoint: Option<&EndpointHealth>,
    attempt: &Attempt<'_>,
    disable_after: u32,
    now: Timestamp,
) -> Transition {
    let deleted = endpoint.is_some_and(|e| e.deleted);
    let active = endpoint.is_some_and(EndpointHealth::active);
    let error = || {
        (
            attempt.error_code.map(str::to_owned),
            attempt.error_message.map(str::to_owned),
        )
    };
    let (mut status, mut due, (mut error_code, mut error_message)) = match attempt.disposition {
        Disposition::Delivered => (DeliveryStatus::Delivered, None, (None, None)),
        Disposition::RetryAt(t) => (DeliveryStatus::Retrying, Some(t), error()),
        Disposition::Failed => (DeliveryStatus::Failed, None, error()),
        Disposition::Exhausted => (DeliveryStatus::RetriesExhausted, None, error()),
        Disposition::Interrupted(t) => {
            let status = if delivery.attempts > 1 {
                DeliveryStatus::Retrying
            } else {
                DeliveryStatus::Pending
            };
            (status, Some(t), error())
        }
    };
    if deleted && status != DeliveryStatus::Delivered {
        status = DeliveryStatus::Failed;
        due = None;
        error_code = Some(ENDPOINT_DELETED.to_owned());
        error_message = Some(ENDPOINT_DELETED_MESSAGE.to_owned());
    } else if !active {
        // A disabled endpoint's deliveries wait until it is re-enabled.
        due = None;
    }
    let mut t = Transition {
        status,
        next_attempt_at: due,
        error_code,
        error_message,
        delivered_at: (status == DeliveryStatus::Delivered).then_some(now),
        consecutive_failures: None,
        disabled_reason: None,
        effects: Effects::none(),
    };
    let Some(ep) = endpoint.filter(|e| !e.deleted) else {
        return t;
    };
    match status {
        DeliveryStatus::Delivered if active && ep.consecutive_failures != 0 => {
            t.consecutive_failures = Some(0);
        }
        DeliveryStatus::Failed | DeliveryStatus::RetriesExhausted => {
            if !delivery.event_name.starts_with("webhook.") {
                t.effects = t.effects.event(events::delivery_failed(
                    delivery.org_id,
                    &events::FailedDelivery {
                        delivery_uuid: delivery.uuid,
                        event_uuid: delivery.event_uuid,
                        event_name: delivery.event_name,
                        endpoint_uuid: Some(ep.uuid),
                        endpoint_url: Some(&ep.url),
                        status: status.as_str(),
                        attempts: delivery.attempts,
                        response_status: attempt.response_status,
                        error_code: t.error_code.as_deref(),
                        error_message: t.error_message.as_deref(),
                    },
                    now,
                ));
            }
            if active {
                let failures = ep.consecutive_failures + 1;
                t.consecutive_failures = Some(failures);
                if failures >= i64::from(disable_after) {
                    let reason = events::auto_disable_reason(failures, ep.legacy);
                    t.effects = t
                        .effects
                        .log(events::endpoint_log(
                            delivery.org_id,
                            "disabled",
                            ep.uuid,
                            Actor::System,
                            json!({
                                "automatic": true,
                                "disabled_reason": reason,
                                "consecutive_failures": failures,
                                "last_delivery_id": delivery.uuid,
                            }),
                            now,
                        ))
                        .event(events::endpoint_disabled(
                            &events::DisabledEndpoint {
                                org_id: delivery.org_id,
                                uuid: ep.uuid,
                                name: &ep.name,
                                url: &ep.url,
                                reason: &reason,
                                consecutive_failures: failures,
                            },
                            now,
                        ));
                    t.disabled_reason = Some(reason);
                }
            }
        }
        _ => {}
    }
    t
}

/// Whether an outcome is a plain success: a 2xx for a delivery whose endpoint has no failure
/// count to reset (`endpoint_failing`: its count is not zero; `false` without an endpoint).
/// Its transition is [`plain_success`] whatever the delivery and the endpoint's status, so
/// the store records plain successes together without locking their endpoints.
pub fn is_plain_success(disposition: Disposition, endpoint_failing: bool) -> bool {
    disposition == Disposition::Delivered && !endpoint_failing
}

/// The transition [`after_attempt`] decides for a plain success ([`is_plain_success`]) at
/// `now`: delivered, nothing due, no error, no change to the endpoint, no effects.
pub fn plain_success(now: Timestamp) -> Transition {
    after_attempt(
        &Delivery {
            org_id: 0,
            uuid: Uuid::nil(),
            event_uuid: Uuid::nil(),
            event_name: "",
            attempts: 1,
        },
        None,
        &Attempt {
            disposition: Disposition::Delivered,
            response_status: None,
            error_code: None,
            error_message: None,
        },
        u32::MAX,
        now,
    )
}

mod changes;
pub use changes::{bulk_retry, on_endpoint_deleted, recovery_requeues, retry};

#[cfg(test)]
mod tests;
