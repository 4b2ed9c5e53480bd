//! Conformance of the organization-data store methods (users, memberships, overrides, the
//! organization log reads) and of the log's append-only rule, on SQLite and, when
//! `SWITCHBOARD_TEST_POSTGRES_URL` is set, on PostgreSQL.

use serde_json::json;
use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;
use switchboard_domain::event::{Actor, EventCategory, NewEvent, OrgEvent, Subject};
use switchboard_domain::org_log::{ActorFilter, OrgEventFilter, TypeFilter};
use switchboard_domain::permission::{OverrideEffect, Permission, Role};
use switchboard_domain::user::Email;
use switchboard_store::testing::TestStore;
use switchboard_store::*;

conformance!(
    members_are_added_found_and_listed,
    roles_and_overrides_change_effective_permissions,
    removal_deletes_overrides_and_orphaned_users,
    member_changes_write_their_effects_or_nothing,
    concurrent_additions_of_one_address_share_one_user,
    org_log_filters_and_pages,
    org_log_is_append_only,
);

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_786_000_000_000 + ms)
}

fn email(s: &str) -> Email {
    Email::parse(s).unwrap()
}

fn new_member(org_id: i64, address: &str, name: Option<&str>, role: Role, at: i64) -> NewMember {
    NewMember {
        org_id,
        email: email(address),
        name: name.map(str::to_owned),
        role,
        now: t(at),
    }
}

fn none<T>() -> EffectsFn<'static, T> {
    Box::new(|_| Effects::none())
}

async fn members_are_added_found_and_listed(ts: &TestStore) {
    let s = &ts.store;
    let a = s.create_org("A", t(0)).await.unwrap();
    let b = s.create_org("B", t(0)).await.unwrap();
    let alice = s
        .add_member(
            new_member(a.id, "Alice@Example.com", Some("Alice"), Role::Owner, 1),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(alice.user.email, "Alice@Example.com");
    assert_eq!(alice.user.name.as_deref(), Some("Alice"));
    assert_eq!(
        (alice.role, alice.org_id, alice.created_at),
        (Role::Owner, a.id, t(1))
    );
    assert!(alice.overrides.is_empty());

    // The same address in another case is the same person: a conflict in the same
    // organization, the same user in another.
    let dup = s
        .add_member(
            new_member(a.id, "ALICE@example.COM", None, Role::Agent, 2),
            none(),
        )
        .await;
    assert!(matches!(dup, Err(StoreError::Conflict(_))), "{dup:?}");
    let in_b = s
        .add_member(
            new_member(b.id, "alice@example.com", None, Role::Viewer, 3),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(in_b.user.uuid, alice.user.uuid);
    assert_eq!(
        in_b.user.name.as_deref(),
        Some("Alice"),
        "no name given: kept"
    );
    assert_eq!(in_b.role, Role::Viewer);
    // A name given for an existing user replaces it.
    let renamed = s
        .add_member(
            new_member(b.id, "carol@example.com", Some("Carol"), Role::Agent, 4),
            none(),
        )
        .await
        .unwrap();
    let renamed_again = s
        .add_member(
            new_member(a.id, "carol@example.com", Some("Carol B."), Role::Agent, 5),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(renamed_again.user.uuid, renamed.user.uuid);
    assert_eq!(renamed_again.user.name.as_deref(), Some("Carol B."));
    assert_eq!(renamed_again.user.updated_at, t(5));

    assert_eq!(
        s.get_member(a.id, "alice@example.com").await.unwrap(),
        alice
    );
    assert!(matches!(
        s.get_member(a.id, "nobody@example.com").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.get_member(9999, "alice@example.com").await,
        Err(StoreError::NotFound)
    ));

    // Pages: oldest membership first, strictly after the cursor, by role.
    for i in 0..5 {
        s.add_member(
            new_member(
                a.id,
                &format!("agent{i}@example.com"),
                None,
                Role::Agent,
                10,
            ),
            none(),
        )
        .await
        .unwrap();
    }
    let all = s
        .list_members(
            a.id,
            &MemberQuery {
                role: None,
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 7);
    assert_eq!(all[0].user.email, "Alice@Example.com");
    assert!(all.iter().all(|m| m.org_id == a.id));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .list_members(
                a.id,
                &MemberQuery {
                    role: None,
                    after,
                    limit: 3,
                },
            )
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|m| (m.created_at, m.membership_id));
        seen.extend(page.into_iter().map(|m| m.membership_id));
    }
    assert_eq!(
        seen,
        all.iter().map(|m| m.membership_id).collect::<Vec<_>>(),
        "pages with ties in time neither skip nor repeat"
    );
    let agents = s
        .list_members(
            a.id,
            &MemberQuery {
                role: Some(Role::Agent),
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    assert_eq!(agents.len(), 6);
    assert!(agents.iter().all(|m| m.role == Role::Agent));
    let b_members = s
        .list_members(
            b.id,
            &MemberQuery {
                role: None,
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    assert_eq!(b_members.len(), 2);
}

async fn roles_and_overrides_change_effective_permissions(ts: &TestStore) {
    let s = &ts.store;
    let org = s.create_org("A", t(0)).await.unwrap();
    s.add_member(
        new_member(org.id, "bob@example.com", None, Role::Agent, 1),
        none(),
    )
    .await
    .unwrap();
    let bob = "bob@example.com";

    // The same role again changes nothing.
    let same = s
        .set_member_role(org.id, bob, Role::Agent, t(2), none())
        .await
        .unwrap();
    assert!(!same.changed());
    assert_eq!(same.after.updated_at, t(1));

    let grant = s
        .set_member_permission(
            org.id,
            bob,
            Permission::ReportsView,
            Some(OverrideEffect::Grant),
            t(3),
            none(),
        )
        .await
        .unwrap();
    assert!(grant.changed());
    assert!(
        grant
            .after
            .effective_permissions()
            .contains(&Permission::ReportsView)
    );
    assert!(
        !grant
            .before
            .effective_permissions()
            .contains(&Permission::ReportsView)
    );
    assert_eq!(grant.after.updated_at, t(3));
    let again = s
        .set_member_permission(
            org.id,
            bob,
            Permission::ReportsView,
            Some(OverrideEffect::Grant),
            t(4),
            none(),
        )
        .await
        .unwrap();
    assert!(!again.changed(), "granting twice changes nothing");

    let revoke = s
        .set_member_permission(
            org.id,
            bob,
            Permission::MessagesSend,
            Some(OverrideEffect::Revoke),
            t(5),
            none(),
        )
        .await
        .unwrap();
    assert!(
        !revoke
            .after
            .effective_permissions()
            .contains(&Permission::MessagesSend)
    );
    assert_eq!(
        revoke.after.overrides,
        vec![
            (Permission::MessagesSend, OverrideEffect::Revoke),
            (Permission::ReportsView, OverrideEffect::Grant),
        ],
        "sorted by permission"
    );
    // A revocation replaces a grant of the same permission.
    let flipped = s
        .set_member_permission(
            org.id,
            bob,
            Permission::ReportsView,
            Some(OverrideEffect::Revoke),
            t(6),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(
        flipped.after.override_of(Permission::ReportsView),
        Some(OverrideEffect::Revoke)
    );
    assert_eq!(flipped.after.overrides.len(), 2);

    // Overrides survive a role change.
    let promoted = s
        .set_member_role(org.id, bob, Role::Owner, t(7), none())
        .await
        .unwrap();
    assert!(promoted.changed());
    assert_eq!(
        (promoted.before.role, promoted.after.role),
        (Role::Agent, Role::Owner)
    );
    assert_eq!(
        promoted.after.effective_permissions().len(),
        Permission::ALL.len() - 2
    );

    // Reset restores what the role decides; resetting nothing changes nothing.
    for p in [Permission::ReportsView, Permission::MessagesSend] {
        s.set_member_permission(org.id, bob, p, None, t(8), none())
            .await
            .unwrap();
    }
    let reset = s.get_member(org.id, bob).await.unwrap();
    assert!(reset.overrides.is_empty());
    assert_eq!(reset.effective_permissions().len(), Permission::ALL.len());
    let noop = s
        .set_member_permission(org.id, bob, Permission::AuditView, None, t(9), none())
        .await
        .unwrap();
    assert!(!noop.changed());

    for r in [
        s.set_member_role(org.id, "nobody@example.com", Role::Admin, t(9), none())
            .await
            .map(|_| ()),
        s.set_member_permission(
            9999,
            bob,
            Permission::AuditView,
            Some(OverrideEffect::Grant),
            t(9),
            none(),
        )
        .await
        .map(|_| ()),
    ] {
        assert!(matches!(r, Err(StoreError::NotFound)), "{r:?}");
    }
}

async fn removal_deletes_overrides_and_orphaned_users(ts: &TestStore) {
    let s = &ts.store;
    let a = s.create_org("A", t(0)).await.unwrap();
    let b = s.create_org("B", t(0)).await.unwrap();
    let dana = s
        .add_member(
            new_member(a.id, "dana@example.com", Some("Dana"), Role::Manager, 1),
            none(),
        )
        .await
        .unwrap();
    s.add_member(
        new_member(b.id, "dana@example.com", None, Role::Viewer, 1),
        none(),
    )
    .await
    .unwrap();
    s.set_member_permission(
        a.id,
        "dana@example.com",
        Permission::BillingView,
        Some(OverrideEffect::Grant),
        t(2),
        none(),
    )
    .await
    .unwrap();
    let removed = s
        .remove_member(a.id, "DANA@example.com".to_lowercase().as_str(), none())
        .await
        .unwrap();
    assert_eq!(removed.membership_id, dana.membership_id);
    assert_eq!(removed.overrides.len(), 1, "returned as it was");
    assert!(matches!(
        s.get_member(a.id, "dana@example.com").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.remove_member(a.id, "dana@example.com", none()).await,
        Err(StoreError::NotFound)
    ));
    // Still a member of B: the user is kept.
    assert_eq!(
        s.get_member(b.id, "dana@example.com")
            .await
            .unwrap()
            .user
            .uuid,
        dana.user.uuid
    );
    // Re-added to A: no override comes back.
    let back = s
        .add_member(
            new_member(a.id, "dana@example.com", None, Role::Manager, 3),
            none(),
        )
        .await
        .unwrap();
    assert!(back.overrides.is_empty());
    assert_eq!(back.user.uuid, dana.user.uuid);
    assert_eq!(
        ts.raw_execute("DELETE FROM membership_permissions")
            .await
            .unwrap(),
        0
    );

    // Removed from every organization: the user (personal data) is deleted.
    s.remove_member(a.id, "dana@example.com", none())
        .await
        .unwrap();
    s.remove_member(b.id, "dana@example.com", none())
        .await
        .unwrap();
    assert_eq!(
        ts.raw_execute("UPDATE users SET name = 'x'").await.unwrap(),
        0,
        "no user row is left"
    );
    let fresh = s
        .add_member(
            new_member(a.id, "dana@example.com", None, Role::Agent, 4),
            none(),
        )
        .await
        .unwrap();
    assert_ne!(fresh.user.uuid, dana.user.uuid);
    assert_eq!(fresh.user.name, None);
}

async fn member_changes_write_their_effects_or_nothing(ts: &TestStore) {
    let s = &ts.store;
    let org = s.create_org("A", t(0)).await.unwrap();
    let log = |m: &Member, kind: &str| {
        Effects::none()
            .log(OrgEvent::new(
                m.org_id,
                kind,
                EventCategory::Admin,
                Actor::Admin,
                Some(Subject::new("user", m.user.uuid)),
                json!({ "user_uuid": m.user.uuid }),
                t(1),
            ))
            .event(NewEvent::new(
                m.org_id,
                kind,
                json!({ "user_uuid": m.user.uuid }),
                None,
                t(1),
            ))
    };
    let m = s
        .add_member(
            new_member(org.id, "erin@example.com", None, Role::Agent, 1),
            Box::new(move |m| log(m, "team.member_added")),
        )
        .await
        .unwrap();
    s.set_member_role(
        org.id,
        "erin@example.com",
        Role::Admin,
        t(2),
        Box::new(move |c| log(&c.after, "team.role_changed")),
    )
    .await
    .unwrap();
    s.remove_member(
        org.id,
        "erin@example.com",
        Box::new(move |m| log(m, "team.member_removed")),
    )
    .await
    .unwrap();
    let outbox: Vec<String> = s
        .list_outbox_events(org.id, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        outbox,
        [
            "team.member_added",
            "team.role_changed",
            "team.member_removed"
        ]
    );
    let logged = s.list_org_events(org.id, 10).await.unwrap();
    assert_eq!(logged.len(), 3);
    assert_eq!(
        logged[0].subject,
        Some(Subject::new("user", m.user.uuid)),
        "{logged:?}"
    );

    // Refused changes write none of their effects.
    let refused = [
        s.add_member(
            new_member(org.id, "erin@example.com", None, Role::Agent, 3),
            Box::new(move |m| log(m, "team.member_added")),
        )
        .await
        .map(|_| ()),
        s.add_member(
            new_member(org.id, "erin@example.com", None, Role::Agent, 3),
            Box::new(move |m| log(m, "team.member_added")),
        )
        .await
        .map(|_| ()),
        s.add_member(
            new_member(424242, "frank@example.com", None, Role::Agent, 3),
            Box::new(move |m| log(m, "team.member_added")),
        )
        .await
        .map(|_| ()),
        s.set_member_role(
            org.id,
            "nobody@example.com",
            Role::Admin,
            t(3),
            Box::new(move |c| log(&c.after, "team.role_changed")),
        )
        .await
        .map(|_| ()),
    ];
    assert!(refused[0].is_ok(), "re-adding after removal works");
    assert!(matches!(refused[1], Err(StoreError::Conflict(_))));
    assert!(matches!(refused[2], Err(StoreError::ForeignKeyViolation)));
    assert!(matches!(refused[3], Err(StoreError::NotFound)));
    assert_eq!(s.list_outbox_events(org.id, 10).await.unwrap().len(), 4);
    assert_eq!(s.list_org_events(org.id, 10).await.unwrap().len(), 4);
    assert!(s.list_outbox_events(424242, 10).await.unwrap().is_empty());
    // The failed addition to a missing organization created no user either.
    let frank = s
        .add_member(
            new_member(org.id, "frank@example.com", None, Role::Agent, 9),
            none(),
        )
        .await
        .unwrap();
    assert_eq!(frank.user.created_at, t(9));
}

async fn concurrent_additions_of_one_address_share_one_user(ts: &TestStore) {
    let s = &ts.store;
    let mut orgs = Vec::new();
    for i in 0..8 {
        orgs.push(s.create_org(&format!("O{i}"), t(0)).await.unwrap());
    }
    let mut tasks = Vec::new();
    for (i, org) in orgs.iter().enumerate() {
        let s = s.clone();
        let org_id = org.id;
        tasks.push(tokio::spawn(async move {
            s.add_member(
                new_member(org_id, "Shared@Example.com", None, Role::Agent, i as i64),
                Box::new(|_| Effects::none()),
            )
            .await
        }));
    }
    let mut uuids = std::collections::HashSet::new();
    for task in tasks {
        uuids.insert(task.await.unwrap().unwrap().user.uuid);
    }
    assert_eq!(uuids.len(), 1, "one person, one user");
}

fn entry(
    org_id: i64,
    kind: &str,
    category: EventCategory,
    actor: Actor,
    at: i64,
    n: i64,
) -> OrgEvent {
    OrgEvent::new(
        org_id,
        kind,
        category,
        actor,
        None,
        json!({ "n": n }),
        t(at),
    )
}

async fn org_log_filters_and_pages(ts: &TestStore) {
    let s = &ts.store;
    let org = s.create_org("A", t(0)).await.unwrap();
    let other = s.create_org("B", t(0)).await.unwrap();
    let key = |id: i64| Actor::ApiKey {
        api_key_id: id,
        api_key_prefix: format!("sbk_{id}"),
    };
    // n: 0..10, times 0,0,10,10,20,...: ties in time are ordered by id.
    let entries = vec![
        entry(
            org.id,
            "security.api_key_created",
            EventCategory::Security,
            Actor::Admin,
            0,
            0,
        ),
        entry(
            org.id,
            "team.member_added",
            EventCategory::Admin,
            Actor::Admin,
            0,
            1,
        ),
        entry(
            org.id,
            "team.role_changed",
            EventCategory::Admin,
            Actor::Admin,
            10,
            2,
        ),
        entry(
            org.id,
            "conversation.initiated",
            EventCategory::Audit,
            key(7),
            10,
            3,
        ),
        entry(
            org.id,
            "campaign_send.validated",
            EventCategory::Audit,
            key(8),
            20,
            4,
        ),
        entry(
            org.id,
            "campaign_send.refused",
            EventCategory::Audit,
            key(7),
            20,
            5,
        ),
        entry(
            org.id,
            "webhook_endpoint.disabled",
            EventCategory::Admin,
            Actor::System,
            30,
            6,
        ),
        entry(
            org.id,
            "teams.not_team",
            EventCategory::Admin,
            Actor::System,
            30,
            7,
        ),
        entry(
            org.id,
            "security.api_key_revoked",
            EventCategory::Security,
            key(7),
            40,
            8,
        ),
        entry(
            org.id,
            "team_x.member_added",
            EventCategory::Admin,
            Actor::Admin,
            50,
            9,
        ),
        entry(
            other.id,
            "team.member_added",
            EventCategory::Admin,
            Actor::Admin,
            5,
            100,
        ),
    ];
    for e in &entries {
        // One transaction each, in order, so ids follow the list.
        s.write_effects(Effects::none().log(e.clone()))
            .await
            .unwrap();
    }
    let run = |filter: OrgEventFilter| {
        let s = s.clone();
        async move {
            s.query_org_events(
                org.id,
                &OrgEventQuery {
                    filter,
                    before: None,
                    limit: 100,
                },
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.event.details["n"].as_i64().unwrap())
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        run(OrgEventFilter::default()).await,
        vec![9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
        "newest first, ties by id, never another organization's"
    );
    assert_eq!(
        run(OrgEventFilter {
            category: Some(EventCategory::Audit),
            ..Default::default()
        })
        .await,
        vec![5, 4, 3]
    );
    assert_eq!(
        run(OrgEventFilter {
            event_type: Some(TypeFilter::parse("team.member_added").unwrap()),
            ..Default::default()
        })
        .await,
        vec![1]
    );
    assert_eq!(
        run(OrgEventFilter {
            event_type: Some(TypeFilter::parse("team.*").unwrap()),
            ..Default::default()
        })
        .await,
        vec![2, 1],
        "a prefix is matched exactly: no `teams.` or `team_x.`"
    );
    assert_eq!(
        run(OrgEventFilter {
            event_type: Some(TypeFilter::parse("campaign_send.*").unwrap()),
            ..Default::default()
        })
        .await,
        vec![5, 4]
    );
    assert_eq!(
        run(OrgEventFilter {
            event_type: Some(TypeFilter::parse("no_such.type").unwrap()),
            ..Default::default()
        })
        .await,
        Vec::<i64>::new()
    );
    assert_eq!(
        run(OrgEventFilter {
            actor: Some(ActorFilter::ApiKey(Some(7))),
            ..Default::default()
        })
        .await,
        vec![8, 5, 3]
    );
    assert_eq!(
        run(OrgEventFilter {
            actor: Some(ActorFilter::ApiKey(None)),
            ..Default::default()
        })
        .await,
        vec![8, 5, 4, 3]
    );
    assert_eq!(
        run(OrgEventFilter {
            actor: Some(ActorFilter::System),
            ..Default::default()
        })
        .await,
        vec![7, 6]
    );
    assert_eq!(
        run(OrgEventFilter {
            actor: Some(ActorFilter::Admin),
            category: Some(EventCategory::Admin),
            ..Default::default()
        })
        .await,
        vec![9, 2, 1]
    );
    assert_eq!(
        run(OrgEventFilter {
            since: Some(t(10)),
            until: Some(t(30)),
            ..Default::default()
        })
        .await,
        vec![5, 4, 3, 2],
        "since inclusive, until exclusive"
    );
    assert_eq!(
        run(OrgEventFilter {
            since: Some(t(20)),
            until: Some(t(20)),
            ..Default::default()
        })
        .await,
        Vec::<i64>::new()
    );

    // Pages of 3 walk the whole list in order, also across ties in time, with a filter.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = s
            .query_org_events(
                org.id,
                &OrgEventQuery {
                    filter: OrgEventFilter {
                        category: Some(EventCategory::Admin),
                        ..Default::default()
                    },
                    before,
                    limit: 2,
                },
            )
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|r| (r.event.created_at, r.id));
        seen.extend(page.iter().map(|r| r.event.details["n"].as_i64().unwrap()));
    }
    assert_eq!(seen, vec![9, 7, 6, 2, 1]);

    // A prefix with more types than the loose index scan walks falls back to a scan, with the
    // same result.
    for i in 0..70 {
        s.write_effects(Effects::none().log(entry(
            org.id,
            &format!("bulk.t{:02}", (i * 37) % 70),
            EventCategory::Admin,
            Actor::System,
            60 + i / 3,
            1000 + i,
        )))
        .await
        .unwrap();
    }
    let bulk = run(OrgEventFilter {
        event_type: Some(TypeFilter::parse("bulk.*").unwrap()),
        ..Default::default()
    })
    .await;
    assert_eq!(bulk, (1000..1070).rev().collect::<Vec<_>>());
    let paged = s
        .query_org_events(
            org.id,
            &OrgEventQuery {
                filter: OrgEventFilter {
                    event_type: Some(TypeFilter::parse("bulk.*").unwrap()),
                    ..Default::default()
                },
                before: None,
                limit: 5,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        paged
            .iter()
            .map(|r| r.event.details["n"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![1069, 1068, 1067, 1066, 1065]
    );

    // Entries read back whole.
    let listed = s
        .query_org_events(
            org.id,
            &OrgEventQuery {
                filter: OrgEventFilter::default(),
                before: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    let revoked = listed
        .iter()
        .find(|r| r.event.event_type == "security.api_key_revoked")
        .unwrap();
    assert_eq!(revoked.event, entries[8]);
    assert_eq!(
        s.get_org_event(org.id, revoked.event.uuid).await.unwrap(),
        *revoked
    );
    assert!(matches!(
        s.get_org_event(other.id, revoked.event.uuid).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.get_org_event(org.id, Uuid::now_v7()).await,
        Err(StoreError::NotFound)
    ));
}

async fn org_log_is_append_only(ts: &TestStore) {
    let s = &ts.store;
    let org = s.create_org("A", t(0)).await.unwrap();
    s.write_effects(Effects::none().log(entry(
        org.id,
        "security.api_key_created",
        EventCategory::Security,
        Actor::Admin,
        0,
        0,
    )))
    .await
    .unwrap();
    for sql in [
        "UPDATE org_events SET type = 'tampered.entry'",
        "UPDATE org_events SET created_at = created_at",
        "DELETE FROM org_events",
    ] {
        let err = ts
            .raw_execute(sql)
            .await
            .expect_err("the database refuses to change the log");
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    if s.backend() == "postgres" {
        let err = ts.raw_execute("TRUNCATE org_events").await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }
    let log = s.list_org_events(org.id, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].event_type, "security.api_key_created");
    // Appending still works.
    s.write_effects(Effects::none().log(entry(
        org.id,
        "security.api_key_revoked",
        EventCategory::Security,
        Actor::Admin,
        1,
        1,
    )))
    .await
    .unwrap();
    assert_eq!(s.list_org_events(org.id, 10).await.unwrap().len(), 2);
}
