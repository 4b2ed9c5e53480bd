//! The event catalogue of specification 6.1: every event name a webhook endpoint can subscribe
//! to, with its namespace and a one-line description, as data in one place.
//!
//! A full name is the namespace, a dot, then the suffix (`message.status.update` is in the
//! `message` namespace). The specification's "the service" namespace (store and order events)
//! is `commerce`; its five `crm` rows are the one namespace `crm`.
//!
//! Subscription patterns ([`Pattern`]) are exact names, `*` (everything) or `<namespace>.*`.

use std::fmt;

use serde::Serialize;

/// One catalogue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EventType {
    /// The full event name, such as `message.sent`.
    pub name: &'static str,
    /// The namespace: the part before the first dot.
    pub namespace: &'static str,
    /// What the event means, in one line.
    pub description: &'static str,
}

macro_rules! catalogue {
    ($( $ns:literal => [ $( $suffix:literal : $desc:literal ),* $(,)? ] ),* $(,)?) => {
        /// Every event of the v1 catalogue, grouped by namespace, in the specification's order.
        pub const EVENTS: &[EventType] = &[
            $( $( EventType {
                name: concat!($ns, ".", $suffix),
                namespace: $ns,
                description: $desc,
            }, )* )*
        ];
    };
}

catalogue! {
    "account" => [
        "email_verification_requested": "A user asked for an email verification link.",
        "email_verified": "A user verified their email address.",
        "password_changed": "A user changed their password.",
        "password_reset_requested": "A user asked for a password reset.",
        "registered": "A new user account was registered.",
    ],
    "ai" => [
        "agent_failed": "An AI agent failed to handle a conversation.",
        "cost_threshold_reached": "AI spending reached the configured cost threshold.",
        "knowledge_sync_completed": "An AI knowledge base finished synchronizing.",
        "knowledge_sync_failed": "An AI knowledge base failed to synchronize.",
        "quota_exceeded": "The organization's AI quota is used up.",
        "quota_low": "The organization's AI quota is running low.",
    ],
    "audit" => [
        "recorded": "An entry was added to the organization's audit log.",
    ],
    "automation" => [
        "failed": "An automation run failed.",
    ],
    "autoreply" => [
        "created": "An automatic reply rule was created.",
        "deleted": "An automatic reply rule was deleted.",
        "updated": "An automatic reply rule was changed.",
    ],
    "billing" => [
        "auto_recharge_failed": "An automatic credit recharge failed.",
        "credit_critical": "The credit balance is critically low.",
        "credit_depleted": "The credit balance is used up.",
        "credit_low": "The credit balance is low.",
        "credit_recharged": "Credit was added to the balance.",
        "invoice_approved": "An invoice was approved.",
        "invoice_due": "An invoice is due.",
        "invoice_generated": "An invoice was generated.",
        "invoice_overdue": "An invoice is overdue.",
        "invoice_paid": "An invoice was paid.",
        "invoice_sent": "An invoice was sent.",
        "payment_failed": "A payment failed.",
        "payment_refunded": "A payment was refunded.",
        "payment_succeeded": "A payment succeeded.",
    ],
    "broadcast" => [
        "completed": "A broadcast finished sending.",
        "failed": "A broadcast failed.",
    ],
    "bulk_operation" => [
        "completed": "A bulk operation finished.",
        "failed": "A bulk operation failed.",
    ],
    "campaign" => [
        "completed": "A campaign finished.",
        "contact_replied": "A contact replied to a campaign message.",
        "failed": "A campaign failed.",
        "paused": "A campaign was paused.",
        "resumed": "A paused campaign was resumed.",
        "scheduled": "A campaign was scheduled.",
        "started": "A campaign started sending.",
    ],
    "channel" => [
        "connected": "A messaging channel was connected.",
        "disconnected": "A messaging channel was disconnected.",
        "health_degraded": "A messaging channel's health degraded.",
        "health_restored": "A messaging channel's health recovered.",
        "token_expiring": "A messaging channel's access token expires soon.",
    ],
    "commerce" => [
        "cart_abandoned": "A shopper abandoned a cart.",
        "catalog_sync_failed": "A product catalogue failed to synchronize.",
        "order_canceled": "An order was canceled.",
        "order_created": "An order was created.",
        "order_fulfilled": "An order was fulfilled.",
        "order_paid": "An order was paid.",
        "order_refunded": "An order was refunded.",
        "order_status_changed": "An order's status changed.",
        "payment_link_created": "A payment link was created.",
        "store_disconnected": "An online store was disconnected.",
    ],
    "contact" => [
        "created": "A contact was created.",
        "deleted": "A contact was deleted.",
        "updated": "A contact was changed.",
    ],
    "conversation" => [
        "agent_mentioned": "An agent was mentioned in a conversation.",
        "assigned": "A conversation was assigned.",
        "closed": "A conversation was closed.",
        "created": "A conversation was opened.",
        "customer_replied": "The customer replied in a conversation.",
        "reassigned": "A conversation was reassigned.",
        "reopened": "A closed conversation was reopened.",
        "sla_breached": "A conversation breached its service-level target.",
        "sla_warning": "A conversation is about to breach its service-level target.",
        "unassigned": "A conversation was unassigned.",
    ],
    "crm" => [
        "deal_assigned": "A deal was assigned.",
        "deal_closing_soon": "A deal's expected close date is near.",
        "deal_created": "A deal was created.",
        "deal_lost": "A deal was lost.",
        "deal_rotting": "A deal has had no activity for too long.",
        "deal_stage_changed": "A deal moved to another stage.",
        "deal_won": "A deal was won.",
        "lead_assigned": "A lead was assigned.",
        "lead_converted": "A lead was converted.",
        "lead_created": "A lead was created.",
        "lead_stale": "A lead has had no activity for too long.",
        "meeting_booked": "A meeting was booked.",
        "meeting_canceled": "A meeting was canceled.",
        "meeting_reminder": "A meeting is about to start.",
        "meeting_rescheduled": "A meeting was rescheduled.",
        "quote_accepted": "A quote was accepted.",
        "quote_expired": "A quote expired.",
        "quote_rejected": "A quote was rejected.",
        "quote_sent": "A quote was sent.",
        "quote_viewed": "A quote was viewed by its recipient.",
        "sequence_completed": "A sales sequence finished.",
        "sequence_failed": "A sales sequence failed.",
        "task_assigned": "A task was assigned.",
        "task_completed": "A task was completed.",
        "task_due": "A task is due.",
        "task_overdue": "A task is overdue.",
    ],
    "drip_campaign" => [
        "completed": "A drip campaign finished.",
        "failed": "A drip campaign failed.",
    ],
    "feedback" => [
        "csat_low": "A customer gave a low satisfaction score.",
        "csat_received": "A customer satisfaction score was received.",
    ],
    "group" => [
        "created": "A contact group was created.",
        "deleted": "A contact group was deleted.",
        "updated": "A contact group was changed.",
    ],
    "integration" => [
        "sync_failed": "An integration failed to synchronize.",
        "sync_restored": "An integration synchronizes again.",
        "test": "A test event, sent to one endpoint by its test operation.",
    ],
    "message" => [
        "received": "An inbound message was received: `data.message` has `type` and the member named after it (text, media, interactive, reaction, location, contacts, order, system or unsupported; the `MessageKind` schema), with `reply_to`, `forwarded`, `frequently_forwarded` and `referral`.",
        "sent": "An outbound message was sent.",
        "status.update": "An outbound message's delivery status changed.",
    ],
    "organization" => [
        "activated": "The organization was activated.",
        "suspended": "The organization was suspended.",
    ],
    "scheduled_message" => [
        "canceled": "A scheduled message was canceled.",
        "failed": "A scheduled message failed to send.",
        "sent": "A scheduled message was sent.",
    ],
    "security" => [
        "api_key_created": "An API key was created (never with the key itself).",
        "api_key_revoked": "An API key was revoked.",
        "new_login": "A user signed in from a new device or place.",
        "two_factor_changed": "A user's two-factor authentication settings changed.",
    ],
    "storage" => [
        "migration_completed": "A storage migration finished.",
        "migration_failed": "A storage migration failed.",
        "threshold_reached": "Storage use reached the configured threshold.",
    ],
    "subscription" => [
        "canceled": "The subscription was canceled.",
        "downgraded": "The subscription was downgraded.",
        "expired": "The subscription expired.",
        "expiring": "The subscription expires soon.",
        "renewed": "The subscription was renewed.",
        "started": "A subscription started.",
        "upgraded": "The subscription was upgraded.",
    ],
    "support" => [
        "ticket_assigned": "A support ticket was assigned.",
        "ticket_created": "A support ticket was created.",
        "ticket_reopened": "A support ticket was reopened.",
        "ticket_replied": "A support ticket received a reply.",
        "ticket_resolved": "A support ticket was resolved.",
    ],
    "survey" => [
        "completed": "A contact completed a survey.",
    ],
    "team" => [
        "invitation_accepted": "A team invitation was accepted.",
        "invitation_created": "A team invitation was sent.",
        "invitation_expired": "A team invitation expired.",
        "member_added": "A member joined the team.",
        "member_removed": "A member left or was removed from the team.",
        "role_changed": "A team member's role changed.",
    ],
    "trial" => [
        "expired": "The trial expired.",
        "expiring": "The trial expires soon.",
        "started": "A trial started.",
    ],
    "usage" => [
        "quota_exceeded": "A usage quota was exceeded.",
        "threshold_reached": "Usage reached the configured threshold.",
    ],
    "webhook" => [
        "delivery_failed": "A webhook delivery failed for good (rejected, or retries exhausted).",
        "endpoint_disabled": "A webhook endpoint was disabled after repeated failed deliveries.",
    ],
}

/// The events this deployment emits (the others are in the catalogue for subscriptions, and
/// for deployments whose other modules emit them). `GET /webhook-events` reports each entry's
/// `emitted`, and an endpoint that subscribes to none of these gets a `never_emitted` warning.
/// `tests/emitted_events.rs` checks this list against the code that writes events.
pub const EMITTED: &[&str] = &[
    "audit.recorded",
    "campaign.completed",
    "campaign.failed",
    "campaign.scheduled",
    "campaign.started",
    "contact.created",
    "contact.deleted",
    "contact.updated",
    "conversation.created",
    "group.created",
    "group.deleted",
    "group.updated",
    "integration.test",
    "message.received",
    "message.sent",
    "message.status.update",
    "security.api_key_created",
    "security.api_key_revoked",
    "team.member_added",
    "team.member_removed",
    "team.role_changed",
    "webhook.delivery_failed",
    "webhook.endpoint_disabled",
];

/// Whether this deployment ever emits `name`.
pub fn is_emitted(name: &str) -> bool {
    EMITTED.contains(&name)
}

/// When none of `patterns` matches an event this deployment emits: the patterns (for the
/// `never_emitted` warning); `None` when at least one emitted event matches.
pub fn never_emitted<S: AsRef<str>>(patterns: &[S]) -> Option<Vec<String>> {
    let any = EMITTED.iter().any(|name| subscribed(patterns, name));
    (!any).then(|| patterns.iter().map(|p| p.as_ref().to_owned()).collect())
}

/// Names used by the dispatcher and the test operation.
pub const INTEGRATION_TEST: &str = "integration.test";
pub const WEBHOOK_DELIVERY_FAILED: &str = "webhook.delivery_failed";
pub const WEBHOOK_ENDPOINT_DISABLED: &str = "webhook.endpoint_disabled";

/// The catalogue entry of an event name.
pub fn lookup(name: &str) -> Option<&'static EventType> {
    EVENTS.iter().find(|e| e.name == name)
}

/// Whether `name` is a catalogue event name.
pub fn is_event(name: &str) -> bool {
    lookup(name).is_some()
}

/// Whether `ns` is a catalogue namespace.
pub fn is_namespace(ns: &str) -> bool {
    EVENTS.iter().any(|e| e.namespace == ns)
}

/// The namespace of an event name: the part before the first dot.
pub fn namespace_of(name: &str) -> &str {
    name.split_once('.').map(|(ns, _)| ns).unwrap_or(name)
}

/// One subscription pattern of an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// `*`: every event.
    All,
    /// `<namespace>.*`: every event of a namespace.
    Namespace(String),
    /// One event name.
    Exact(String),
}

impl Pattern {
    /// Parses a pattern and checks it against the catalogue.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        if s == "*" {
            return Ok(Pattern::All);
        }
        if s.is_empty() {
            return Err("an event name must not be empty".into());
        }
        if let Some(ns) = s.strip_suffix(".*") {
            return if is_namespace(ns) {
                Ok(Pattern::Namespace(ns.to_owned()))
            } else {
                Err(format!(
                    "`{}` is not a namespace of the event catalogue (GET /api/v1/integrations/webhook-events)",
                    shorten(ns)
                ))
            };
        }
        if is_event(s) {
            Ok(Pattern::Exact(s.to_owned()))
        } else {
            Err(format!(
                "`{}` is not an event of the catalogue (GET /api/v1/integrations/webhook-events); use an exact name, `*` or `namespace.*`",
                shorten(s)
            ))
        }
    }

    pub fn matches(&self, event: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Namespace(ns) => namespace_of(event) == ns && event.len() > ns.len() + 1,
            Pattern::Exact(name) => name == event,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::All => f.write_str("*"),
            Pattern::Namespace(ns) => write!(f, "{ns}.*"),
            Pattern::Exact(name) => f.write_str(name),
        }
    }
}

/// Shortens a client-supplied value for an error message.
fn shorten(s: &str) -> String {
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(80).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// Whether any of `patterns` (stored pattern strings) matches `event`. Stored patterns were
/// validated when written; one that no longer parses matches nothing.
pub fn subscribed<S: AsRef<str>>(patterns: &[S], event: &str) -> bool {
    patterns.iter().any(|p| {
        let p = p.as_ref();
        if p == "*" {
            true
        } else if let Some(ns) = p.strip_suffix(".*") {
            namespace_of(event) == ns && event.len() > ns.len() + 1
        } else {
            p == event
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_catalogue_has_exactly_146_distinct_events() {
        assert_eq!(EVENTS.len(), 146);
        let names: HashSet<&str> = EVENTS.iter().map(|e| e.name).collect();
        assert_eq!(names.len(), 146, "no duplicates");
        for e in EVENTS {
            assert_eq!(namespace_of(e.name), e.namespace, "{}", e.name);
            assert!(!e.description.is_empty() && !e.description.contains('\n'));
            assert!(
                e.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.'),
                "{}",
                e.name
            );
        }
    }

    #[test]
    fn namespaces_follow_the_specification() {
        let namespaces: HashSet<&str> = EVENTS.iter().map(|e| e.namespace).collect();
        assert_eq!(namespaces.len(), 30);
        assert!(namespaces.contains("commerce") && !namespaces.contains("service"));
        assert_eq!(EVENTS.iter().filter(|e| e.namespace == "crm").count(), 26);
        assert_eq!(
            EVENTS.iter().filter(|e| e.namespace == "billing").count(),
            14
        );
        for name in [
            "message.sent",
            "message.status.update",
            "integration.test",
            "security.api_key_created",
            "security.api_key_revoked",
            "webhook.delivery_failed",
            "webhook.endpoint_disabled",
            "audit.recorded",
            "commerce.order_created",
            "crm.deal_won",
        ] {
            assert!(is_event(name), "{name}");
        }
    }

    #[test]
    fn patterns_parse_and_match() {
        assert_eq!(Pattern::parse("*").unwrap(), Pattern::All);
        let ns = Pattern::parse("message.*").unwrap();
        assert!(ns.matches("message.sent") && ns.matches("message.status.update"));
        assert!(!ns.matches("messages.sent") && !ns.matches("contact.created"));
        let exact = Pattern::parse("message.sent").unwrap();
        assert!(exact.matches("message.sent") && !exact.matches("message.received"));
        for bad in [
            "",
            "message",
            "message.*.*",
            "nope.*",
            "Message.Sent",
            " message.sent",
            "message.sent ",
            "message.status.*",
            "*.sent",
            "**",
            "service.order_created",
            "message.sent,contact.created",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(
            Pattern::parse("nope.sent")
                .unwrap_err()
                .contains("`nope.sent`")
        );
        for p in ["*", "crm.*", "crm.deal_won"] {
            assert_eq!(Pattern::parse(p).unwrap().to_string(), p);
        }
    }

    #[test]
    fn stored_patterns_match_like_parsed_ones() {
        for e in EVENTS {
            for p in ["*", "message.*", "crm.*", "message.sent", "webhook.*"] {
                assert_eq!(
                    subscribed(&[p], e.name),
                    Pattern::parse(p).unwrap().matches(e.name),
                    "{p} vs {}",
                    e.name
                );
            }
        }
        assert!(!subscribed::<&str>(&[], "message.sent"));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn known_event() -> impl Strategy<Value = &'static str> {
            prop::sample::select(EVENTS.iter().map(|e| e.name).collect::<Vec<_>>())
        }

        proptest! {
            /// Any string parses or is refused without panicking; what parses is `*`, a known
            /// namespace with `.*`, or a known event, and prints back to itself.
            #[test]
            fn patterns_parse_exactly_the_catalogue(s in ".{0,120}") {
                match Pattern::parse(&s) {
                    Ok(p) => {
                        prop_assert!(s == "*" || is_event(&s) || s.strip_suffix(".*").is_some_and(is_namespace));
                        prop_assert_eq!(p.to_string(), s.clone());
                        prop_assert_eq!(Pattern::parse(&p.to_string()), Ok(p));
                    }
                    Err(message) => {
                        prop_assert!(s != "*" && !is_event(&s));
                        prop_assert!(message.chars().count() < 300, "the message quotes a bounded part of the input");
                    }
                }
            }

            /// Stored patterns match events exactly as the parsed pattern does, and a namespace
            /// pattern matches every event of its namespace and no other.
            #[test]
            fn matching_agrees_with_the_pattern(pattern in known_event(), event in known_event(), kind in 0u8..3) {
                let text = match kind {
                    0 => "*".to_owned(),
                    1 => format!("{}.*", namespace_of(pattern)),
                    _ => pattern.to_owned(),
                };
                let parsed = Pattern::parse(&text).unwrap();
                prop_assert_eq!(subscribed(&[&text], event), parsed.matches(event));
                let expected = match kind {
                    0 => true,
                    1 => namespace_of(event) == namespace_of(pattern),
                    _ => event == pattern,
                };
                prop_assert_eq!(parsed.matches(event), expected, "{} vs {}", text, event);
            }

            /// Near misses of real names (a character changed, dropped or added) never match.
            #[test]
            fn near_misses_are_refused(event in known_event(), at in any::<prop::sample::Index>(), c in "[a-z_.*]") {
                let mut chars: Vec<char> = event.chars().collect();
                let i = at.index(chars.len());
                chars[i] = c.chars().next().unwrap();
                let changed: String = chars.iter().collect();
                prop_assume!(!is_event(&changed) && changed != "*" && !changed.strip_suffix(".*").is_some_and(is_namespace));
                prop_assert!(Pattern::parse(&changed).is_err());
                prop_assert!(!subscribed(&[&changed], event));
            }
        }
    }

    #[test]
    fn every_emitted_event_is_in_the_catalogue() {
        for name in EMITTED {
            assert!(is_event(name), "{name}");
        }
        assert!(is_emitted("message.sent") && !is_emitted("commerce.order_created"));
    }

    #[test]
    fn never_emitted_warns_only_when_nothing_emitted_matches() {
        assert_eq!(never_emitted(&["message.*"]), None);
        assert_eq!(never_emitted(&["*"]), None);
        assert_eq!(
            never_emitted(&["commerce.order_created", "message.sent"]),
            None
        );
        assert_eq!(
            never_emitted(&["commerce.order_created", "crm.*"]),
            Some(vec![
                "commerce.order_created".to_owned(),
                "crm.*".to_owned()
            ])
        );
    }
}
