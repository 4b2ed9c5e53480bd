//! The events and organization log entries that webhooks cause, built in one place so that
//! their `data` shapes are stable (documented in docs/webhooks.md).

use serde_json::json;
use uuid::Uuid;

use crate::Timestamp;
use crate::event::{Actor, EventCategory, NewEvent, OrgEvent, Subject};

use super::catalogue::{INTEGRATION_TEST, WEBHOOK_DELIVERY_FAILED, WEBHOOK_ENDPOINT_DISABLED};
use super::redact::redacted;

/// The `integration.test` event of `POST /webhook-endpoints/{uuid}/test`.
pub fn test_event(
    org_id: i64,
    endpoint_uuid: Uuid,
    endpoint_name: &str,
    now: Timestamp,
) -> NewEvent {
    NewEvent::new(
        org_id,
        INTEGRATION_TEST,
        json!({
            "endpoint_uuid": endpoint_uuid,
            "endpoint_name": endpoint_name,
            "test": true,
            "message": "This is a test event from Switchboard. If your endpoint verified its signature, it is ready.",
        }),
        None,
        now,
    )
    .as_test()
}

/// What `webhook.delivery_failed` reports about a delivery.
pub struct FailedDelivery<'a> {
    pub delivery_uuid: Uuid,
    pub event_uuid: Uuid,
    pub event_name: &'a str,
    pub endpoint_uuid: Option<Uuid>,
    pub endpoint_url: Option<&'a str>,
    pub status: &'a str,
    pub attempts: i64,
    pub response_status: Option<i64>,
    pub error_code: Option<&'a str>,
    pub error_message: Option<&'a str>,
}

/// `webhook.delivery_failed`: a delivery ended `failed` or `retries_exhausted`. It goes to the
/// organization's other subscribed endpoints (never to the failing one).
pub fn delivery_failed(org_id: i64, d: &FailedDelivery<'_>, now: Timestamp) -> NewEvent {
    NewEvent::new(
        org_id,
        WEBHOOK_DELIVERY_FAILED,
        json!({
            "delivery_id": d.delivery_uuid,
            "event_id": d.event_uuid,
            "event": d.event_name,
            "endpoint_uuid": d.endpoint_uuid,
            "endpoint_url": d.endpoint_url.map(redacted),
            "status": d.status,
            "attempts": d.attempts,
            "response_status": d.response_status,
            "error_code": d.error_code,
            "error_message": d.error_message,
        }),
        None,
        now,
    )
}

/// What is reported when an endpoint is disabled.
pub struct DisabledEndpoint<'a> {
    pub org_id: i64,
    pub uuid: Uuid,
    pub name: &'a str,
    pub url: &'a str,
    pub reason: &'a str,
    pub consecutive_failures: i64,
}

/// `webhook.endpoint_disabled`, to the organization's other subscribed endpoints.
pub fn endpoint_disabled(e: &DisabledEndpoint<'_>, now: Timestamp) -> NewEvent {
    NewEvent::new(
        e.org_id,
        WEBHOOK_ENDPOINT_DISABLED,
        json!({
            "endpoint_uuid": e.uuid,
            "name": e.name,
            "url": redacted(e.url),
            "disabled_reason": e.reason,
            "consecutive_failures": e.consecutive_failures,
            "disabled_at": now,
        }),
        None,
        now,
    )
}

/// An organization log entry about an endpoint (`webhook_endpoint.<verb>`). Secret rotation
/// is a security event; everything else is admin.
pub fn endpoint_log(
    org_id: i64,
    verb: &str,
    endpoint_uuid: Uuid,
    actor: Actor,
    details: serde_json::Value,
    now: Timestamp,
) -> OrgEvent {
    let category = if verb == "secret_rotated" {
        EventCategory::Security
    } else {
        EventCategory::Admin
    };
    OrgEvent::new(
        org_id,
        &format!("webhook_endpoint.{verb}"),
        category,
        actor,
        Some(Subject::new("webhook_endpoint", endpoint_uuid)),
        details,
        now,
    )
}

/// The reason given when an endpoint (or a legacy webhook record) is disabled automatically,
/// with the way back.
pub fn auto_disable_reason(failures: i64, legacy: bool) -> String {
    if legacy {
        format!(
            "disabled automatically after {failures} consecutive failed deliveries; fix the receiver, then delete this record and register it again (or create a v1 endpoint for the URL)"
        )
    } else {
        format!(
            "disabled automatically after {failures} consecutive failed deliveries; fix the receiver, then re-enable with PUT {{\"status\": \"active\"}}"
        )
    }
}
