//! Where an endpoint's deliveries go (CONVENTIONS "Destinations, filters, throttles, endpoint
//! authentication"): an HTTPS URL, or a broker target: Redis Streams, NATS JetStream or
//! RabbitMQ.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An endpoint's `type`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DestinationType {
    /// A signed HTTPS `POST` to `url`.
    #[default]
    Https,
    /// `XADD` to a Redis stream: `target: {"url": "redis://...", "stream", "max_len"}`.
    RedisStream,
    /// A JetStream publish: `target: {"url": "nats://...", "subject"}`.
    NatsJetstream,
    /// A publish with confirms: `target: {"url": "amqp://...", "exchange", "routing_key"}`.
    Rabbitmq,
}

impl DestinationType {
    pub const fn as_str(self) -> &'static str {
        match self {
            DestinationType::Https => "https",
            DestinationType::RedisStream => "redis_stream",
            DestinationType::NatsJetstream => "nats_jetstream",
            DestinationType::Rabbitmq => "rabbitmq",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "https" => Some(DestinationType::Https),
            "redis_stream" => Some(DestinationType::RedisStream),
            "nats_jetstream" => Some(DestinationType::NatsJetstream),
            "rabbitmq" => Some(DestinationType::Rabbitmq),
            _ => None,
        }
    }

    /// A broker type's URL scheme, default port, and the name of its key template field.
    pub const fn broker(self) -> Option<(&'static str, u16, &'static str)> {
        match self {
            DestinationType::Https => None,
            DestinationType::RedisStream => Some(("redis", 6379, "stream")),
            DestinationType::NatsJetstream => Some(("nats", 4222, "subject")),
            DestinationType::Rabbitmq => Some(("amqp", 5672, "routing_key")),
        }
    }
}

/// The placeholders a stream key, subject or routing key may use.
pub const PLACEHOLDERS: &[&str] = &["event", "namespace", "contact_uuid", "channel_slug"];
/// The longest stream key template.
pub const MAX_TEMPLATE_LEN: usize = 200;
/// The default and the bounds of a Redis stream's `max_len`.
pub const DEFAULT_MAX_LEN: u64 = 100_000;
pub const MAX_MAX_LEN: u64 = 100_000_000;
/// What a placeholder becomes when the event has no such value.
pub const NO_VALUE: &str = "none";

/// Checks a key template: 1 to 200 visible ASCII characters, `{name}` only for the known
/// placeholders.
pub fn check_template(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > MAX_TEMPLATE_LEN {
        return Err(format!("must be 1 to {MAX_TEMPLATE_LEN} characters"));
    }
    if !t.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err("must be visible ASCII characters without spaces".into());
    }
    let mut rest = t;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err("has a `}` without its `{`".into());
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| "has a `{` without its `}`".to_owned())?;
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "`{{{name}}}` is not a placeholder (use {{event}}, {{namespace}}, {{contact_uuid}} or {{channel_slug}})"
            ));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

/// Fills a checked template for an event: its name, its namespace (the name before the first
/// dot), `data.contact_uuid` and the channel's slug (`none` when the event has none).
pub fn render_template(t: &str, event: &str, data: &Value, channel: Option<&Value>) -> String {
    let namespace = event.split('.').next().unwrap_or(event);
    let contact = data
        .get("contact_uuid")
        .and_then(Value::as_str)
        .unwrap_or(NO_VALUE);
    let slug = channel
        .and_then(|c| c.get("slug"))
        .and_then(Value::as_str)
        .unwrap_or(NO_VALUE);
    t.replace("{event}", event)
        .replace("{namespace}", namespace)
        .replace("{contact_uuid}", contact)
        .replace("{channel_slug}", slug)
}

/// Checks a RabbitMQ exchange name: empty (the default exchange) or up to 255 letters,
/// digits, `-`, `_`, `.` and `:`.
pub fn check_exchange(name: &str) -> Result<(), String> {
    if name.len() > 255
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return Err(
            "must be at most 255 letters, digits, `-`, `_`, `.` and `:` (empty: the default exchange)"
                .into(),
        );
    }
    Ok(())
}

/// Checks a Redis stream's `max_len`.
pub fn check_max_len(n: i64) -> Result<u64, String> {
    match u64::try_from(n) {
        Ok(n) if (1..=MAX_MAX_LEN).contains(&n) => Ok(n),
        _ => Err(format!("must be between 1 and {MAX_MAX_LEN}")),
    }
}

/// A URL with its password (or, without one, its user name) replaced by `***`, as answered.
pub fn mask_url(url: &url::Url) -> String {
    let mut masked = url.clone();
    if url.password().is_some() {
        let _ = masked.set_password(Some("***"));
    } else if !url.username().is_empty() {
        let _ = masked.set_username("***");
    }
    masked.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types() {
        for t in ["https", "redis_stream", "nats_jetstream", "rabbitmq"] {
            assert_eq!(DestinationType::parse(t).unwrap().as_str(), t);
        }
        assert_eq!(DestinationType::parse("sqs"), None);
        assert_eq!(
            DestinationType::Rabbitmq.broker(),
            Some(("amqp", 5672, "routing_key"))
        );
        assert_eq!(DestinationType::Https.broker(), None);
    }

    #[test]
    fn templates() {
        for ok in [
            "events",
            "sb:{namespace}:{event}",
            "{contact_uuid}",
            "x.{channel_slug}.y",
        ] {
            assert!(check_template(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "{nope}", "{event", "event}", "{}", "é"] {
            assert!(check_template(bad).is_err(), "{bad}");
        }
        assert!(check_template(&"x".repeat(201)).is_err());
        let data = json!({"contact_uuid": "0190a0b0-0000-7000-8000-000000000001"});
        let channel = json!({"slug": "support"});
        assert_eq!(
            render_template(
                "sb:{namespace}:{event}:{contact_uuid}:{channel_slug}",
                "message.sent",
                &data,
                Some(&channel)
            ),
            "sb:message:message.sent:0190a0b0-0000-7000-8000-000000000001:support"
        );
        assert_eq!(
            render_template(
                "{contact_uuid}/{channel_slug}",
                "security.x",
                &json!({}),
                None
            ),
            "none/none"
        );
    }

    #[test]
    fn urls_are_masked() {
        let u = |s: &str| mask_url(&url::Url::parse(s).unwrap());
        assert_eq!(
            u("amqp://user:secret@host/vhost"),
            "amqp://user:***@host/vhost"
        );
        assert_eq!(u("redis://:secret@host:6379/0"), "redis://:***@host:6379/0");
        assert_eq!(u("redis://token@host"), "redis://***@host");
        assert_eq!(u("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn exchanges() {
        assert!(check_exchange("").is_ok());
        assert!(check_exchange("amq.topic").is_ok());
        assert!(check_exchange("a b").is_err());
        assert!(check_exchange(&"x".repeat(256)).is_err());
    }

    #[test]
    fn max_len_bounds() {
        assert_eq!(check_max_len(1), Ok(1));
        assert!(check_max_len(0).is_err());
        assert!(check_max_len(100_000_001).is_err());
    }
}
