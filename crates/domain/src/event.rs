//! Events: the outbox records that become webhook deliveries, and the organization's
//! append-only log of audit, admin and security events.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Timestamp;
use super::channel::ChannelIdentity;

/// An event for the outbox, written in the same transaction as the change that caused it.
///
/// The webhook envelope (specification 2.11) is built from it at delivery time:
/// `{"event", "data", "metadata": {"event_id", "event_type", "api_version", "occurred_at",
/// "organization_id"}, "channel"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub uuid: Uuid,
    pub org_id: i64,
    /// A catalogue event name such as `message.sent`.
    pub name: String,
    /// Event-specific, additive fields.
    pub data: Value,
    /// The channel context, `None` when the event has none.
    pub channel: Option<ChannelIdentity>,
    pub occurred_at: Timestamp,
    /// A sample sent by `POST .../test`: delivered to one endpoint only, never in the event
    /// feed, and marked `metadata.test: true` in its envelope.
    pub test: bool,
    /// A typed sample emitted on request (`switchboard trigger EVENT`): delivered to every
    /// subscribed endpoint and in the event feed like any event, its envelope marked
    /// `metadata.test: true`.
    pub sample: bool,
    /// The W3C `traceparent` of the work that caused the event (the API request, the provider
    /// callback): kept with the event, so that its deliveries join that trace. `None` on a new
    /// event: the store fills it from the current trace when it writes the event.
    pub trace: Option<String>,
}

impl NewEvent {
    pub fn new(
        org_id: i64,
        name: &str,
        data: Value,
        channel: Option<ChannelIdentity>,
        now: Timestamp,
    ) -> Self {
        NewEvent {
            uuid: Uuid::now_v7(),
            org_id,
            name: name.to_owned(),
            data,
            channel,
            occurred_at: now,
            test: false,
            sample: false,
            trace: None,
        }
    }

    /// The internal id of the message a `message.*` event is about (its `data.message_id`),
    /// which links the event's deliveries into the message's timeline.
    pub fn message_id(&self) -> Option<i64> {
        if !self.name.starts_with("message.") {
            return None;
        }
        self.data.get("message_id").and_then(Value::as_i64)
    }

    /// This event as a test sample (see [`NewEvent::test`]).
    pub fn as_test(mut self) -> Self {
        self.test = true;
        self
    }

    /// This event as a triggered sample (see [`NewEvent::sample`]): it goes where the real
    /// event goes.
    pub fn as_triggered_sample(mut self) -> Self {
        self.test = false;
        self.sample = true;
        self
    }

    /// The envelope of specification 2.11 for this event.
    pub fn envelope(&self) -> Value {
        let mut v = envelope(
            self.uuid,
            self.org_id,
            &self.name,
            &self.data,
            self.channel.as_ref(),
            self.occurred_at,
        );
        if self.test || self.sample {
            v["metadata"]["test"] = Value::Bool(true);
        }
        v
    }

    /// The envelope as the exact bytes that every delivery of the event sends and the event
    /// feed serves (written once, with the event).
    pub fn envelope_text(&self) -> String {
        self.envelope().to_string()
    }
}

/// Builds the webhook envelope of specification 2.11.
pub fn envelope(
    event_id: Uuid,
    org_id: i64,
    name: &str,
    data: &Value,
    channel: Option<&ChannelIdentity>,
    occurred_at: Timestamp,
) -> Value {
    serde_json::json!({
        "event": name,
        "data": data,
        "metadata": {
            "event_id": event_id,
            "event_type": name,
            "api_version": "v1",
            "occurred_at": occurred_at,
            "organization_id": org_id,
        },
        "channel": channel,
    })
}

/// The category of an organization event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventCategory {
    Audit,
    Admin,
    Security,
}

impl EventCategory {
    pub const fn as_str(self) -> &'static str {
        match self {
            EventCategory::Audit => "audit",
            EventCategory::Admin => "admin",
            EventCategory::Security => "security",
        }
    }
}

impl fmt::Display for EventCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventCategory {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "audit" => Ok(EventCategory::Audit),
            "admin" => Ok(EventCategory::Admin),
            "security" => Ok(EventCategory::Security),
            _ => Err(format!(
                "unknown category `{s}` (expected audit, admin or security)"
            )),
        }
    }
}

/// Who did something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Actor {
    /// An API key, by id and display prefix (never the key itself).
    ApiKey {
        api_key_id: i64,
        api_key_prefix: String,
    },
    /// The `switchboard admin` developer tools.
    Admin,
    /// The service itself (dispatcher, purge, provider callbacks).
    System,
}

impl Actor {
    /// The compact form used by the `actor` filter: `api_key:12`, `admin` or `system`.
    pub fn filter_key(&self) -> String {
        match self {
            Actor::ApiKey { api_key_id, .. } => format!("api_key:{api_key_id}"),
            Actor::Admin => "admin".into(),
            Actor::System => "system".into(),
        }
    }
}

/// What an organization event is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Subject {
    /// The kind of resource: `api_key`, `webhook_endpoint`, `conversation`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Its identifier as shown by the API (an integer id or a UUID, as text).
    pub id: String,
}

impl Subject {
    pub fn new(kind: &str, id: impl ToString) -> Self {
        Subject {
            kind: kind.to_owned(),
            id: id.to_string(),
        }
    }
}

/// An entry of the organization's append-only audit/admin/security log.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct OrgEvent {
    pub uuid: Uuid,
    #[serde(skip)]
    pub org_id: i64,
    /// Event type such as `security.api_key_created`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub category: EventCategory,
    pub actor: Actor,
    pub subject: Option<Subject>,
    /// Details without secrets.
    #[schema(value_type = Object)]
    pub details: Value,
    pub created_at: Timestamp,
}

impl OrgEvent {
    pub fn new(
        org_id: i64,
        event_type: &str,
        category: EventCategory,
        actor: Actor,
        subject: Option<Subject>,
        details: Value,
        now: Timestamp,
    ) -> Self {
        OrgEvent {
            uuid: Uuid::now_v7(),
            org_id,
            event_type: event_type.to_owned(),
            category,
            actor,
            subject,
            details,
            created_at: now,
        }
    }

    /// The `audit.recorded` webhook event that accompanies every `audit` entry.
    pub fn audit_recorded(&self) -> NewEvent {
        NewEvent {
            uuid: Uuid::now_v7(),
            org_id: self.org_id,
            name: "audit.recorded".to_owned(),
            data: serde_json::json!({
                "audit_event_id": self.uuid,
                "type": self.event_type,
                "category": self.category,
                "actor": self.actor,
                "subject": self.subject,
                "details": self.details,
                "created_at": self.created_at,
            }),
            channel: None,
            occurred_at: self.created_at,
            test: false,
            sample: false,
            trace: None,
        }
    }
}

/// What a state change causes, written in the same transaction as the change: outbox events
/// (which become webhook deliveries) and organization log entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub outbox: Vec<NewEvent>,
    pub log: Vec<OrgEvent>,
}

impl Effects {
    pub fn none() -> Self {
        Effects::default()
    }

    pub fn event(mut self, e: NewEvent) -> Self {
        self.outbox.push(e);
        self
    }

    pub fn log(mut self, e: OrgEvent) -> Self {
        self.log.push(e);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.outbox.is_empty() && self.log.is_empty()
    }
}
