//! Conformance of the messaging and idempotency stores, on both backends.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::support::*;
use switchboard_domain::api_key;
use switchboard_domain::channel::ChannelIdentity;
use switchboard_domain::contact::ConversationStatus;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::message::timeline::StepKind;
use switchboard_domain::message::{Direction, MessageStatus, MessageType};
use switchboard_domain::phone::Phone;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};
use switchboard_store::testing::TestStore;
use switchboard_store::webhooks::{DeliveryQuery, NewEndpoint};
use switchboard_store::*;

conformance!(
    contacts_are_unique_per_organization,
    the_send_queue_claims_leases_and_finishes_batches,
    outbound_messages_open_or_continue_conversations,
    completion_is_conditional_on_owning_the_claim,
    a_key_written_with_its_record_is_replayed_and_a_taken_key_writes_nothing,
    provider_batches_deduplicate_and_move_statuses_forward,
    history_filters_and_cursor,
    idempotency_claims,
    idempotency_purge_is_batched,
    concurrent_sends_share_one_contact_and_conversation,
    concurrent_claims_have_one_winner,
    grouped_records_commit_together_and_fail_alone,
    a_reused_provider_id_does_not_lose_the_sent_message,
    a_message_journey_is_kept_and_read_oldest_first,
    a_send_in_flight_keeps_what_the_provider_reports,
    a_write_probe_commits,
    edits_deletions_and_provider_id_lookups,
    a_committer_outlives_its_connection_and_its_failed_records,
);

fn phone(s: &str) -> Phone {
    Phone::parse(s).unwrap()
}

struct Fixture {
    org: i64,
    channel: i64,
    /// The channel as a send names it.
    identity: ChannelIdentity,
    key: i64,
}

async fn fixture(s: &SharedStore) -> Fixture {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let channel = s
        .create_channel(
            new_channel(org.id, Some("main"), "Main", true),
            no_effects(),
        )
        .await
        .unwrap();
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
        key: key.id,
    }
}

fn outbound(
    f: &Fixture,
    recipient: RecipientRef,
    policy: ConversationPolicy,
    at: i64,
) -> NewOutbound {
    NewOutbound {
        org_id: f.org,
        channel: f.identity.clone(),
        api_key_id: Some(f.key),
        recipient,
        conversation: policy,
        uuid: Uuid::now_v7(),
        message_type: MessageType::Text,
        status: MessageStatus::Sent,
        content: json!({"body": "hello"}),
        provider_message_id: Some(format!("p-{}", Uuid::new_v4())),
        error: None,
        now: t(at),
        steps: Vec::new(),
        queue: None,
        context: None,
    }
}

fn sent_event(r: &RecordedOutbound) -> Effects {
    Effects::none().event(NewEvent::new(
        r.message.org_id,
        "message.sent",
        json!({"message_id": r.message.id}),
        Some(r.message.channel.clone()),
        r.message.created_at,
    ))
}

async fn contacts_are_unique_per_organization(s: SharedStore) {
    let f = fixture(&s).await;
    let other = s.create_org("Other", t(0)).await.unwrap();
    let new = |org: i64, p: &str| NewContact {
        org_id: org,
        uuid: Uuid::now_v7(),
        phone: Some(phone(p)),
        name: Some("Ada".into()),
        telegram_chat_id: None,
        now: t(1),
    };
    let a = s
        .create_contact(new(f.org, "+4915123456789"), no_effects())
        .await
        .unwrap();
    assert_eq!(a.phone.as_ref().unwrap().as_str(), "+4915123456789");
    assert_eq!(a.name.as_deref(), Some("Ada"));
    assert_eq!(a.created_at, t(1));
    let dup = s
        .create_contact(new(f.org, "+49 151 23456789"), no_effects())
        .await;
    assert!(
        matches!(dup, Err(StoreError::UniqueViolation(_))),
        "{dup:?}"
    );
    // The same phone in another organization is another contact.
    let b = s
        .create_contact(new(other.id, "+4915123456789"), no_effects())
        .await
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(
        s.find_contact(f.org, a.uuid).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(s.find_contact(other.id, a.uuid).await.unwrap(), None);
    assert_eq!(
        s.find_contact_by_phone(f.org, &phone("+4915123456789"))
            .await
            .unwrap()
            .map(|c| c.id),
        Some(a.id)
    );
    assert_eq!(
        s.find_contact_by_phone(f.org, &phone("+14155552671"))
            .await
            .unwrap(),
        None
    );
    // Contacts without phone (Telegram) do not collide with each other.
    for chat in ["100", "200"] {
        s.create_contact(
            NewContact {
                org_id: f.org,
                uuid: Uuid::now_v7(),
                phone: None,
                name: None,
                telegram_chat_id: Some(chat.into()),
                now: t(2),
            },
            no_effects(),
        )
        .await
        .unwrap();
    }
    // The effects of a contact are written with it.
    s.create_contact(
        new(f.org, "+14155552671"),
        Box::new(|c| {
            Effects::none().event(NewEvent::new(
                c.org_id,
                "contact.created",
                json!({"contact_uuid": c.uuid}),
                None,
                t(3),
            ))
        }),
    )
    .await
    .unwrap();
    let events = s.list_outbox_events(f.org, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "contact.created");
}

async fn outbound_messages_open_or_continue_conversations(s: SharedStore) {
    let f = fixture(&s).await;
    let p = phone("+4915123456789");
    // ContinueIfOpen without a conversation: the contact is created, no conversation.
    let first = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(p.clone()),
                ConversationPolicy::ContinueIfOpen,
                1,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(first.contact_created);
    assert!(first.conversation.is_none() && !first.conversation_created);
    assert_eq!(first.message.conversation_uuid, None);
    assert_eq!(first.message.contact_uuid, first.contact.uuid);
    assert_eq!(first.message.direction, Direction::Outbound);
    assert_eq!(first.message.status, MessageStatus::Sent);
    assert_eq!(first.message.content, json!({"body": "hello"}));
    assert_eq!(first.message.api_key_id, Some(f.key));
    assert_eq!(first.message.channel.slug, "main");
    // OpenOrContinue opens one ...
    let second = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(p.clone()),
                ConversationPolicy::OpenOrContinue,
                2,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(!second.contact_created);
    assert_eq!(second.contact.id, first.contact.id);
    let conv = second.conversation.clone().unwrap();
    assert!(second.conversation_created);
    assert_eq!(conv.status, ConversationStatus::Open);
    assert_eq!(conv.contact_uuid, first.contact.uuid);
    assert_eq!(conv.last_inbound_at, None);
    assert_eq!(second.message.conversation_uuid, Some(conv.uuid));
    // ... and continues it afterwards, by contact id too.
    let third = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Contact(first.contact.id),
                ConversationPolicy::ContinueIfOpen,
                3,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert_eq!(third.conversation.as_ref().map(|c| c.id), Some(conv.id));
    assert!(!third.conversation_created);
    // A contact by id is read with its open conversation in one statement: both as a later
    // read finds them.
    assert_eq!(
        third.conversation,
        s.find_conversation(f.org, conv.uuid).await.unwrap()
    );
    assert_eq!(
        Some(third.contact.clone()),
        s.find_contact(f.org, first.contact.uuid).await.unwrap()
    );
    assert_eq!(
        s.find_open_conversation(first.contact.id, f.channel)
            .await
            .unwrap()
            .map(|c| c.id),
        Some(conv.id)
    );
    assert_eq!(
        s.find_conversation(f.org, conv.uuid)
            .await
            .unwrap()
            .map(|c| c.id),
        Some(conv.id)
    );
    assert_eq!(
        s.find_conversation(f.org + 1, conv.uuid).await.unwrap(),
        None
    );
    assert_eq!(
        s.get_message(third.message.id).await.unwrap(),
        third.message
    );
    assert_eq!(s.list_outbox_events(f.org, 10).await.unwrap().len(), 3);
    // A contact by id with no open conversation on the channel: OpenOrContinue opens one.
    let lone = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(phone("+4915123456780")),
                ConversationPolicy::ContinueIfOpen,
                4,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(lone.contact_created && lone.conversation.is_none());
    let opened = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Contact(lone.contact.id),
                ConversationPolicy::OpenOrContinue,
                5,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    assert!(opened.conversation_created && !opened.contact_created);
    let opened_conv = opened.conversation.clone().unwrap();
    assert_ne!(opened_conv.id, conv.id);
    assert_eq!(
        Some(opened_conv.clone()),
        s.find_conversation(f.org, opened_conv.uuid).await.unwrap()
    );
    assert_eq!(opened.message.conversation_uuid, Some(opened_conv.uuid));
    // Another organization's contact is not a recipient.
    let other = fixture(&s).await;
    let wrong = s
        .record_outbound(
            outbound(
                &other,
                RecipientRef::Contact(first.contact.id),
                ConversationPolicy::ContinueIfOpen,
                4,
            ),
            None,
            Box::new(sent_event),
        )
        .await;
    assert!(matches!(wrong, Err(StoreError::NotFound)), "{wrong:?}");
    assert_eq!(s.list_outbox_events(other.org, 10).await.unwrap().len(), 0);
}

fn claim(f: &Fixture, key: &str, fingerprint: &[u8], now: i64) -> IdempotencyClaim {
    IdempotencyClaim {
        api_key_id: f.key,
        key: key.into(),
        method: "POST".into(),
        path: "/api/v1/integrations/messages".into(),
        fingerprint: fingerprint.to_vec(),
        owner: Uuid::new_v4(),
        now: t(now),
        lease: Duration::from_millis(100),
        retention: Duration::from_millis(10_000),
    }
}

fn claimed(o: ClaimOutcome) -> ClaimToken {
    match o {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn completion_is_conditional_on_owning_the_claim(s: SharedStore) {
    let f = fixture(&s).await;
    let first = claimed(
        s.claim_idempotency(claim(&f, "k1", b"fp", 0))
            .await
            .unwrap(),
    );
    // The lease runs out and another request takes the key over.
    let second = match s
        .claim_idempotency(claim(&f, "k1", b"fp", 500))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token, taken_over } => {
            assert!(taken_over);
            token
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(first.record_id, second.record_id);
    // The first claimant's result is refused and writes nothing.
    let lost = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(phone("+4915123456789")),
                ConversationPolicy::OpenOrContinue,
                1,
            ),
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
    assert!(
        s.list_messages(f.org, &MessageFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.find_contact_by_phone(f.org, &phone("+4915123456789"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(s.list_outbox_events(f.org, 10).await.unwrap().is_empty());
    // The owner's result is written with the response, in one transaction.
    let ok = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(phone("+4915123456789")),
                ConversationPolicy::OpenOrContinue,
                2,
            ),
            Some(ClaimCompletion {
                claim: second.into(),
                status: 201,
                request_id: Some("req-2".into()),
                extra: None,
            }),
            Box::new(sent_event),
        )
        .await
        .unwrap();
    match s
        .claim_idempotency(claim(&f, "k1", b"fp", 600))
        .await
        .unwrap()
    {
        // The claim keeps the record as written, for the API to render.
        ClaimOutcome::Replay(Stored::Send(r)) => {
            assert_eq!((r.status, r.request_id.as_deref()), (201, Some("req-2")));
            assert_eq!(r.recorded, ok);
        }
        other => panic!("{other:?}"),
    }
    // A completed claim cannot be completed or released again.
    assert!(
        !s.complete_idempotency(
            second,
            StoredResponse {
                status: 200,
                body: vec![]
            }
        )
        .await
        .unwrap()
    );
    s.release_idempotency(second).await.unwrap();
    assert!(matches!(
        s.idempotency_state(f.key, "k1", t(700)).await.unwrap(),
        IdempotencyState::Completed { .. }
    ));
}

/// A key written with its send's record (no claim before it: `ClaimRef::New`).
fn new_key(f: &Fixture, key: &str, at: i64) -> ClaimRef {
    ClaimRef::New(NewKey {
        api_key_id: f.key,
        key: key.into(),
        method: "POST".into(),
        path: "/api/v1/integrations/messages".into(),
        fingerprint: b"fp".to_vec(),
        now: t(at),
        retention: Duration::from_millis(10_000),
    })
}

fn completing(claim: ClaimRef, request_id: &str) -> Option<ClaimCompletion> {
    Some(ClaimCompletion {
        claim,
        status: 201,
        request_id: Some(request_id.into()),
        extra: None,
    })
}

async fn a_key_written_with_its_record_is_replayed_and_a_taken_key_writes_nothing(s: SharedStore) {
    let f = fixture(&s).await;
    let to = |p: &str| RecipientRef::Phone(phone(p));
    let open = ConversationPolicy::OpenOrContinue;
    let first = s
        .record_outbound(
            outbound(&f, to("+4915123456780"), open, 1),
            completing(new_key(&f, "k1", 1), "req-1"),
            Box::new(sent_event),
        )
        .await
        .unwrap();
    // The key is completed with the record, as a claim completed in the record's transaction.
    let replay = |key: &str, at: i64| s.claim_idempotency(claim(&f, key, b"fp", at));
    match replay("k1", 2).await.unwrap() {
        ClaimOutcome::Replay(Stored::Send(r)) => {
            assert_eq!((r.status, r.request_id.as_deref()), (201, Some("req-1")));
            assert_eq!(r.recorded, first);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.claim_idempotency(claim(&f, "k1", b"other", 2))
            .await
            .unwrap(),
        ClaimOutcome::Conflict
    ));
    // A key that exists (completed, or claimed by a request in progress): the record fails and
    // writes nothing.
    let in_progress = claimed(replay("k2", 3).await.unwrap());
    for key in ["k1", "k2"] {
        let lost = s
            .record_outbound(
                outbound(&f, to("+4915123456781"), open, 4),
                completing(new_key(&f, key, 4), "req-lost"),
                Box::new(sent_event),
            )
            .await;
        assert!(
            matches!(lost, Err(StoreError::ClaimLost)),
            "{key}: {lost:?}"
        );
    }
    assert!(
        s.find_contact_by_phone(f.org, &phone("+4915123456781"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.list_outbox_events(f.org, 10).await.unwrap().len(), 1);
    assert!(matches!(
        s.idempotency_state(f.key, "k2", t(5)).await.unwrap(),
        IdempotencyState::InProgress { .. }
    ));
    s.release_idempotency(in_progress).await.unwrap();

    // By group commit: 24 concurrent records of 20 new keys (4 asked twice): one record per key,
    // the others lose theirs and write nothing.
    let effects: GroupEffects = std::sync::Arc::new(sent_event);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let record = GroupedOutbound {
            new: outbound(&f, to(&format!("+491512345679{}", i % 4)), open, 10),
            completion: completing(
                new_key(&f, &format!("g-{}", i % 20), 10),
                &format!("req-{i}"),
            ),
            effects: effects.clone(),
        };
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            (i % 20, s.record_outbound_grouped(record).await)
        }));
    }
    let mut written: Vec<Option<RecordedOutbound>> = vec![None; 20];
    let mut lost = 0;
    for task in tasks {
        match task.await.unwrap() {
            (k, Ok(r)) => {
                assert!(written[k].is_none(), "g-{k} written twice");
                written[k] = Some(r);
            }
            (_, Err(StoreError::ClaimLost)) => lost += 1,
            (_, Err(e)) => panic!("{e}"),
        }
    }
    assert_eq!(lost, 4);
    for (k, r) in written.into_iter().enumerate() {
        let r = r.unwrap_or_else(|| panic!("g-{k} not written"));
        match replay(&format!("g-{k}"), 11).await.unwrap() {
            ClaimOutcome::Replay(Stored::Send(kept)) => assert_eq!(kept.recorded, r),
            other => panic!("g-{k}: {other:?}"),
        }
    }
    let messages = s
        .list_messages(f.org, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(messages.len(), 21);
    assert_eq!(s.list_outbox_events(f.org, 100).await.unwrap().len(), 21);
}

fn inbound(sender: InboundSender, pid: &str, sent_at: i64) -> NewInbound {
    NewInbound {
        sender,
        profile_name: Some("Ada".into()),
        uuid: Uuid::now_v7(),
        message_type: MessageType::Text,
        content: json!({"body": "hi"}),
        provider_message_id: pid.into(),
        sent_at: t(sent_at),
        context: Default::default(),
    }
}

fn batch_effects(change: BatchChange<'_>) -> Effects {
    match change {
        BatchChange::Inbound(r) => Effects::none().event(NewEvent::new(
            r.message.org_id,
            "message.received",
            json!({"message_id": r.message.id}),
            None,
            r.message.updated_at,
        )),
        BatchChange::Status { message, previous } => Effects::none().event(NewEvent::new(
            message.org_id,
            "message.status.update",
            json!({"message_id": message.id, "previous": previous, "status": message.status}),
            None,
            message.updated_at,
        )),
        BatchChange::Changed { message, change } => Effects::none().event(NewEvent::new(
            message.org_id,
            "message.status.update",
            json!({"message_id": message.id, "change": change}),
            None,
            message.updated_at,
        )),
    }
}

async fn provider_batches_deduplicate_and_move_statuses_forward(s: SharedStore) {
    let f = fixture(&s).await;
    let from = InboundSender::Phone(phone("+4915123456789"));
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![
                    inbound(from.clone(), "wamid.1", 100),
                    inbound(from.clone(), "wamid.1", 100),
                    // An older message does not move the window back; a future one is cut to now.
                    inbound(from.clone(), "wamid.0", 50),
                    inbound(
                        InboundSender::Telegram {
                            chat_id: "42".into(),
                        },
                        "42:7",
                        5_000,
                    ),
                ],
                statuses: vec![],
                now: t(1_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    let stored: Vec<&RecordedOutbound> = out
        .messages
        .iter()
        .filter_map(|o| match o {
            InboundOutcome::Stored(r) => Some(&**r),
            InboundOutcome::Duplicate { .. } => None,
        })
        .collect();
    assert_eq!(stored.len(), 3, "{out:?}");
    assert_eq!(out.messages.len(), 4);
    let phone_msgs: Vec<&&RecordedOutbound> = stored
        .iter()
        .filter(|r| r.contact.phone.is_some())
        .collect();
    assert!(phone_msgs[0].contact_created && phone_msgs[0].conversation_created);
    assert!(!phone_msgs[1].contact_created && !phone_msgs[1].conversation_created);
    assert_eq!(phone_msgs[0].contact.name.as_deref(), Some("Ada"));
    let conv = phone_msgs[1].conversation.clone().unwrap();
    assert_eq!(conv.last_inbound_at, Some(t(100)));
    let telegram = stored.iter().find(|r| r.contact.phone.is_none()).unwrap();
    assert_eq!(telegram.contact.telegram_chat_id.as_deref(), Some("42"));
    assert_eq!(
        telegram.message.created_at,
        t(1_000),
        "never later than now"
    );
    assert_eq!(
        telegram.conversation.as_ref().unwrap().last_inbound_at,
        Some(t(1_000))
    );
    let m = &phone_msgs[0].message;
    assert_eq!(
        (m.direction, m.status),
        (Direction::Inbound, MessageStatus::Received)
    );
    assert_eq!(m.provider_message_id.as_deref(), Some("wamid.1"));
    assert_eq!(m.created_at, t(100));
    // A second delivery of the same webhook changes nothing.
    let again = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![inbound(from.clone(), "wamid.1", 100)],
                statuses: vec![],
                now: t(2_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    assert!(matches!(
        again.messages[0],
        InboundOutcome::Duplicate { .. }
    ));
    assert_eq!(s.list_outbox_events(f.org, 100).await.unwrap().len(), 3);

    // Status updates: forward only, stale and duplicate ones ignored.
    let sent = s
        .record_outbound(
            NewOutbound {
                provider_message_id: Some("wamid.out".into()),
                ..outbound(
                    &f,
                    RecipientRef::Contact(phone_msgs[0].contact.id),
                    ConversationPolicy::ContinueIfOpen,
                    3_000,
                )
            },
            None,
            no_effects(),
        )
        .await
        .unwrap();
    let status = |pid: &str, st: MessageStatus| NewStatus {
        message: MessageRef::Provider(pid.into()),
        status: st,
        error: (st == MessageStatus::Failed).then(|| json!({"code": 131026})),
        pricing: None,
        provider_conversation: None,
    };
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![],
                statuses: vec![
                    status("wamid.out", MessageStatus::Delivered),
                    status("wamid.out", MessageStatus::Delivered),
                    status("wamid.out", MessageStatus::Sent),
                    status("wamid.out", MessageStatus::Read),
                    status("wamid.out", MessageStatus::Failed),
                    status("wamid.unknown", MessageStatus::Read),
                    status("wamid.1", MessageStatus::Read),
                ],
                now: t(4_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = out
        .statuses
        .iter()
        .map(|o| match o {
            StatusOutcome::Applied { .. } => "applied",
            StatusOutcome::Ignored { .. } => "ignored",
            StatusOutcome::NotFound => "not_found",
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "applied",
            "ignored",
            "ignored",
            "applied",
            "ignored",
            "not_found",
            "ignored"
        ]
    );
    if let StatusOutcome::Applied { message, previous } = &out.statuses[3] {
        assert_eq!(
            (message.status, *previous),
            (MessageStatus::Read, MessageStatus::Delivered)
        );
        assert_eq!(message.updated_at, t(4_000));
    }
    assert_eq!(
        s.get_message(sent.message.id).await.unwrap().status,
        MessageStatus::Read
    );
    // Failed, with the provider's error, from sent; by message id.
    let second = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Contact(phone_msgs[0].contact.id),
                ConversationPolicy::ContinueIfOpen,
                5_000,
            ),
            None,
            no_effects(),
        )
        .await
        .unwrap();
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![],
                statuses: vec![
                    NewStatus {
                        message: MessageRef::Id(second.message.id),
                        status: MessageStatus::Failed,
                        error: Some(json!({"code": "x"})),
                        pricing: None,
                        provider_conversation: None,
                    },
                    NewStatus {
                        message: MessageRef::Id(second.message.id),
                        status: MessageStatus::Delivered,
                        error: None,
                        pricing: None,
                        provider_conversation: None,
                    },
                ],
                now: t(6_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    assert!(matches!(out.statuses[0], StatusOutcome::Applied { .. }));
    assert!(matches!(out.statuses[1], StatusOutcome::Ignored { .. }));
    let failed = s.get_message(second.message.id).await.unwrap();
    assert_eq!(failed.status, MessageStatus::Failed);
    assert_eq!(failed.error, Some(json!({"code": "x"})));
    // A message of another channel is not found through this one.
    let other_channel = s
        .create_channel(
            new_channel(f.org, Some("other"), "Other", false),
            no_effects(),
        )
        .await
        .unwrap();
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: other_channel.id,
                messages: vec![],
                statuses: vec![
                    NewStatus {
                        message: MessageRef::Id(sent.message.id),
                        status: MessageStatus::Read,
                        error: None,
                        pricing: None,
                        provider_conversation: None,
                    },
                    status("wamid.out", MessageStatus::Read),
                ],
                now: t(7_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    assert!(
        out.statuses
            .iter()
            .all(|o| matches!(o, StatusOutcome::NotFound))
    );
}

async fn history_filters_and_cursor(s: SharedStore) {
    let f = fixture(&s).await;
    let second_channel = s
        .create_channel(new_channel(f.org, Some("two"), "Two", false), no_effects())
        .await
        .unwrap();
    let a = phone("+4915123456789");
    let b = phone("+14155552671");
    let mut ids = Vec::new();
    for i in 0..6i64 {
        let mut o = outbound(
            &f,
            RecipientRef::Phone(if i % 2 == 0 { a.clone() } else { b.clone() }),
            ConversationPolicy::OpenOrContinue,
            // Two messages share each millisecond: the id breaks the tie.
            10 + i / 2,
        );
        if i == 5 {
            o.channel = second_channel.identity();
            o.status = MessageStatus::Failed;
        }
        ids.push(s.record_outbound(o, None, no_effects()).await.unwrap());
    }
    s.record_provider_batch(
        ProviderBatch {
            org_id: f.org,
            channel_id: f.channel,
            messages: vec![inbound(InboundSender::Phone(a.clone()), "in.1", 20)],
            statuses: vec![],
            now: t(20),
        },
        no_batch_effects(),
    )
    .await
    .unwrap();
    let all = |filter: MessageFilter| {
        let s = s.clone();
        async move {
            let mut out = Vec::new();
            let mut cursor = None;
            loop {
                let page = s.list_messages(f.org, &filter, cursor, 2).await.unwrap();
                if page.is_empty() {
                    return out;
                }
                cursor = page.last().map(|m: &MessageRecord| HistoryCursor {
                    created_at: m.created_at,
                    id: m.id,
                });
                out.extend(page.into_iter().map(|m| m.id));
            }
        }
    };
    let everything = all(MessageFilter::default()).await;
    assert_eq!(everything.len(), 7);
    let mut sorted = everything.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(everything, sorted, "newest first, ties by id");
    let contact_a = ids[0].contact.id;
    assert_eq!(
        all(MessageFilter {
            contact_id: Some(contact_a),
            ..Default::default()
        })
        .await
        .len(),
        4
    );
    assert_eq!(
        all(MessageFilter {
            channel_id: Some(second_channel.id),
            ..Default::default()
        })
        .await,
        vec![ids[5].message.id]
    );
    assert_eq!(
        all(MessageFilter {
            conversation_id: ids[0].conversation.as_ref().map(|c| c.id),
            ..Default::default()
        })
        .await
        .len(),
        4
    );
    assert_eq!(
        all(MessageFilter {
            direction: Some(Direction::Inbound),
            ..Default::default()
        })
        .await
        .len(),
        1
    );
    assert_eq!(
        all(MessageFilter {
            status: Some(MessageStatus::Failed),
            ..Default::default()
        })
        .await,
        vec![ids[5].message.id]
    );
    assert_eq!(
        all(MessageFilter {
            since: Some(t(11)),
            until: Some(t(12)),
            ..Default::default()
        })
        .await,
        vec![ids[3].message.id, ids[2].message.id],
        "since inclusive, until exclusive"
    );
    // Other organizations see nothing.
    assert!(
        s.list_messages(f.org + 100, &MessageFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let _: &ChannelIdentity = &ids[0].message.channel;
}

fn no_batch_effects() -> BatchEffectsFn<'static> {
    Box::new(|_| Effects::none())
}

async fn idempotency_claims(s: SharedStore) {
    let f = fixture(&s).await;
    let token = claimed(
        s.claim_idempotency(claim(&f, "a", b"fp1", 0))
            .await
            .unwrap(),
    );
    assert_eq!(
        s.claim_idempotency(claim(&f, "a", b"fp1", 50))
            .await
            .unwrap(),
        ClaimOutcome::InProgress
    );
    assert_eq!(
        s.claim_idempotency(claim(&f, "a", b"fp2", 50))
            .await
            .unwrap(),
        ClaimOutcome::Conflict
    );
    assert!(matches!(
        s.idempotency_state(f.key, "a", t(50)).await.unwrap(),
        IdempotencyState::InProgress { .. }
    ));
    assert!(
        s.complete_idempotency(
            token,
            StoredResponse {
                status: 422,
                body: b"{\"e\":1}".to_vec()
            }
        )
        .await
        .unwrap()
    );
    assert_eq!(
        s.claim_idempotency(claim(&f, "a", b"fp1", 60))
            .await
            .unwrap(),
        ClaimOutcome::Replay(Stored::Response(StoredResponse {
            status: 422,
            body: b"{\"e\":1}".to_vec()
        }))
    );
    assert_eq!(
        s.claim_idempotency(claim(&f, "a", b"fp2", 60))
            .await
            .unwrap(),
        ClaimOutcome::Conflict
    );
    // Keys are per credential.
    let other_key = {
        let g = api_key::generate();
        s.create_api_key(
            NewApiKey {
                org_id: f.org,
                name: "other".into(),
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
        .unwrap()
    };
    let mut c = claim(&f, "a", b"fp2", 60);
    c.api_key_id = other_key.id;
    claimed(s.claim_idempotency(c).await.unwrap());
    // A released claim can be claimed again at once.
    let b = claimed(s.claim_idempotency(claim(&f, "b", b"fp", 0)).await.unwrap());
    s.release_idempotency(b).await.unwrap();
    assert_eq!(
        s.idempotency_state(f.key, "b", t(1)).await.unwrap(),
        IdempotencyState::Absent
    );
    claimed(s.claim_idempotency(claim(&f, "b", b"fp", 1)).await.unwrap());
    // An expired record is as good as absent, whatever it held.
    assert_eq!(
        s.idempotency_state(f.key, "a", t(10_000)).await.unwrap(),
        IdempotencyState::Absent
    );
    match s
        .claim_idempotency(claim(&f, "a", b"fp9", 10_000))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { taken_over, .. } => assert!(!taken_over),
        other => panic!("{other:?}"),
    }
}

async fn idempotency_purge_is_batched(s: SharedStore) {
    let f = fixture(&s).await;
    for i in 0..7 {
        let mut c = claim(&f, &format!("k{i}"), b"fp", 0);
        c.retention = Duration::from_millis(if i < 5 { 10 } else { 1_000_000 });
        claimed(s.claim_idempotency(c).await.unwrap());
    }
    assert_eq!(s.purge_idempotency(t(100), 3).await.unwrap(), 3);
    assert_eq!(s.purge_idempotency(t(100), 3).await.unwrap(), 2);
    assert_eq!(s.purge_idempotency(t(100), 3).await.unwrap(), 0);
    assert!(matches!(
        s.idempotency_state(f.key, "k6", t(100)).await.unwrap(),
        IdempotencyState::InProgress { .. }
    ));
}

async fn concurrent_sends_share_one_contact_and_conversation(s: SharedStore) {
    let f = fixture(&s).await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let s = s.clone();
        let o = outbound(
            &f,
            RecipientRef::Phone(phone("+4915123456789")),
            ConversationPolicy::OpenOrContinue,
            i,
        );
        tasks.push(tokio::spawn(async move {
            s.record_outbound(o, None, no_effects()).await
        }));
    }
    let mut created = (0, 0);
    let mut conversations = std::collections::HashSet::new();
    for task in tasks {
        let r = task
            .await
            .unwrap()
            .expect("no send fails under concurrency");
        created.0 += usize::from(r.contact_created);
        created.1 += usize::from(r.conversation_created);
        conversations.insert(r.conversation.unwrap().id);
    }
    assert_eq!(created, (1, 1));
    assert_eq!(conversations.len(), 1);
    // Concurrent inbound deliveries of one provider message store it once.
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let s = s.clone();
        let b = ProviderBatch {
            org_id: f.org,
            channel_id: f.channel,
            messages: vec![inbound(
                InboundSender::Phone(phone("+14155552671")),
                "wamid.same",
                5,
            )],
            statuses: vec![],
            now: t(10),
        };
        tasks.push(tokio::spawn(async move {
            s.record_provider_batch(b, no_batch_effects()).await
        }));
    }
    let mut stored = 0;
    for task in tasks {
        let out = task
            .await
            .unwrap()
            .expect("no delivery fails under concurrency");
        stored += out
            .messages
            .iter()
            .filter(|m| matches!(m, InboundOutcome::Stored(_)))
            .count();
    }
    assert_eq!(stored, 1);
}

async fn concurrent_claims_have_one_winner(s: SharedStore) {
    let f = fixture(&s).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let s = s.clone();
        let mut c = claim(&f, "same", b"fp", 0);
        c.lease = Duration::from_secs(60);
        tasks.push(tokio::spawn(async move { s.claim_idempotency(c).await }));
    }
    let mut winners = 0;
    for task in tasks {
        match task
            .await
            .unwrap()
            .expect("no claim fails under concurrency")
        {
            ClaimOutcome::Claimed { .. } => winners += 1,
            ClaimOutcome::InProgress => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(winners, 1);
}

/// Sends recorded at the same time by group commit: many records in one transaction, each
/// answered with its own record; the claims of their idempotency keys inserted together (one
/// winner per key); a record whose claim was lost fails alone and writes nothing, the others
/// of its group are written; contacts and conversations are shared as with one transaction per
/// record. The group's events fan out as one event at a time would: one delivery per event to
/// an unordered endpoint, and on an ordered endpoint one chain per contact numbered from 1 with
/// only its first delivery due.
async fn grouped_records_commit_together_and_fail_alone(s: SharedStore) {
    observe::install(Box::new(GroupSizes));
    let f = fixture(&s).await;
    let endpoint = |url: &str, ordering: EndpointOrdering| NewEndpoint {
        uuid: Uuid::now_v7(),
        org_id: f.org,
        name: "receiver".into(),
        url: url.into(),
        events: vec!["message.sent".into()],
        headers: Default::default(),
        sealed_secret: vec![1, 2, 3],
        status: EndpointStatus::Active,
        now: t(0),
        legacy: false,
        ordering,
        controls: Default::default(),
    };
    let unordered = s
        .create_endpoint(
            endpoint("https://a.example/hook", EndpointOrdering::None),
            no_effects(),
        )
        .await
        .unwrap();
    let ordered = s
        .create_endpoint(
            endpoint("https://b.example/hook", EndpointOrdering::PerContact),
            no_effects(),
        )
        .await
        .unwrap();
    // 48 concurrent claims of 40 keys (8 asked twice): one winner per key.
    let mut tasks = Vec::new();
    for i in 0..48 {
        let s = s.clone();
        let mut c = claim(&f, &format!("key-{}", i % 40), b"fp", 0);
        c.lease = Duration::from_secs(60);
        tasks.push(tokio::spawn(async move {
            (i % 40, s.claim_idempotency(c).await)
        }));
    }
    let mut tokens: Vec<Option<ClaimToken>> = vec![None; 40];
    let mut in_progress = 0;
    for task in tasks {
        match task.await.unwrap() {
            (k, Ok(ClaimOutcome::Claimed { token, .. })) => {
                assert!(tokens[k].is_none(), "key-{k} claimed twice");
                tokens[k] = Some(token);
            }
            (_, Ok(ClaimOutcome::InProgress)) => in_progress += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(in_progress, 8);
    let mut tokens: Vec<ClaimToken> = tokens.into_iter().map(Option::unwrap).collect();
    // Key 7's claim is lost (taken over by another owner) before its record.
    let lost = tokens[7];
    tokens[7] = ClaimToken {
        owner: Uuid::new_v4(),
        ..lost
    };
    let effects: GroupEffects = std::sync::Arc::new(|r: &RecordedOutbound| {
        Effects::none().event(NewEvent::new(
            r.message.org_id,
            "message.sent",
            json!({"message_id": r.message.id, "contact_uuid": r.contact.uuid}),
            Some(r.message.channel.clone()),
            r.message.created_at,
        ))
    });
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let s = s.clone();
        let record = GroupedOutbound {
            new: outbound(
                &f,
                RecipientRef::Phone(phone(&format!("+491512345670{}", i % 4))),
                ConversationPolicy::OpenOrContinue,
                i as i64,
            ),
            completion: Some(ClaimCompletion {
                claim: (*token).into(),
                status: 201,
                request_id: Some(format!("req-{i}")),
                extra: None,
            }),
            effects: effects.clone(),
        };
        tasks.push(tokio::spawn(async move {
            let uuid = record.new.uuid;
            (i, uuid, s.record_outbound_grouped(record).await)
        }));
    }
    let mut contacts = std::collections::HashMap::new();
    let mut created = (0, 0);
    for task in tasks {
        let (i, uuid, result) = task.await.unwrap();
        if i == 7 {
            assert!(matches!(result, Err(StoreError::ClaimLost)), "{result:?}");
            continue;
        }
        let r = result.unwrap_or_else(|e| panic!("record {i} failed: {e}"));
        assert_eq!(r.message.uuid, uuid, "each sender gets its own record");
        // A group's records are built from what its INSERT wrote, not read back: each is the
        // message as a later read finds it.
        assert_eq!(r.message, s.find_message(f.org, uuid).await.unwrap());
        created.0 += usize::from(r.contact_created);
        created.1 += usize::from(r.conversation_created);
        assert_eq!(
            *contacts.entry(i % 4).or_insert(r.contact.id),
            r.contact.id,
            "one contact per phone"
        );
        // The claim was completed with the record's own: what its sender got, and its request.
        let again = s
            .claim_idempotency(claim(&f, &format!("key-{i}"), b"fp", 1))
            .await
            .unwrap();
        assert_eq!(
            again,
            ClaimOutcome::Replay(Stored::Send(Box::new(RecordedSend {
                status: 201,
                request_id: Some(format!("req-{i}")),
                extra: None,
                recorded: r.clone(),
            })))
        );
    }
    assert_eq!(
        created,
        (4, 4),
        "one contact and one conversation per phone"
    );
    let messages = s
        .list_messages(f.org, &MessageFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(messages.len(), 39);
    let events = s.list_outbox_events(f.org, 100).await.unwrap();
    assert_eq!(events.len(), 39, "one message.sent per record written");
    let deliveries_to = |endpoint: Uuid| {
        let s = s.clone();
        async move {
            s.list_deliveries(
                f.org,
                &DeliveryQuery {
                    status: None,
                    event: None,
                    endpoint_uuid: Some(endpoint),
                    since: None,
                    until: None,
                    before: None,
                    limit: 1000,
                },
            )
            .await
            .unwrap()
        }
    };
    let plain = deliveries_to(unordered.uuid).await;
    let each: std::collections::HashSet<Uuid> = plain.iter().map(|d| d.event_uuid).collect();
    assert_eq!(
        (plain.len(), each.len()),
        (39, 39),
        "one delivery per event"
    );
    assert!(
        plain
            .iter()
            .all(|d| d.sequence.is_none() && d.next_attempt_at.is_some()),
        "unordered deliveries are due at once"
    );
    // The ordered endpoint: per contact, sequences 1..n, only the first due.
    let chained = deliveries_to(ordered.uuid).await;
    assert_eq!(chained.len(), 39);
    let contact_of: std::collections::HashMap<Uuid, String> = events
        .iter()
        .map(|e| (e.uuid, e.data["contact_uuid"].as_str().unwrap().to_owned()))
        .collect();
    let mut chains: std::collections::HashMap<&str, Vec<(i64, bool)>> = Default::default();
    for d in &chained {
        chains
            .entry(contact_of[&d.event_uuid].as_str())
            .or_default()
            .push((d.sequence.expect("numbered"), d.next_attempt_at.is_some()));
    }
    assert_eq!(chains.len(), 4, "one chain per contact");
    for (contact, mut chain) in chains {
        chain.sort();
        let numbers: Vec<i64> = chain.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            numbers,
            (1..=chain.len() as i64).collect::<Vec<_>>(),
            "{contact}"
        );
        let due: Vec<i64> = chain
            .iter()
            .filter(|(_, due)| *due)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(due, vec![1], "only the head of {contact}'s chain is due");
    }
    // The records above may all have fallen into the group that held the lost claim (then
    // every one of them was rewritten alone): rounds of records that all succeed, until one
    // group commits several (at most 20 rounds).
    for round in 0..20 {
        if LARGEST_GROUP.load(std::sync::atomic::Ordering::SeqCst) > 1 {
            break;
        }
        let mut tasks = Vec::new();
        for i in 0..16 {
            let s = s.clone();
            let record = GroupedOutbound {
                new: outbound(
                    &f,
                    RecipientRef::Phone(phone(&format!("+491512345670{}", i % 4))),
                    ConversationPolicy::OpenOrContinue,
                    100 + round * 16 + i,
                ),
                completion: None,
                effects: std::sync::Arc::new(|_: &RecordedOutbound| Effects::none()),
            };
            tasks.push(tokio::spawn(async move {
                s.record_outbound_grouped(record).await
            }));
        }
        for task in tasks {
            task.await
                .unwrap()
                .expect("a record without a claim is written");
        }
    }
    let largest = LARGEST_GROUP.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        largest > 1,
        "records were grouped (largest group: {largest})"
    );
}

/// The largest group commit seen in this process (only this test records grouped sends).
static LARGEST_GROUP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct GroupSizes;

impl observe::StoreObserver for GroupSizes {
    fn current_trace(&self) -> Option<String> {
        None
    }
    fn transaction(&self, _: std::time::SystemTime, _: std::time::SystemTime, _: bool) {}
    fn transaction_in(&self, _: &str, _: std::time::SystemTime, _: std::time::SystemTime, _: bool) {
    }
    fn group_committed(&self, records: usize) {
        LARGEST_GROUP.fetch_max(records, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A provider that answers with a message id the channel already has (a Telegram bot replaced
/// by another numbers its messages from 1 again): the message was sent, so it is recorded,
/// without the id, with its events, instead of failing after the provider call.
async fn a_reused_provider_id_does_not_lose_the_sent_message(s: SharedStore) {
    let f = fixture(&s).await;
    let to = RecipientRef::Phone(phone("+4915123456789"));
    let with_id = |at: i64| NewOutbound {
        provider_message_id: Some("555001:1".into()),
        ..outbound(&f, to.clone(), ConversationPolicy::OpenOrContinue, at)
    };
    let first = s
        .record_outbound(with_id(1), None, Box::new(sent_event))
        .await
        .unwrap();
    assert_eq!(
        first.message.provider_message_id.as_deref(),
        Some("555001:1")
    );
    let second = s
        .record_outbound(with_id(2), None, Box::new(sent_event))
        .await
        .unwrap();
    assert_eq!(second.message.provider_message_id, None);
    assert_ne!(second.message.id, first.message.id);
    // The records are built from what was written, not read back: each is the message as a
    // later read finds it (the second without the id the channel already had).
    for r in [&first, &second] {
        let stored = s.find_message(f.org, r.message.uuid).await.unwrap();
        assert_eq!(r.message, stored);
    }
    let events = s.list_outbox_events(f.org, 100).await.unwrap();
    let sent = events.iter().filter(|e| e.name == "message.sent").count();
    assert_eq!(sent, 2, "both sends emitted message.sent");
}

async fn a_message_journey_is_kept_and_read_oldest_first(s: SharedStore) {
    let f = fixture(&s).await;
    let step = |at: i64, kind: StepKind, detail: serde_json::Value| MessageStep {
        at: t(at),
        kind,
        detail,
    };
    let mut new = outbound(
        &f,
        RecipientRef::Phone(phone("+4915123456789")),
        ConversationPolicy::OpenOrContinue,
        1_000,
    );
    let pid = new.provider_message_id.clone().unwrap();
    new.steps = vec![
        step(900, StepKind::Accepted, json!({})),
        step(
            910,
            StepKind::ProviderRequest,
            json!({"provider": "sandbox"}),
        ),
        step(
            950,
            StepKind::ProviderResponse,
            json!({"outcome": "accepted", "provider_message_id": pid}),
        ),
    ];
    let sent = s
        .record_outbound(new, None, Box::new(sent_event))
        .await
        .unwrap();
    // A second message, which fails.
    let second = s
        .record_outbound(
            outbound(
                &f,
                RecipientRef::Phone(phone("+4915123456789")),
                ConversationPolicy::OpenOrContinue,
                1_500,
            ),
            None,
            Box::new(sent_event),
        )
        .await
        .unwrap();
    let pid2 = second.message.provider_message_id.clone().unwrap();
    for (p, status, at) in [
        (&pid, MessageStatus::Delivered, 2_000),
        (&pid, MessageStatus::Read, 2_500),
        (&pid2, MessageStatus::Failed, 3_000),
    ] {
        s.record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![],
                statuses: vec![NewStatus {
                    message: MessageRef::Provider(p.clone()),
                    status,
                    error: (status == MessageStatus::Failed).then(|| {
                        json!({"code": "provider_rejected", "provider_code": 131026, "message": "undeliverable"})
                    }),
                    pricing: None,
                    provider_conversation: None,
                }],
                now: t(at),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    }
    let steps = s.message_timeline(sent.message.id).await.unwrap();
    let kinds: Vec<StepKind> = steps.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [
            StepKind::Accepted,
            StepKind::ProviderRequest,
            StepKind::ProviderResponse,
            StepKind::Status,
            StepKind::Status,
            StepKind::Status
        ]
    );
    assert!(steps.windows(2).all(|w| w[0].at <= w[1].at), "oldest first");
    assert_eq!(steps[2].detail["provider_message_id"], json!(pid));
    assert_eq!(steps[3].detail, json!({"status": "sent"}));
    assert_eq!(steps[4].detail, json!({"status": "delivered"}));
    assert_eq!(steps[5].detail, json!({"status": "read"}));
    assert_eq!(steps[5].at, t(2_500));
    let failed = s.message_timeline(second.message.id).await.unwrap();
    assert_eq!(
        failed.iter().map(|s| &s.detail).collect::<Vec<_>>(),
        [
            &json!({"status": "sent"}),
            &json!({"status": "failed", "code": "provider_rejected", "provider_code": 131026})
        ]
    );

    // Found by uuid within its organization only.
    let found = s.find_message(f.org, sent.message.uuid).await.unwrap();
    assert_eq!(found.id, sent.message.id);
    let other = s.create_org("Other", t(0)).await.unwrap();
    assert!(matches!(
        s.find_message(other.id, sent.message.uuid).await,
        Err(StoreError::NotFound)
    ));
    // An inbound message's journey starts with its `received` status.
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![NewInbound {
                    sender: InboundSender::Phone(phone("+4915123456789")),
                    profile_name: None,
                    uuid: Uuid::now_v7(),
                    message_type: MessageType::Text,
                    content: json!({"body": "hi"}),
                    provider_message_id: "in-1".into(),
                    sent_at: t(4_000),
                    context: Default::default(),
                }],
                statuses: vec![],
                now: t(4_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    let InboundOutcome::Stored(inbound) = &out.messages[0] else {
        panic!("stored")
    };
    let steps = s.message_timeline(inbound.message.id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        (steps[0].kind, &steps[0].detail),
        (StepKind::Status, &json!({"status": "received"}))
    );
}

async fn the_send_queue_claims_leases_and_finishes_batches(s: SharedStore) {
    use switchboard_store::queue::{LeaseResult, NewBatch, QueueEntry, QueuedOutcome};
    let f = fixture(&s).await;
    let item = |p: &str, due: i64| NewOutbound {
        status: MessageStatus::Queued,
        provider_message_id: None,
        queue: Some(QueueEntry {
            batch_id: None,
            not_before: t(due),
        }),
        ..outbound(
            &f,
            RecipientRef::Phone(phone(p)),
            ConversationPolicy::ContinueIfOpen,
            10,
        )
    };
    let (batch, items) = s
        .record_batch(
            NewBatch {
                uuid: Uuid::now_v7(),
                org_id: f.org,
                api_key_id: Some(f.key),
                now: t(10),
            },
            vec![
                item("+4915123456789", 10),
                item("+4915123456780", 10),
                item("+4915123456781", 500),
            ],
            None,
            Box::new(|_| Effects::none()),
        )
        .await
        .unwrap();
    assert_eq!(batch.total, 3);
    assert_eq!(batch.counts.get("queued"), Some(&3));
    assert!(items.iter().all(|r| r.contact_created));
    assert_eq!(s.queued_count().await.unwrap(), 3);
    // Only due messages are claimed, each once while its lease lasts.
    let claimed = s
        .claim_queued(t(20), Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|c| c.attempts == 0 && !c.was_in_flight));
    assert!(
        s.claim_queued(t(20), Duration::from_secs(30), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let (a, b) = (&claimed[0], &claimed[1]);
    // One is deferred (a throttled attempt), one marked in flight and finished.
    assert_eq!(
        s.defer_queued(a.message.id, a.token, t(1_000), true)
            .await
            .unwrap(),
        LeaseResult::Done(())
    );
    assert_eq!(
        s.mark_in_flight(b.message.id, b.token, t(21))
            .await
            .unwrap(),
        LeaseResult::Done(())
    );
    let outcome = |at: i64| QueuedOutcome {
        status: MessageStatus::Sent,
        provider_message_id: Some("wamid.Q1".into()),
        error: None,
        steps: Vec::new(),
        now: t(at),
    };
    // A stale token writes nothing.
    assert_eq!(
        s.finish_queued(
            b.message.id,
            Uuid::new_v4(),
            outcome(22),
            Box::new(|_| Effects::none())
        )
        .await
        .unwrap(),
        LeaseResult::Lost
    );
    match s
        .finish_queued(
            b.message.id,
            b.token,
            outcome(22),
            Box::new(sent_message_event),
        )
        .await
        .unwrap()
    {
        LeaseResult::Done(m) => {
            assert_eq!(m.status, MessageStatus::Sent);
            assert_eq!(m.provider_message_id.as_deref(), Some("wamid.Q1"));
        }
        LeaseResult::Lost => panic!("the lease was held"),
    }
    let found = s.find_batch(f.org, batch.uuid).await.unwrap().unwrap();
    assert_eq!(found.counts.get("sent"), Some(&1));
    assert_eq!(found.counts.get("queued"), Some(&2));
    assert_eq!(found.completed_at, None);
    assert!(s.find_batch(f.org + 1, batch.uuid).await.unwrap().is_none());
    // An expired lease is taken over; a message that was in flight says so.
    let again = s
        .claim_queued(t(1_000), Duration::from_secs(30), 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 2);
    let deferred = again.iter().find(|c| c.message.id == a.message.id).unwrap();
    assert_eq!(deferred.attempts, 1);
    s.mark_in_flight(deferred.message.id, deferred.token, t(1_001))
        .await
        .unwrap();
    let taken = s
        .claim_queued(t(100_000), Duration::from_secs(30), 10)
        .await
        .unwrap();
    let over = taken.iter().find(|c| c.message.id == a.message.id).unwrap();
    assert!(over.was_in_flight);
    // The last item completes the batch.
    for c in &taken {
        let failed = QueuedOutcome {
            status: MessageStatus::Failed,
            provider_message_id: None,
            error: Some(json!({"code": "provider_outcome_unknown"})),
            steps: Vec::new(),
            now: t(100_001),
        };
        s.finish_queued(c.message.id, c.token, failed, Box::new(|_| Effects::none()))
            .await
            .unwrap();
    }
    let done = s.find_batch(f.org, batch.uuid).await.unwrap().unwrap();
    assert_eq!(done.counts.get("failed"), Some(&2));
    assert_eq!(done.completed_at, Some(t(100_001)));
    assert_eq!(s.queued_count().await.unwrap(), 0);
    let events = s.list_outbox_events(f.org, 100).await.unwrap();
    assert_eq!(
        events.iter().filter(|e| e.name == "message.sent").count(),
        1
    );
}

fn sent_message_event(m: &MessageRecord) -> Effects {
    Effects::none().event(NewEvent::new(
        m.org_id,
        "message.sent",
        json!({"message_id": m.id}),
        Some(m.channel.clone()),
        m.updated_at,
    ))
}

/// A queued send left in flight by a stopped instance: it stays in flight when taken over (a
/// claim that dies before deciding leaves it as unknown as it found it); the provider id a
/// status callback reports for it is kept with it (due at once when no live lease holds it);
/// one waiting for its outcome is put off with its in-flight time kept.
async fn a_send_in_flight_keeps_what_the_provider_reports(s: SharedStore) {
    use switchboard_store::queue::{LeaseResult, NewBatch, QueueEntry};
    let f = fixture(&s).await;
    let item = |p: &str| NewOutbound {
        status: MessageStatus::Queued,
        provider_message_id: None,
        queue: Some(QueueEntry {
            batch_id: None,
            not_before: t(10),
        }),
        ..outbound(
            &f,
            RecipientRef::Phone(phone(p)),
            ConversationPolicy::ContinueIfOpen,
            10,
        )
    };
    let (_, items) = s
        .record_batch(
            NewBatch {
                uuid: Uuid::now_v7(),
                org_id: f.org,
                api_key_id: Some(f.key),
                now: t(10),
            },
            vec![item("+4915123456789"), item("+4915123456780")],
            None,
            Box::new(|_| Effects::none()),
        )
        .await
        .unwrap();
    let (a, b) = (&items[0].message, &items[1].message);
    let lease = Duration::from_secs(1);
    let claimed = s.claim_queued(t(20), lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    for c in &claimed {
        assert_eq!(
            s.mark_in_flight(c.message.id, c.token, t(21))
                .await
                .unwrap(),
            LeaseResult::Done(())
        );
    }
    // A report for a message in flight under a live lease is kept; the lease holder decides.
    assert!(
        s.report_provider_id(f.channel, a.uuid, "wamid.A", t(30))
            .await
            .unwrap()
    );
    assert!(
        !s.report_provider_id(f.channel, a.uuid, "wamid.other", t(31))
            .await
            .unwrap(),
        "the first report stays"
    );
    assert!(
        !s.report_provider_id(f.channel + 1, b.uuid, "wamid.B", t(31))
            .await
            .unwrap(),
        "another channel's message is not this one"
    );
    assert!(
        !s.report_provider_id(f.channel, Uuid::now_v7(), "wamid.X", t(31))
            .await
            .unwrap()
    );
    assert!(s.claim_queued(t(500), lease, 10).await.unwrap().is_empty());
    // The leases expire (the instance died): both are taken over, in flight, `a` with its report.
    let taken = s.claim_queued(t(2_000), lease, 10).await.unwrap();
    assert_eq!(taken.len(), 2);
    let over_a = taken.iter().find(|c| c.message.id == a.id).unwrap();
    let over_b = taken.iter().find(|c| c.message.id == b.id).unwrap();
    assert!(over_a.was_in_flight && over_b.was_in_flight);
    assert_eq!(over_a.in_flight_at, Some(t(21)));
    assert_eq!(
        over_a.reported_provider_message_id.as_deref(),
        Some("wamid.A")
    );
    assert_eq!(over_b.reported_provider_message_id, None);
    // `b` waits for its outcome; a claim that dies without deciding leaves it in flight.
    assert_eq!(
        s.await_outcome(b.id, Uuid::new_v4(), t(60_000))
            .await
            .unwrap(),
        LeaseResult::Lost,
        "a stale token puts nothing off"
    );
    assert_eq!(
        s.await_outcome(b.id, over_b.token, t(60_000))
            .await
            .unwrap(),
        LeaseResult::Done(())
    );
    let later = s.claim_queued(t(10_000), lease, 10).await.unwrap();
    assert!(
        later.iter().all(|c| c.message.id != b.id),
        "not due before the end of its wait"
    );
    // Its report comes while no lease holds it: due at once, in flight, with the report.
    assert!(
        s.report_provider_id(f.channel, b.uuid, "wamid.B", t(10_001))
            .await
            .unwrap()
    );
    let due = s.claim_queued(t(10_002), lease, 10).await.unwrap();
    let b_again = due.iter().find(|c| c.message.id == b.id).unwrap();
    assert!(b_again.was_in_flight);
    assert_eq!(b_again.in_flight_at, Some(t(21)));
    assert_eq!(
        b_again.reported_provider_message_id.as_deref(),
        Some("wamid.B")
    );
    // Claimed again after that claim's lease ran out: still in flight.
    let again = s.claim_queued(t(20_000), lease, 10).await.unwrap();
    assert!(
        again
            .iter()
            .any(|c| c.message.id == b.id && c.was_in_flight),
        "{again:?}"
    );
}

/// The readiness probe's write commits (and again: it rewrites one row).
async fn a_write_probe_commits(s: SharedStore) {
    s.probe_write(t(1)).await.unwrap();
    s.probe_write(t(2)).await.unwrap();
}

/// Issue 32: the inbound context is kept; provider ids resolve to uuids in the organization;
/// edits and deletions change the message once, with a step and an event each.
async fn edits_deletions_and_provider_id_lookups(s: SharedStore) {
    use switchboard_domain::message::{InboundContext, ReplyTo};
    let f = fixture(&s).await;
    let from = InboundSender::Phone(phone("+4915123456789"));
    let mut reply = inbound(from.clone(), "wamid.2", 101);
    reply.context = InboundContext {
        reply_to: Some(ReplyTo {
            message_uuid: None,
            provider_message_id: "wamid.1".into(),
        }),
        forwarded: true,
        frequently_forwarded: false,
        referral: None,
    };
    let expected_context = reply.context.clone();
    let out = s
        .record_provider_batch(
            ProviderBatch {
                org_id: f.org,
                channel_id: f.channel,
                messages: vec![inbound(from.clone(), "wamid.1", 100), reply],
                statuses: vec![],
                now: t(1_000),
            },
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    let stored: Vec<MessageRecord> = out
        .messages
        .iter()
        .filter_map(|o| match o {
            InboundOutcome::Stored(r) => Some(r.message.clone()),
            InboundOutcome::Duplicate { .. } => None,
        })
        .collect();
    let first = stored
        .iter()
        .find(|m| m.provider_message_id.as_deref() == Some("wamid.1"))
        .unwrap();
    let second = stored
        .iter()
        .find(|m| m.provider_message_id.as_deref() == Some("wamid.2"))
        .unwrap();
    assert_eq!(second.context.as_ref(), Some(&expected_context));
    assert_eq!(
        s.find_message(f.org, second.uuid).await.unwrap().context,
        Some(expected_context)
    );

    // Lookups: the organization's messages only; unknown ids are absent.
    let found = s
        .message_uuids_by_provider_ids(f.org, &["wamid.1".into(), "wamid.nope".into()])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found.get("wamid.1"), Some(&first.uuid));
    let other = s.create_org("Other", t(0)).await.unwrap();
    assert!(
        s.message_uuids_by_provider_ids(other.id, &["wamid.1".into()])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.message_uuids_by_provider_ids(f.org, &[])
            .await
            .unwrap()
            .is_empty()
    );

    let events_before = s.list_outbox_events(f.org, 100).await.unwrap().len();
    let edit = || NewChange {
        provider_message_id: "wamid.1".into(),
        edited: Some((MessageType::Text, json!({"body": "hello"}))),
        at: t(1_100),
    };
    let delete = || NewChange {
        provider_message_id: "wamid.1".into(),
        edited: None,
        at: t(1_200),
    };
    let unknown = NewChange {
        provider_message_id: "wamid.none".into(),
        edited: None,
        at: t(1_200),
    };
    let outcomes = s
        .record_message_changes(
            f.channel,
            vec![edit(), edit(), unknown],
            t(1_150),
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    assert!(matches!(outcomes[0], ChangeOutcome::Applied(_)));
    assert!(
        matches!(outcomes[1], ChangeOutcome::Ignored),
        "the same edit again"
    );
    assert!(
        matches!(outcomes[2], ChangeOutcome::Ignored),
        "an unknown message"
    );
    let m = s.find_message(f.org, first.uuid).await.unwrap();
    assert_eq!(m.content, json!({"body": "hello"}));
    assert_eq!(m.edited_at, Some(t(1_100)));
    assert_eq!(m.deleted_at, None);
    let outcomes = s
        .record_message_changes(
            f.channel,
            vec![delete(), delete(), edit()],
            t(1_300),
            Box::new(batch_effects),
        )
        .await
        .unwrap();
    assert!(matches!(outcomes[0], ChangeOutcome::Applied(_)));
    assert!(matches!(outcomes[1], ChangeOutcome::Ignored));
    assert!(
        matches!(outcomes[2], ChangeOutcome::Ignored),
        "no edit after a deletion"
    );
    let m = s.find_message(f.org, first.uuid).await.unwrap();
    assert_eq!(m.content, serde_json::Value::Null);
    assert_eq!(m.deleted_at, Some(t(1_200)));
    assert_eq!(m.message_type, MessageType::Text);
    let kinds: Vec<StepKind> = s
        .message_timeline(m.id)
        .await
        .unwrap()
        .iter()
        .map(|st| st.kind)
        .collect();
    assert!(
        kinds.contains(&StepKind::Edited) && kinds.contains(&StepKind::Deleted),
        "{kinds:?}"
    );
    let events = s.list_outbox_events(f.org, 100).await.unwrap();
    assert_eq!(
        events.len(),
        events_before + 2,
        "one event per applied change"
    );
}

/// A committer of records keeps its connection between groups on PostgreSQL: a record right
/// after the database closed that connection (a restart, `pg_terminate_backend`) is written
/// all the same, and a record that fails (its key taken) leaves the kept connection usable for
/// the next one, having written nothing.
async fn a_committer_outlives_its_connection_and_its_failed_records(ts: &TestStore) {
    let s = &ts.store;
    let f = fixture(s).await;
    let effects: GroupEffects = std::sync::Arc::new(sent_event);
    let open = ConversationPolicy::OpenOrContinue;
    let record = |p: &str, key: &str, at: i64| GroupedOutbound {
        new: outbound(&f, RecipientRef::Phone(phone(p)), open, at),
        completion: completing(new_key(&f, key, at), key),
        effects: effects.clone(),
    };
    let first = s
        .record_outbound_grouped(record("+4915123456770", "c-1", 1))
        .await
        .unwrap();
    if ts.backend() == "postgres" {
        ts.raw_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();
    }
    let second = s
        .record_outbound_grouped(record("+4915123456771", "c-2", 2))
        .await
        .expect("a record right after the committer's connection was closed");
    let lost = s
        .record_outbound_grouped(record("+4915123456772", "c-1", 3))
        .await;
    assert!(matches!(lost, Err(StoreError::ClaimLost)), "{lost:?}");
    let third = s
        .record_outbound_grouped(record("+4915123456773", "c-3", 4))
        .await
        .expect("a record after a failed one");
    assert!(
        s.find_contact_by_phone(f.org, &phone("+4915123456772"))
            .await
            .unwrap()
            .is_none(),
        "the failed record wrote nothing"
    );
    let messages = s
        .list_messages(f.org, &MessageFilter::default(), None, 10)
        .await
        .unwrap();
    let mut written: Vec<_> = messages.iter().map(|m| m.uuid).collect();
    written.sort();
    let mut expected = vec![first.message.uuid, second.message.uuid, third.message.uuid];
    expected.sort();
    assert_eq!(written, expected);
    assert_eq!(s.list_outbox_events(f.org, 10).await.unwrap().len(), 3);
}
