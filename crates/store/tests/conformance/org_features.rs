//! Conformance of `LegacyStore` on both backends .

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::support::*;
use switchboard_domain::api_key;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::phone::Phone;
use switchboard_store::legacy::*;
use switchboard_store::*;

conformance!(
    contacts_search_update_and_soft_delete,
    groups_and_memberships,
    canned_replies_are_unique_per_org,
    campaign_claims_are_exclusive_and_leases_expire,
    the_last_recipient_finishes_the_campaign_once,
    flows_round_trip,
);

fn phone(s: &str) -> Phone {
    Phone::parse(s).unwrap()
}

fn page(limit: i64) -> PageQuery {
    PageQuery { after: None, limit }
}

async fn contact(s: &SharedStore, org_id: i64, p: &str, name: Option<&str>, at: i64) -> Uuid {
    s.create_contact(
        NewContact {
            org_id,
            uuid: Uuid::now_v7(),
            phone: Some(phone(p)),
            name: name.map(str::to_owned),
            telegram_chat_id: None,
            now: t(at),
        },
        no_effects(),
    )
    .await
    .unwrap()
    .uuid
}

async fn contacts_search_update_and_soft_delete(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let ada = contact(&s, org.id, "+4915123456789", Some("Ada Lovelace"), 1).await;
    let bob = contact(&s, org.id, "+4915123456780", Some("Bob_%"), 2).await;
    contact(&s, other.id, "+4915123456781", Some("Ada Other"), 3).await;

    let all = s
        .list_contacts(org.id, &ContactQuery::default(), page(10))
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|c| c.uuid).collect::<Vec<_>>(),
        vec![bob, ada],
        "newest first, one organization"
    );
    let by_name = |n: &str| ContactQuery {
        name_contains: Some(n.into()),
        ..Default::default()
    };
    let found = s
        .list_contacts(org.id, &by_name("love"), page(10))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].uuid, ada);
    assert_eq!(
        s.list_contacts(org.id, &by_name("_%"), page(10))
            .await
            .unwrap()[0]
            .uuid,
        bob,
        "LIKE wildcards are matched literally"
    );
    assert!(
        s.list_contacts(org.id, &by_name("b%"), page(10))
            .await
            .unwrap()
            .is_empty()
    );
    let after = PageQuery {
        after: Some(PagePosition {
            time: all[0].created_at,
            id: all[0].id,
        }),
        limit: 10,
    };
    assert_eq!(
        s.list_contacts(org.id, &ContactQuery::default(), after)
            .await
            .unwrap()[0]
            .uuid,
        ada
    );

    // A phone another contact has is a unique violation; a name can be cleared.
    let taken = s
        .update_contact(
            org.id,
            bob,
            ContactPatch {
                phone: Some(phone("+4915123456789")),
                name: None,
            },
            t(5),
            no_effects(),
        )
        .await;
    assert!(
        matches!(taken, Err(StoreError::UniqueViolation(_))),
        "{taken:?}"
    );
    let change = s
        .update_contact(
            org.id,
            bob,
            ContactPatch {
                phone: None,
                name: Some(None),
            },
            t(6),
            Box::new(|c| {
                Effects::none().event(NewEvent::new(
                    c.after.org_id,
                    "contact.updated",
                    json!({}),
                    None,
                    t(6),
                ))
            }),
        )
        .await
        .unwrap();
    assert_eq!(change.after.name, None);
    assert_eq!(change.before.name.as_deref(), Some("Bob_%"));
    assert_eq!(change.after.phone, change.before.phone);

    // Soft delete: gone from lookups, phone free again, the row stays.
    let gone = s
        .delete_contact(org.id, ada, t(7), no_effects())
        .await
        .unwrap();
    assert_eq!(gone.uuid, ada);
    assert!(s.find_contact(org.id, ada).await.unwrap().is_none());
    let tomb = s
        .find_contact_with_deleted(org.id, ada)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (tomb.phone, tomb.name),
        (None, None),
        "personal data cleared"
    );
    assert!(
        s.find_contact_by_phone(org.id, &phone("+4915123456789"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        s.delete_contact(org.id, ada, t(8), no_effects()).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        s.resolve_contacts(org.id, &[ada, bob]).await.unwrap().len(),
        1
    );
    contact(&s, org.id, "+4915123456789", None, 9).await;
    let events = s.list_outbox_events(org.id, 10).await.unwrap();
    assert_eq!(events.len(), 1, "effects written with the change");
}

async fn groups_and_memberships(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let a = contact(&s, org.id, "+4915123456789", None, 1).await;
    let b = contact(&s, org.id, "+4915123456780", None, 2).await;
    let foreign = contact(&s, other.id, "+4915123456781", None, 3).await;
    let g = s
        .create_group(org.id, Uuid::now_v7(), "VIP", t(4), no_effects())
        .await
        .unwrap();
    assert_eq!(g.member_count, 0);
    let out = s
        .change_group_members(org.id, g.uuid, &[a, foreign], true, t(5), no_effects())
        .await
        .unwrap();
    assert!(
        matches!(&out, MembershipOutcome::UnknownContacts(u) if u == &vec![foreign]),
        "{out:?}"
    );
    let out = s
        .change_group_members(org.id, g.uuid, &[a, b, a], true, t(6), no_effects())
        .await
        .unwrap();
    let MembershipOutcome::Changed { group, changed } = out else {
        panic!("changed")
    };
    assert_eq!((group.member_count, changed), (2, 2));
    assert_eq!(s.list_group_members(g.id, page(10)).await.unwrap().len(), 2);
    // Removing counts only the members removed; adding them back restores the group.
    let c = contact(&s, org.id, "+4915123456782", None, 6).await;
    let out = s
        .change_group_members(org.id, g.uuid, &[a, b, c], false, t(6), no_effects())
        .await
        .unwrap();
    let MembershipOutcome::Changed { group, changed } = out else {
        panic!("changed")
    };
    assert_eq!((group.member_count, changed), (0, 2));
    let out = s
        .change_group_members(org.id, g.uuid, &[b, a], true, t(6), no_effects())
        .await
        .unwrap();
    assert!(matches!(out, MembershipOutcome::Changed { changed: 2, .. }));
    s.delete_contact(org.id, a, t(7), no_effects())
        .await
        .unwrap();
    assert_eq!(
        s.find_group(org.id, g.uuid)
            .await
            .unwrap()
            .unwrap()
            .member_count,
        1,
        "a deleted contact leaves its groups"
    );
    assert!(s.find_group(other.id, g.uuid).await.unwrap().is_none());
    let renamed = s
        .rename_group(org.id, g.uuid, "Gold", t(8), no_effects())
        .await
        .unwrap();
    assert_eq!(renamed.name, "Gold");
    assert_eq!(s.list_groups(org.id, page(10)).await.unwrap().len(), 1);
    assert!(matches!(
        s.delete_group(other.id, g.uuid, no_effects()).await,
        Err(StoreError::NotFound)
    ));
    s.delete_group(org.id, g.uuid, no_effects()).await.unwrap();
    assert!(s.find_group(org.id, g.uuid).await.unwrap().is_none());
}

async fn canned_replies_are_unique_per_org(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let r = s
        .create_canned_reply(org.id, Uuid::now_v7(), "/hi", "Hello", t(1))
        .await
        .unwrap();
    let dup = s
        .create_canned_reply(org.id, Uuid::now_v7(), "/hi", "Again", t(2))
        .await;
    assert!(
        matches!(dup, Err(StoreError::UniqueViolation(_))),
        "{dup:?}"
    );
    s.create_canned_reply(other.id, Uuid::now_v7(), "/hi", "Hallo", t(2))
        .await
        .unwrap();
    let changed = s
        .update_canned_reply(org.id, r.uuid, None, Some("Hello!"), t(3))
        .await
        .unwrap();
    assert_eq!(
        (changed.shortcut.as_str(), changed.text.as_str()),
        ("/hi", "Hello!")
    );
    assert!(matches!(
        s.update_canned_reply(other.id, r.uuid, None, Some("x"), t(4))
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        s.list_canned_replies(org.id, page(10)).await.unwrap().len(),
        1
    );
    s.delete_canned_reply(org.id, r.uuid).await.unwrap();
    assert!(matches!(
        s.delete_canned_reply(org.id, r.uuid).await,
        Err(StoreError::NotFound)
    ));
}

/// An organization, a channel, a key and a campaign of `n` recipients.
async fn campaign(s: &SharedStore, n: usize) -> CampaignRecord {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let ch = s
        .create_channel(new_channel(org.id, None, "Sandbox", true), no_effects())
        .await
        .unwrap();
    let g = api_key::generate();
    let key = s
        .create_api_key(
            NewApiKey {
                org_id: org.id,
                name: "k".into(),
                prefix: g.display_prefix.clone(),
                key_hash: g.hash,
                scopes: None,
                legacy: true,
                default_channel_id: None,
                expires_at: None,
                created_at: t(0),
            },
            no_effects(),
        )
        .await
        .unwrap();
    let mut recipients = Vec::new();
    for i in 0..n {
        let u = contact(s, org.id, &format!("+49151234567{i:02}"), None, 1).await;
        let c = s.find_contact(org.id, u).await.unwrap().unwrap();
        recipients.push((c.id, json!({"reference": format!("r{i}")})));
    }
    s.create_campaign(
        NewCampaign {
            uuid: Uuid::now_v7(),
            org_id: org.id,
            api_key_id: key.id,
            api_key_prefix: key.prefix,
            name: "C".into(),
            channel_id: ch.id,
            group_uuid: None,
            request: json!({"template_uuid": null}),
            recipients,
            now: t(2),
        },
        Box::new(|c| {
            Effects::none().event(NewEvent::new(
                c.org_id,
                "campaign.started",
                json!({}),
                None,
                t(2),
            ))
        }),
    )
    .await
    .unwrap()
}

fn sent(message_id: Option<i64>) -> RecipientOutcome {
    RecipientOutcome {
        status: RecipientStatus::Sent,
        message_id,
        error_code: None,
        error_message: None,
    }
}

async fn campaign_claims_are_exclusive_and_leases_expire(s: SharedStore) {
    let c = campaign(&s, 3).await;
    assert_eq!(c.status, CampaignStatus::Running);
    assert_eq!((c.counts.total, c.counts.pending), (3, 3));
    let lease = Duration::from_secs(10);
    let first = s.claim_campaign_recipients(t(10), lease, 2).await.unwrap();
    let second = s.claim_campaign_recipients(t(11), lease, 10).await.unwrap();
    assert_eq!((first.len(), second.len()), (2, 1));
    assert!(
        s.claim_campaign_recipients(t(12), lease, 10)
            .await
            .unwrap()
            .is_empty(),
        "claimed recipients are not claimed again while their lease holds"
    );
    // A lease that expired is taken over; the old token no longer finishes it.
    let taken = s
        .claim_campaign_recipients(t(10_000 + 10), lease, 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 2, "the first claim's leases expired");
    assert!(taken.iter().all(|r| r.recipient.attempts == 2));
    let stale = s
        .finish_campaign_recipient(
            first[0].recipient.id,
            first[0].token,
            sent(None),
            t(10_012),
            no_effects(),
        )
        .await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let fresh = taken
        .iter()
        .find(|r| r.recipient.id == first[0].recipient.id)
        .unwrap();
    s.finish_campaign_recipient(
        fresh.recipient.id,
        fresh.token,
        sent(None),
        t(10_013),
        no_effects(),
    )
    .await
    .unwrap();
    // Concurrent claims on a fresh campaign never overlap.
    let c2 = campaign(&s, 8).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.claim_campaign_recipients(t(20), lease, 3).await.unwrap()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        for r in task.await.unwrap() {
            if r.campaign.id == c2.id {
                ids.push(r.recipient.id);
            }
        }
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no recipient claimed twice");
}

async fn the_last_recipient_finishes_the_campaign_once(s: SharedStore) {
    let c = campaign(&s, 2).await;
    let lease = Duration::from_secs(10);
    let claimed = s.claim_campaign_recipients(t(10), lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let finish_fx = || -> EffectsFn<'static, CampaignRecord> {
        Box::new(|c| {
            Effects::none().event(NewEvent::new(
                c.org_id,
                "campaign.completed",
                json!({}),
                None,
                t(30),
            ))
        })
    };
    let refused = RecipientOutcome {
        status: RecipientStatus::Refused,
        message_id: None,
        error_code: Some("invalid_template".into()),
        error_message: None,
    };
    let mut tasks = Vec::new();
    for (i, r) in claimed.into_iter().enumerate() {
        let s = s.clone();
        let outcome = if i == 0 { sent(None) } else { refused.clone() };
        let fx = finish_fx();
        tasks.push(tokio::spawn(async move {
            s.finish_campaign_recipient(r.recipient.id, r.token, outcome, t(30), fx)
                .await
                .unwrap()
        }));
    }
    let mut finished = Vec::new();
    for task in tasks {
        if let Some(c) = task.await.unwrap().campaign_finished {
            finished.push(c);
        }
    }
    assert_eq!(
        finished.len(),
        1,
        "exactly one finish sees the last recipient"
    );
    assert_eq!(finished[0].status, CampaignStatus::Completed);
    assert_eq!(
        (finished[0].counts.sent, finished[0].counts.refused),
        (1, 1)
    );
    let got = s.find_campaign(c.org_id, c.uuid).await.unwrap().unwrap();
    assert_eq!(got.status, CampaignStatus::Completed);
    assert_eq!(got.completed_at, Some(t(30)));
    let names: Vec<String> = s
        .list_outbox_events(c.org_id, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["campaign.started", "campaign.completed"]);
    let rs = s.list_campaign_recipients(c.id, 10).await.unwrap();
    assert_eq!(rs[1].error_code.as_deref(), Some("invalid_template"));
    assert!(
        s.find_campaign(c.org_id + 1, c.uuid)
            .await
            .unwrap()
            .is_none()
    );
}

async fn flows_round_trip(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let ch = s
        .create_channel(new_channel(org.id, None, "Sandbox", true), no_effects())
        .await
        .unwrap();
    let f = s
        .create_flow(NewFlow {
            uuid: Uuid::now_v7(),
            org_id: org.id,
            name: "Welcome".into(),
            channel_id: ch.id,
            action: json!({"type": "text", "text": "hi"}),
            active: false,
            now: t(1),
        })
        .await
        .unwrap();
    assert!(!f.active);
    assert_eq!(s.find_flow(org.id, f.uuid).await.unwrap().unwrap(), f);
    assert!(s.find_flow(org.id + 1, f.uuid).await.unwrap().is_none());
    assert_eq!(s.list_flows(org.id, page(10)).await.unwrap(), vec![f]);
}
