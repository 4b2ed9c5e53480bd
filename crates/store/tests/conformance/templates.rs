//! Conformance of the template catalogue and the consent evidence, on both backends.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::support::*;
use switchboard_domain::api_key;
use switchboard_domain::channel::{ChannelIdentity, ChannelType};
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};
use switchboard_domain::message::{MessageStatus, MessageType};
use switchboard_domain::phone::Phone;
use switchboard_domain::template::{
    ConsentPurpose, ConsentSource, TemplateCategory, TemplateStatus,
};
use switchboard_store::testing::TestStore;
use switchboard_store::*;

conformance!(
    templates_are_created_found_listed_and_unique,
    templates_change_by_admin_and_by_provider_status,
    consented_sends_store_and_link_the_evidence,
    a_lost_claim_writes_no_evidence,
    consents_are_append_only,
    concurrent_initiations_share_one_contact_and_conversation,
);

fn phone(s: &str) -> Phone {
    Phone::parse(s).unwrap()
}

struct Fixture {
    org: i64,
    channel: i64,
    /// The channel as a send names it.
    identity: ChannelIdentity,
    other_channel: i64,
    key: i64,
}

async fn fixture(s: &SharedStore) -> Fixture {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut wa = new_channel(org.id, Some("wa"), "WhatsApp", true);
    wa.channel_type = ChannelType::WhatsappCloud;
    let channel = s.create_channel(wa, no_effects()).await.unwrap();
    let mut wa2 = new_channel(org.id, Some("wa2"), "WhatsApp 2", false);
    wa2.channel_type = ChannelType::WhatsappCloud;
    let other_channel = s.create_channel(wa2, no_effects()).await.unwrap();
    let g = api_key::generate();
    let key = s
        .create_api_key(
            NewApiKey {
                org_id: org.id,
                name: "k".into(),
                prefix: g.display_prefix,
                key_hash: g.hash,
                scopes: None,
                legacy: false,
                default_channel_id: None,
                expires_at: None,
                created_at: t(0),
            },
            no_effects(),
        )
        .await
        .unwrap();
    Fixture {
        org: org.id,
        channel: channel.id,
        identity: channel.identity(),
        other_channel: other_channel.id,
        key: key.id,
    }
}

fn new_template(org: i64, channel: i64, name: &str, language: &str) -> NewTemplate {
    NewTemplate {
        uuid: Uuid::now_v7(),
        org_id: org,
        channel_id: channel,
        name: name.into(),
        language: language.into(),
        category: TemplateCategory::Utility,
        status: TemplateStatus::Approved,
        active: true,
        components: json!([{"type": "BODY", "text": "Hi {{1}}"}]),
        body_parameters: Some(1),
        provider_template_id: None,
        now: t(1),
    }
}

fn log_entry(org: i64, kind: &str, uuid: Uuid) -> Effects {
    Effects::none().log(OrgEvent::new(
        org,
        kind,
        EventCategory::Admin,
        Actor::Admin,
        Some(Subject::new("template", uuid)),
        json!({}),
        t(1),
    ))
}

async fn templates_are_created_found_listed_and_unique(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let a = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            Box::new(|t: &TemplateRecord| log_entry(t.org_id, "template.created", t.uuid)),
        )
        .await
        .unwrap();
    assert_eq!(a.name, "order_update");
    assert_eq!(a.components, json!([{"type": "BODY", "text": "Hi {{1}}"}]));
    assert_eq!(a.body_parameters, Some(1));
    assert!(a.active);
    assert_eq!(a.status, TemplateStatus::Approved);
    assert_eq!(a.created_at, t(1));
    let log = s.list_org_events(f.org, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].event_type, "template.created");

    // Unique per channel, name and language; another language or channel is another template.
    let dup = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await;
    assert!(
        matches!(dup, Err(StoreError::UniqueViolation(_))),
        "{dup:?}"
    );
    assert_eq!(s.list_org_events(f.org, 10).await.unwrap().len(), 1);
    let mut de = new_template(f.org, f.channel, "order_update", "de");
    de.provider_template_id = Some("111".into());
    de.components = json!([]);
    de.body_parameters = None;
    let b = s.create_template(de, no_effects()).await.unwrap();
    assert_eq!(b.body_parameters, None);
    assert_eq!(b.components, json!([]));
    let c = s
        .create_template(
            new_template(f.org, f.other_channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    // The provider id is unique per channel.
    let mut same_id = new_template(f.org, f.channel, "other", "en_US");
    same_id.provider_template_id = Some("111".into());
    let err = s.create_template(same_id, no_effects()).await;
    assert!(
        matches!(err, Err(StoreError::UniqueViolation(_))),
        "{err:?}"
    );

    // Reads.
    assert_eq!(s.get_template(a.uuid).await.unwrap(), a);
    assert!(matches!(
        s.get_template(Uuid::now_v7()).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        s.find_template(f.org, b.uuid).await.unwrap(),
        Some(b.clone())
    );
    let other_org = s.create_org("Other", t(0)).await.unwrap();
    assert_eq!(s.find_template(other_org.id, b.uuid).await.unwrap(), None);
    let on_channel: Vec<Uuid> = s
        .list_channel_templates(f.channel)
        .await
        .unwrap()
        .iter()
        .map(|t| t.uuid)
        .collect();
    assert_eq!(on_channel, vec![a.uuid, b.uuid]);
    let in_org: Vec<Uuid> = s
        .list_org_templates(f.org)
        .await
        .unwrap()
        .iter()
        .map(|t| t.uuid)
        .collect();
    assert_eq!(in_org, vec![a.uuid, b.uuid, c.uuid]);
    assert!(s.list_org_templates(other_org.id).await.unwrap().is_empty());
}

async fn templates_change_by_admin_and_by_provider_status(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let a = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    let change = s
        .update_template(
            a.uuid,
            TemplatePatch {
                status: Some(TemplateStatus::Paused),
                active: Some(false),
                components: Some((json!([{"type": "BODY", "text": "{{1}} {{2}}"}]), Some(2))),
                ..Default::default()
            },
            t(5),
            Box::new(|c: &TemplateChange| {
                log_entry(c.after.org_id, "template.updated", c.after.uuid)
            }),
        )
        .await
        .unwrap();
    assert_eq!(change.before, a);
    assert_eq!(change.after.status, TemplateStatus::Paused);
    assert!(!change.after.active);
    assert_eq!(change.after.body_parameters, Some(2));
    assert_eq!(
        change.after.category,
        TemplateCategory::Utility,
        "unchanged"
    );
    assert_eq!(change.after.updated_at, t(5));
    assert_eq!(change.after.created_at, a.created_at);
    assert_eq!(s.get_template(a.uuid).await.unwrap(), change.after);
    assert_eq!(s.list_org_events(f.org, 10).await.unwrap().len(), 1);
    assert!(matches!(
        s.update_template(Uuid::now_v7(), TemplatePatch::default(), t(6), no_effects())
            .await,
        Err(StoreError::NotFound)
    ));

    // Provider statuses: by name and language first (the id is then recorded) ...
    let applied = s
        .apply_template_status(
            f.channel,
            ProviderTemplateStatus {
                provider_template_id: Some("594425479261596".into()),
                name: Some("order_update".into()),
                language: Some("en_US".into()),
                status: TemplateStatus::Approved,
            },
            t(7),
            Box::new(|c: &TemplateChange| {
                log_entry(c.after.org_id, "template.status_changed", c.after.uuid)
            }),
        )
        .await
        .unwrap()
        .expect("matched by name and language");
    assert_eq!(applied.before.status, TemplateStatus::Paused);
    assert_eq!(applied.after.status, TemplateStatus::Approved);
    assert_eq!(
        applied.after.provider_template_id.as_deref(),
        Some("594425479261596")
    );
    assert_eq!(applied.after.updated_at, t(7));
    // ... then by the provider id, whatever the name says.
    let by_id = s
        .apply_template_status(
            f.channel,
            ProviderTemplateStatus {
                provider_template_id: Some("594425479261596".into()),
                name: Some("renamed".into()),
                language: Some("xx".into()),
                status: TemplateStatus::Disabled,
            },
            t(8),
            no_effects(),
        )
        .await
        .unwrap()
        .expect("matched by id");
    assert_eq!(by_id.after.status, TemplateStatus::Disabled);
    // The same status again changes nothing and writes nothing.
    let before_log = s.list_org_events(f.org, 10).await.unwrap().len();
    let same = s
        .apply_template_status(
            f.channel,
            ProviderTemplateStatus {
                provider_template_id: Some("594425479261596".into()),
                name: None,
                language: None,
                status: TemplateStatus::Disabled,
            },
            t(9),
            Box::new(|c: &TemplateChange| {
                log_entry(c.after.org_id, "template.status_changed", c.after.uuid)
            }),
        )
        .await
        .unwrap();
    assert_eq!(same, None);
    assert_eq!(
        s.list_org_events(f.org, 10).await.unwrap().len(),
        before_log
    );
    // Unknown templates, and templates of another channel, are not touched.
    for (channel, id, name) in [
        (f.channel, Some("999"), Some("nope")),
        (
            f.other_channel,
            Some("594425479261596"),
            Some("order_update"),
        ),
    ] {
        let none = s
            .apply_template_status(
                channel,
                ProviderTemplateStatus {
                    provider_template_id: id.map(str::to_owned),
                    name: name.map(str::to_owned),
                    language: Some("en_US".into()),
                    status: TemplateStatus::Rejected,
                },
                t(10),
                no_effects(),
            )
            .await
            .unwrap();
        assert_eq!(none, None);
    }
    assert_eq!(
        s.get_template(a.uuid).await.unwrap().status,
        TemplateStatus::Disabled
    );
}

fn outbound(f: &Fixture, p: &str, policy: ConversationPolicy, at: i64) -> NewOutbound {
    NewOutbound {
        org_id: f.org,
        channel: f.identity.clone(),
        api_key_id: Some(f.key),
        recipient: RecipientRef::Phone(phone(p)),
        conversation: policy,
        uuid: Uuid::now_v7(),
        message_type: MessageType::Template,
        status: MessageStatus::Sent,
        content: json!({"name": "order_update", "language": "en_US", "components": []}),
        provider_message_id: Some(format!("wamid.{}", Uuid::now_v7().simple())),
        error: None,
        now: t(at),
        steps: Vec::new(),
        queue: None,
        context: None,
    }
}

fn consent(f: &Fixture, template_id: i64, context: ConsentContext) -> NewConsent {
    let _ = f;
    NewConsent {
        uuid: Uuid::now_v7(),
        template_id,
        api_key_id: None,
        context,
        purpose: ConsentPurpose::Utility,
        source: ConsentSource::CustomerRequest,
        reference: "form-123".into(),
        captured_at: t(-60_000),
    }
}

fn sent_event(r: &RecordedOutbound) -> Effects {
    Effects::none().event(switchboard_domain::event::NewEvent::new(
        r.message.org_id,
        "message.sent",
        json!({ "message_id": r.message.id }),
        Some(r.message.channel.clone()),
        r.message.updated_at,
    ))
}

async fn consented_sends_store_and_link_the_evidence(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let tpl = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    // An initiation to a new number: contact (named), conversation, evidence, links.
    let c1 = consent(&f, tpl.id, ConsentContext::Initiation);
    let first = s
        .record_consented_outbound(
            outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, 10),
            Some("Ada".into()),
            c1.clone(),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(first.contact_created);
    assert_eq!(first.contact.name.as_deref(), Some("Ada"));
    assert!(first.conversation_created);
    let conv = first.conversation.clone().unwrap();
    assert_eq!(conv.consent_uuid, Some(c1.uuid));
    assert_eq!(first.message.consent_uuid, Some(c1.uuid));
    assert_eq!(first.message.conversation_uuid, Some(conv.uuid));
    // Built from what was written (with its consent), not read back: the message as stored.
    assert_eq!(
        first.message,
        s.find_message(f.org, first.message.uuid).await.unwrap()
    );
    let stored = s.find_consent(f.org, c1.uuid).await.unwrap().unwrap();
    assert_eq!(stored.contact_id, first.contact.id);
    assert_eq!(stored.channel_id, f.channel);
    assert_eq!(stored.template_id, tpl.id);
    assert_eq!(stored.context, "initiation");
    assert_eq!(stored.purpose, ConsentPurpose::Utility);
    assert_eq!(stored.source, ConsentSource::CustomerRequest);
    assert_eq!(stored.reference, "form-123");
    assert_eq!(stored.captured_at, t(-60_000));
    assert_eq!(stored.recorded_at, t(10));
    let other_org = s.create_org("Other", t(0)).await.unwrap();
    assert_eq!(s.find_consent(other_org.id, c1.uuid).await.unwrap(), None);
    // History shows the link.
    let listed = s
        .list_messages(f.org, &MessageFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(listed[0].consent_uuid, Some(c1.uuid));
    assert_eq!(
        s.find_conversation(f.org, conv.uuid)
            .await
            .unwrap()
            .unwrap()
            .consent_uuid,
        Some(c1.uuid)
    );

    // A second initiation reuses contact and conversation; the conversation keeps the consent
    // it was initiated under, the message carries its own. The name is not changed.
    let c2 = consent(&f, tpl.id, ConsentContext::Initiation);
    let second = s
        .record_consented_outbound(
            outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, 20),
            Some("Someone Else".into()),
            c2.clone(),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(!second.contact_created && !second.conversation_created);
    assert_eq!(second.contact.name.as_deref(), Some("Ada"));
    assert_eq!(second.conversation.as_ref().unwrap().uuid, conv.uuid);
    assert_eq!(
        second.conversation.as_ref().unwrap().consent_uuid,
        Some(c1.uuid)
    );
    assert_eq!(second.message.consent_uuid, Some(c2.uuid));

    // A conversation the contact opened gets the consent of the first initiation into it.
    let inbound = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![NewInbound {
                    sender: InboundSender::Phone(phone("+4915223456789")),
                    profile_name: None,
                    uuid: Uuid::now_v7(),
                    message_type: MessageType::Text,
                    content: json!({"body": "hi"}),
                    provider_message_id: "wamid.in".into(),
                    sent_at: t(25),
                    context: Default::default(),
                }],
                statuses: vec![],
                now: t(25),
            },
            Box::new(|_| Effects::none()),
        )
        .await
        .unwrap();
    let InboundOutcome::Stored(r) = &inbound.messages[0] else {
        panic!("stored")
    };
    assert_eq!(r.conversation.as_ref().unwrap().consent_uuid, None);
    let c3 = consent(&f, tpl.id, ConsentContext::Initiation);
    let third = s
        .record_consented_outbound(
            outbound(&f, "+4915223456789", ConversationPolicy::OpenOrContinue, 30),
            None,
            c3.clone(),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(!third.conversation_created);
    assert_eq!(third.conversation.unwrap().consent_uuid, Some(c3.uuid));

    // A campaign send never opens a conversation; the evidence is stored with the message.
    let c4 = consent(&f, tpl.id, ConsentContext::Campaign);
    let campaign = s
        .record_consented_outbound(
            outbound(&f, "+4917612345678", ConversationPolicy::ContinueIfOpen, 40),
            Some("Bob".into()),
            c4.clone(),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(campaign.contact_created);
    assert_eq!(campaign.conversation, None);
    assert_eq!(campaign.message.consent_uuid, Some(c4.uuid));
    assert_eq!(
        s.find_consent(f.org, c4.uuid)
            .await
            .unwrap()
            .unwrap()
            .context,
        "campaign"
    );
    // An existing contact by id.
    let by_contact = s
        .record_consented_outbound(
            NewOutbound {
                recipient: RecipientRef::Contact(first.contact.id),
                ..outbound(&f, "+4915123456789", ConversationPolicy::ContinueIfOpen, 50)
            },
            None,
            consent(&f, tpl.id, ConsentContext::Campaign),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert_eq!(by_contact.conversation.unwrap().uuid, conv.uuid);
    // Effects were written with each send.
    assert_eq!(s.list_outbox_events(f.org, 50).await.unwrap().len(), 5);
}

async fn a_lost_claim_writes_no_evidence(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let tpl = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    let claim = |owner: Uuid, now: i64| IdempotencyClaim {
        api_key_id: f.key,
        key: "k".into(),
        method: "POST".into(),
        path: "/api/v1/integrations/messages/template".into(),
        fingerprint: b"fp".to_vec(),
        owner,
        now: t(now),
        lease: Duration::from_millis(100),
        retention: Duration::from_millis(10_000),
    };
    let ClaimOutcome::Claimed { token: first, .. } =
        s.claim_idempotency(claim(Uuid::new_v4(), 0)).await.unwrap()
    else {
        panic!("claimed")
    };
    let ClaimOutcome::Claimed { token: second, .. } = s
        .claim_idempotency(claim(Uuid::new_v4(), 500))
        .await
        .unwrap()
    else {
        panic!("taken over")
    };
    let c = consent(&f, tpl.id, ConsentContext::Initiation);
    let lost = s
        .record_consented_outbound(
            outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, 1),
            Some("Ada".into()),
            c.clone(),
            Some(ClaimCompletion {
                claim: first.into(),
                status: 201,
                request_id: None,
                extra: None,
            }),
            Box::new(sent_event),
        )
        .await;
    assert!(matches!(lost, Err(StoreError::ClaimLost)), "{lost:?}");
    assert_eq!(s.find_consent(f.org, c.uuid).await.unwrap(), None);
    assert!(
        s.find_contact_by_phone(f.org, &phone("+4915123456789"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(s.list_outbox_events(f.org, 10).await.unwrap().is_empty());
    let ok = s
        .record_consented_outbound(
            outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, 2),
            Some("Ada".into()),
            c.clone(),
            Some(ClaimCompletion {
                claim: second.into(),
                status: 201,
                request_id: None,
                extra: Some(serde_json::json!({"consent": {"uuid": "c"}})),
            }),
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(s.find_consent(f.org, c.uuid).await.unwrap().is_some());
    match s
        .claim_idempotency(claim(Uuid::new_v4(), 600))
        .await
        .unwrap()
    {
        // The record as written, and what the answer shows beside it.
        ClaimOutcome::Replay(Stored::Send(kept)) => {
            assert_eq!(kept.recorded, ok);
            assert_eq!(
                kept.extra,
                Some(serde_json::json!({"consent": {"uuid": "c"}}))
            );
        }
        other => panic!("{other:?}"),
    }
}

async fn consents_are_append_only(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let tpl = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    let c = consent(&f, tpl.id, ConsentContext::Initiation);
    s.record_consented_outbound(
        outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, 1),
        None,
        c.clone(),
        None,
        no_effects(),
    )
    .await
    .unwrap();
    for sql in [
        "UPDATE consents SET reference = 'tampered'",
        "UPDATE consents SET purpose = 'marketing'",
        "DELETE FROM consents",
    ] {
        let err = ts
            .raw_execute(sql)
            .await
            .expect_err("the database refuses to change the evidence");
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    if s.backend() == "postgres" {
        let err = ts
            .raw_execute("TRUNCATE consents CASCADE")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }
    let kept = s.find_consent(f.org, c.uuid).await.unwrap().unwrap();
    assert_eq!(kept.reference, "form-123");
    assert_eq!(kept.purpose, ConsentPurpose::Utility);
}

async fn concurrent_initiations_share_one_contact_and_conversation(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let tpl = s
        .create_template(
            new_template(f.org, f.channel, "order_update", "en_US"),
            no_effects(),
        )
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = s.clone();
        let o = outbound(&f, "+4915123456789", ConversationPolicy::OpenOrContinue, i);
        let c = consent(&f, tpl.id, ConsentContext::Initiation);
        tasks.push(tokio::spawn(async move {
            s.record_consented_outbound(o, Some(format!("Name {i}")), c, None, no_effects())
                .await
        }));
    }
    let mut created = (0, 0);
    let mut contacts = std::collections::HashSet::new();
    let mut conversations = std::collections::HashSet::new();
    let mut consents = std::collections::HashSet::new();
    for task in tasks {
        let r = task
            .await
            .unwrap()
            .expect("no initiation fails under concurrency");
        created.0 += usize::from(r.contact_created);
        created.1 += usize::from(r.conversation_created);
        contacts.insert(r.contact.id);
        let c = r.conversation.unwrap();
        conversations.insert((c.id, c.consent_uuid));
        consents.insert(r.message.consent_uuid.unwrap());
    }
    assert_eq!(created, (1, 1));
    assert_eq!(contacts.len(), 1);
    assert_eq!(
        conversations.len(),
        1,
        "one conversation, one initiating consent"
    );
    assert_eq!(consents.len(), 16, "each message keeps its own evidence");
}
