//! Typed test events (`POST .../webhook-endpoints/{uuid}/test {"event": NAME}`): a realistic
//! sample of any event this deployment emits, built by the same builders as the real event
//! from sample records, so its `data` has exactly the real shape. The sample is marked
//! `metadata.test: true` and goes to the one endpoint tested (never the feed).

use serde_json::json;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::channel::{ChannelIdentity, ChannelType};
use switchboard_domain::contact::{Contact, Conversation, ConversationStatus};
use switchboard_domain::event::{Actor, EventCategory, NewEvent, OrgEvent, Subject};
use switchboard_domain::message::{Direction, InboundContext, MessageStatus, MessageType};
use switchboard_domain::permission::Role;
use switchboard_domain::phone::Phone;
use switchboard_domain::scope::ScopeSet;
use switchboard_domain::user::MembershipStatus;
use switchboard_domain::webhooks::catalogue::{self, INTEGRATION_TEST};
use switchboard_domain::webhooks::events as wh_events;
use switchboard_store::campaigns::{CampaignCounts, CampaignRecord, CampaignStatus};
use switchboard_store::groups::GroupRecord;
use switchboard_store::{ApiKeyRecord, Member, MessageRecord, UserRecord};

use super::{campaigns, groups, keys, message_events, users};
use crate::views::messages::ConversationOut;

/// What the sample is about: the organization, the endpoint tested, the channel to name in
/// channel events (the organization's default, when it has one), and now.
pub struct SampleContext<'a> {
    pub org_id: i64,
    pub endpoint_uuid: Uuid,
    pub endpoint_name: &'a str,
    pub endpoint_url: &'a str,
    pub channel: Option<ChannelIdentity>,
    pub now: Timestamp,
}

/// The sample of `name` (`None` when this deployment does not emit it), marked as a test.
pub fn sample_event(name: &str, cx: &SampleContext<'_>) -> Option<NewEvent> {
    if !catalogue::is_emitted(name) {
        return None;
    }
    let event = match name {
        INTEGRATION_TEST => {
            wh_events::test_event(cx.org_id, cx.endpoint_uuid, cx.endpoint_name, cx.now)
        }
        "message.sent" | "message.received" | "message.status.update" => {
            let m = sample_message(cx, name);
            let mut data = message_events::message_data(&m);
            if name == "message.status.update" {
                data["previous_status"] = json!(MessageStatus::Sent);
            }
            NewEvent::new(cx.org_id, name, data, Some(m.channel), cx.now)
        }
        "contact.created" | "contact.updated" | "contact.deleted" => {
            message_events::contact_event(name, &sample_contact(cx), cx.now)
        }
        "conversation.created" => {
            let c = sample_conversation(cx);
            NewEvent::new(
                cx.org_id,
                name,
                json!({
                    "conversation_uuid": c.uuid,
                    "contact_uuid": c.contact_uuid,
                    "channel_id": c.channel_id,
                    "conversation": ConversationOut::from(&c),
                }),
                Some(sample_channel(cx)),
                cx.now,
            )
        }
        "group.created" | "group.updated" | "group.deleted" => {
            groups::group_event(&sample_group(cx), name, json!({}), cx.now)
        }
        "campaign.scheduled" | "campaign.started" | "campaign.completed" | "campaign.failed" => {
            campaigns::campaign_event(name, &sample_campaign(cx, name))
        }
        "security.api_key_created" | "security.api_key_revoked" => {
            let k = sample_key(cx, name);
            let mut data = keys::key_data(&k);
            if name == "security.api_key_revoked" {
                data["revoked_at"] = json!(cx.now);
                data["reason"] = json!("revoked");
            } else {
                data["reason"] = json!("created");
            }
            NewEvent::new(cx.org_id, name, data, None, cx.now)
        }
        "team.member_added" | "team.member_removed" | "team.role_changed" => {
            let extra = match name {
                "team.role_changed" => json!({ "previous_role": Role::Viewer }),
                _ => json!({}),
            };
            users::webhook(&sample_member(cx), name, extra, cx.now)
        }
        "audit.recorded" => OrgEvent::new(
            cx.org_id,
            "conversation.initiated",
            EventCategory::Audit,
            Actor::System,
            Some(Subject::new("conversation", Uuid::nil())),
            json!({ "sample": true }),
            cx.now,
        )
        .audit_recorded(),
        "webhook.delivery_failed" => wh_events::delivery_failed(
            cx.org_id,
            &wh_events::FailedDelivery {
                delivery_uuid: Uuid::nil(),
                event_uuid: Uuid::nil(),
                event_name: "message.sent",
                endpoint_uuid: Some(cx.endpoint_uuid),
                endpoint_url: Some(cx.endpoint_url),
                status: "retries_exhausted",
                attempts: 4,
                response_status: Some(503),
                error_code: Some("http_error"),
                error_message: Some("The endpoint answered 503 Service Unavailable."),
            },
            cx.now,
        ),
        "webhook.endpoint_disabled" => wh_events::endpoint_disabled(
            &wh_events::DisabledEndpoint {
                org_id: cx.org_id,
                uuid: cx.endpoint_uuid,
                name: cx.endpoint_name,
                url: cx.endpoint_url,
                reason: &wh_events::auto_disable_reason(10, false),
                consecutive_failures: 10,
            },
            cx.now,
        ),
        _ => return None,
    };
    Some(event.as_test())
}

fn sample_channel(cx: &SampleContext<'_>) -> ChannelIdentity {
    cx.channel.clone().unwrap_or_else(|| ChannelIdentity {
        id: 0,
        uuid: Uuid::nil(),
        slug: "sandbox".into(),
        channel_type: ChannelType::Sandbox,
        name: "Sandbox".into(),
        identifier: "sandbox".into(),
    })
}

fn sample_contact(cx: &SampleContext<'_>) -> Contact {
    Contact {
        id: 0,
        uuid: Uuid::nil(),
        org_id: cx.org_id,
        phone: Phone::parse("+4915112345678").ok(),
        name: Some("Ada Lovelace".into()),
        telegram_chat_id: None,
        created_at: cx.now,
        updated_at: cx.now,
    }
}

fn sample_conversation(cx: &SampleContext<'_>) -> Conversation {
    Conversation {
        id: 0,
        uuid: Uuid::nil(),
        org_id: cx.org_id,
        contact_id: 0,
        contact_uuid: Uuid::nil(),
        channel_id: sample_channel(cx).id,
        status: ConversationStatus::Open,
        last_inbound_at: None,
        created_at: cx.now,
        updated_at: cx.now,
        consent_uuid: None,
    }
}

fn sample_message(cx: &SampleContext<'_>, name: &str) -> MessageRecord {
    let inbound = name == "message.received";
    MessageRecord {
        id: 0,
        uuid: Uuid::nil(),
        org_id: cx.org_id,
        channel: sample_channel(cx),
        contact_id: 0,
        contact_uuid: Uuid::nil(),
        conversation_id: Some(0),
        conversation_uuid: Some(Uuid::nil()),
        api_key_id: None,
        direction: if inbound {
            Direction::Inbound
        } else {
            Direction::Outbound
        },
        message_type: MessageType::Text,
        status: match name {
            "message.received" => MessageStatus::Received,
            "message.status.update" => MessageStatus::Delivered,
            _ => MessageStatus::Sent,
        },
        content: json!({ "body": "This is a sample message from a Switchboard test." }),
        provider_message_id: Some("sample.provider.id".into()),
        error: None,
        created_at: cx.now,
        updated_at: cx.now,
        consent_uuid: None,
        trace: None,
        context: inbound.then(InboundContext::default),
        edited_at: None,
        deleted_at: None,
        pricing: None,
        provider_conversation: None,
    }
}

fn sample_group(cx: &SampleContext<'_>) -> GroupRecord {
    GroupRecord {
        id: 0,
        uuid: Uuid::nil(),
        org_id: cx.org_id,
        name: "Sample group".into(),
        member_count: 3,
        created_at: cx.now,
        updated_at: cx.now,
    }
}

fn sample_campaign(cx: &SampleContext<'_>, name: &str) -> CampaignRecord {
    let (status, sent, pending) = match name {
        "campaign.completed" => (CampaignStatus::Completed, 3, 0),
        "campaign.failed" => (CampaignStatus::Failed, 0, 0),
        _ => (CampaignStatus::Running, 0, 3),
    };
    CampaignRecord {
        id: 0,
        uuid: Uuid::nil(),
        org_id: cx.org_id,
        api_key_id: 0,
        api_key_prefix: "sbk_sample".into(),
        name: "Sample campaign".into(),
        channel_id: sample_channel(cx).id,
        group_uuid: Some(Uuid::nil()),
        request: json!({ "template_uuid": Uuid::nil(), "template": {"name": "order_update", "language": "en"} }),
        status,
        counts: CampaignCounts {
            total: 3,
            pending,
            sent,
            refused: 0,
            failed: 3 - sent - pending,
        },
        created_at: cx.now,
        updated_at: cx.now,
        completed_at: (pending == 0).then_some(cx.now),
    }
}

fn sample_key(cx: &SampleContext<'_>, name: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: 0,
        org_id: cx.org_id,
        name: "Sample key".into(),
        prefix: "sbk_sample".into(),
        key_hash: switchboard_domain::api_key::KeyHash::of("sbk_sample"),
        scopes: ScopeSet::parse_list("messages:write,webhooks:read").ok(),
        legacy: false,
        default_channel_id: None,
        expires_at: None,
        revoked_at: (name == "security.api_key_revoked").then_some(cx.now),
        revoked_reason: None,
        created_at: cx.now,
        last_used_at: None,
    }
}

fn sample_member(cx: &SampleContext<'_>) -> Member {
    Member {
        membership_id: 0,
        org_id: cx.org_id,
        user: UserRecord {
            id: 0,
            uuid: Uuid::nil(),
            email: "ada@example.com".into(),
            name: Some("Ada Lovelace".into()),
            created_at: cx.now,
            updated_at: cx.now,
        },
        role: Role::Agent,
        status: MembershipStatus::Active,
        overrides: Vec::new(),
        created_at: cx.now,
        updated_at: cx.now,
    }
}

/// The `data` of a sample, for the documentation's examples and the tests: every emitted
/// event has one.
pub fn has_sample(name: &str) -> bool {
    let cx = SampleContext {
        org_id: 1,
        endpoint_uuid: Uuid::nil(),
        endpoint_name: "sample",
        endpoint_url: "https://example.com/hooks",
        channel: None,
        now: Timestamp::from_millis(0),
    };
    sample_event(name, &cx).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_emitted_event_has_a_test_sample() {
        for name in catalogue::EMITTED {
            assert!(has_sample(name), "{name} has no sample");
        }
        assert!(!has_sample("commerce.order_created"));
    }

    #[test]
    fn samples_are_marked_as_tests_and_carry_the_real_shape() {
        let cx = SampleContext {
            org_id: 7,
            endpoint_uuid: Uuid::nil(),
            endpoint_name: "sample",
            endpoint_url: "https://example.com/hooks?token=x",
            channel: None,
            now: Timestamp::from_millis(1_000),
        };
        let e = sample_event("message.sent", &cx).unwrap();
        assert!(e.test);
        let env = e.envelope();
        assert_eq!(env["metadata"]["test"], true);
        assert_eq!(env["event"], "message.sent");
        for field in ["message_id", "contact_uuid", "status", "message"] {
            assert!(env["data"].get(field).is_some(), "{field}");
        }
        assert!(env["channel"].is_object());
        let d = sample_event("webhook.delivery_failed", &cx).unwrap();
        assert!(!d.envelope().to_string().contains("token=x"));
    }
}
