//! The core aggregates: settings, organizations, channels, keys, effects, concurrency and
//! migrations.

use std::sync::Arc;

use serde_json::json;

use crate::support::*;
use switchboard_domain::api_key;
use switchboard_domain::api_key::KeyHash;
use switchboard_domain::channel::ChannelStatus;
use switchboard_domain::event::Effects;
use switchboard_domain::event::{Actor, EventCategory, NewEvent, OrgEvent};
use switchboard_domain::scope::ScopeSet;
use switchboard_store::testing::TestStore;
use switchboard_store::*;

conformance!(
    settings_are_written_once,
    organizations,
    channels_and_constraint_mapping,
    keys_lifecycle,
    effects_are_written_with_the_change,
    concurrent_writers_never_fail,
    migrations_are_idempotent,
    a_generation_reader_sees_changes_and_outlives_its_connection,
);

async fn settings_are_written_once(s: SharedStore) {
    assert_eq!(s.get_setting("k").await.unwrap(), None);
    assert_eq!(s.init_setting("k", b"first").await.unwrap(), b"first");
    assert_eq!(s.init_setting("k", b"second").await.unwrap(), b"first");
    assert_eq!(s.get_setting("k").await.unwrap().unwrap(), b"first");
    s.ping().await.unwrap();
}

async fn organizations(s: SharedStore) {
    let a = s.create_org("Acme", t(1)).await.unwrap();
    let b = s.create_org("Beta", t(2)).await.unwrap();
    assert!(b.id > a.id);
    assert_eq!(s.get_org(a.id).await.unwrap(), a);
    assert_eq!(
        a.created_at,
        t(1),
        "times round-trip at millisecond precision"
    );
    assert!(matches!(s.get_org(9999).await, Err(StoreError::NotFound)));
    assert_eq!(s.list_orgs().await.unwrap().len(), 2);
}

async fn channels_and_constraint_mapping(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let c1 = s
        .create_channel(new_channel(org.id, None, "Sales Team", true), no_effects())
        .await
        .unwrap();
    assert_eq!(c1.slug, "sales-team");
    assert!(c1.is_default);
    let c2 = s
        .create_channel(new_channel(org.id, None, "Sales Team", true), no_effects())
        .await
        .unwrap();
    assert_eq!(c2.slug, "sales-team-2");
    // The new default replaced the old one.
    assert!(!s.get_channel(c1.id).await.unwrap().is_default);
    assert!(s.get_channel(c2.id).await.unwrap().is_default);
    // A taken explicit slug is a unique violation on both backends.
    let dup = s
        .create_channel(
            new_channel(org.id, Some("sales-team"), "x", false),
            no_effects(),
        )
        .await;
    assert!(
        matches!(dup, Err(StoreError::UniqueViolation(_))),
        "{dup:?}"
    );
    // ... but not in another organization.
    s.create_channel(
        new_channel(other.id, Some("sales-team"), "x", false),
        no_effects(),
    )
    .await
    .unwrap();
    // A missing organization is a foreign-key violation on both backends.
    let fk = s
        .create_channel(new_channel(424242, None, "x", false), no_effects())
        .await;
    assert!(matches!(fk, Err(StoreError::ForeignKeyViolation)), "{fk:?}");

    let listed = s.list_channels(org.id).await.unwrap();
    assert_eq!(
        listed.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![c1.id, c2.id]
    );
    assert_eq!(s.get_channel_by_uuid(c1.uuid).await.unwrap().id, c1.id);
    assert_eq!(
        s.get_channel_provider_config(c1.id).await.unwrap(),
        Some(vec![1, 2, 3])
    );

    let patched = s
        .update_channel(
            c1.id,
            ChannelPatch {
                name: Some("Renamed".into()),
                status: Some(ChannelStatus::Inactive),
                make_default: true,
                ..Default::default()
            },
            t(5),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(
        (patched.name.as_str(), patched.status, patched.is_default),
        ("Renamed", ChannelStatus::Inactive, true)
    );
    assert_eq!(patched.updated_at, t(5));
    assert_eq!(
        patched.slug, "sales-team",
        "the slug is stable across renames"
    );
    assert!(!s.get_channel(c2.id).await.unwrap().is_default);
    assert_eq!(
        s.get_channel_provider_config(c1.id).await.unwrap(),
        Some(vec![1, 2, 3]),
        "kept when not replaced"
    );
    let slug_clash = s
        .update_channel(
            c1.id,
            ChannelPatch {
                slug: Some("sales-team-2".into()),
                ..Default::default()
            },
            t(6),
            no_effects(),
        )
        .await;
    assert!(
        matches!(slug_clash, Err(StoreError::UniqueViolation(_))),
        "{slug_clash:?}"
    );
    assert!(matches!(
        s.update_channel(9999, ChannelPatch::default(), t(6), no_effects())
            .await,
        Err(StoreError::NotFound)
    ));
}

async fn keys_lifecycle(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let g = api_key::generate();
    let new = NewApiKey {
        org_id: org.id,
        name: "crm".into(),
        prefix: g.display_prefix.clone(),
        key_hash: g.hash,
        scopes: Some(ScopeSet::parse_list("channels:read").unwrap()),
        legacy: false,
        default_channel_id: None,
        expires_at: Some(t(1000)),
        created_at: t(0),
    };
    let k = s.create_api_key(new.clone(), no_effects()).await.unwrap();
    assert_eq!(s.find_api_key_by_hash(&g.hash).await.unwrap().unwrap(), k);
    assert_eq!(k.expires_at, Some(t(1000)));
    assert!(
        s.find_api_key_by_hash(&KeyHash::of("nope"))
            .await
            .unwrap()
            .is_none()
    );
    // The same hash twice is a unique violation.
    assert!(matches!(
        s.create_api_key(new, no_effects()).await,
        Err(StoreError::UniqueViolation(_))
    ));
    // A key without a scope list is a wildcard key.
    let legacy = s
        .create_api_key(
            NewApiKey {
                org_id: org.id,
                name: "legacy".into(),
                prefix: "leg".into(),
                key_hash: KeyHash::of("legacy-value"),
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
    assert_eq!(legacy.effective_scopes(), ScopeSet::Wildcard);

    s.touch_api_key(k.id, t(50)).await.unwrap();
    assert_eq!(s.get_api_key(k.id).await.unwrap().last_used_at, Some(t(50)));

    let g2 = api_key::generate();
    let (old, rotated) = s
        .rotate_api_key(
            k.id,
            g2.hash,
            g2.display_prefix.clone(),
            t(60),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(old.revoked_at, Some(t(60)));
    assert_eq!(old.revoked_reason.as_deref(), Some("rotated"));
    assert_eq!(rotated.scopes, k.scopes);
    assert_eq!(rotated.expires_at, k.expires_at);
    assert_ne!(rotated.id, k.id);
    assert!(matches!(
        s.rotate_api_key(
            k.id,
            api_key::generate().hash,
            "x".into(),
            t(61),
            no_effects()
        )
        .await,
        Err(StoreError::Conflict(_))
    ));

    let revoked = s
        .revoke_api_key(legacy.id, "revoked", t(70), no_effects())
        .await
        .unwrap();
    assert_eq!(revoked.revoked_at, Some(t(70)));
    assert!(matches!(
        s.revoke_api_key(legacy.id, "revoked", t(71), no_effects())
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.revoke_api_key(9999, "revoked", t(71), no_effects()).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(s.list_api_keys(org.id).await.unwrap().len(), 3);
}

async fn effects_are_written_with_the_change(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut signal = s.event_signal();
    signal.borrow_and_update();
    let g = api_key::generate();
    let k = s
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
            Box::new(|k| {
                Effects::none()
                    .event(NewEvent::new(
                        k.org_id,
                        "security.api_key_created",
                        json!({"api_key_id": k.id}),
                        None,
                        t(0),
                    ))
                    .log(OrgEvent::new(
                        k.org_id,
                        "security.api_key_created",
                        EventCategory::Security,
                        Actor::Admin,
                        None,
                        json!({}),
                        t(0),
                    ))
            }),
        )
        .await
        .unwrap();
    // The event streams are woken after the commit (the dispatcher only when deliveries were
    // written: `committed_deliveries_wake_the_dispatchers`).
    tokio::time::timeout(std::time::Duration::from_secs(1), signal.changed())
        .await
        .expect("outbox signal")
        .unwrap();
    let events = s.list_outbox_events(org.id, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["api_key_id"], k.id);
    assert_eq!(s.list_org_events(org.id, 10).await.unwrap().len(), 1);

    // A change that fails writes none of its effects.
    let failed = s
        .create_channel(
            new_channel(424242, None, "x", false),
            Box::new(|c| {
                Effects::none().event(NewEvent::new(
                    c.org_id,
                    "channel.connected",
                    json!({}),
                    None,
                    t(0),
                ))
            }),
        )
        .await;
    assert!(failed.is_err());
    assert_eq!(s.list_outbox_events(424242, 10).await.unwrap().len(), 0);
    assert_eq!(s.list_outbox_events(org.id, 10).await.unwrap().len(), 1);
}

async fn concurrent_writers_never_fail(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let c = s
                .create_channel(new_channel(org.id, None, "Busy", i % 7 == 0), no_effects())
                .await?;
            s.update_channel(
                c.id,
                ChannelPatch {
                    make_default: i % 5 == 0,
                    ..Default::default()
                },
                t(i),
                no_effects(),
            )
            .await?;
            Ok::<_, StoreError>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let channels = s.list_channels(org.id).await.unwrap();
    assert_eq!(channels.len(), 64);
    assert_eq!(channels.iter().filter(|c| c.is_default).count(), 1);
}

async fn migrations_are_idempotent(s: SharedStore) {
    s.migrate().await.unwrap();
    s.migrate().await.unwrap();
}

fn sqlite_writers_in_two_processes() {
    crate::run_async(
        4,
        sqlite_writers_in_two_processes_never_see_database_is_locked(),
    )
}
switchboard_testkit::register!(
    "sqlite_writers_in_two_processes_never_see_database_is_locked",
    sqlite_writers_in_two_processes
);

async fn sqlite_writers_in_two_processes_never_see_database_is_locked() {
    // Two stores on one file behave like the server and the admin tools in two processes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a: SharedStore = Arc::new(SqliteStore::connect(&path, 4).await.unwrap());
    a.migrate().await.unwrap();
    let b: SharedStore = Arc::new(SqliteStore::connect(&path, 4).await.unwrap());
    let org = a.create_org("Acme", t(0)).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..100 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let c = s
                .create_channel(new_channel(org.id, None, "Busy", false), no_effects())
                .await?;
            s.update_channel(
                c.id,
                ChannelPatch {
                    make_default: true,
                    ..Default::default()
                },
                t(i),
                no_effects(),
            )
            .await
        }));
    }
    for t in tasks {
        t.await.unwrap().expect("no write fails under concurrency");
    }
    assert_eq!(a.list_channels(org.id).await.unwrap().len(), 100);
}

switchboard_testkit::register!(
    "both_backends_have_the_same_migrations",
    both_backends_have_the_same_migrations
);
fn both_backends_have_the_same_migrations() {
    let names = |dir: &str| {
        let mut v: Vec<String> =
            std::fs::read_dir(format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR")))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
        v.sort();
        v
    };
    assert_eq!(
        names("sqlite"),
        names("postgres"),
        "every migration exists for both backends, with the same name"
    );
}

/// The cache's poller reads the configuration generation on a connection it keeps: it sees
/// every change to channels, and a kept connection that the database closed (a restart, an
/// administrator's `pg_terminate_backend`) costs no failed read.
async fn a_generation_reader_sees_changes_and_outlives_its_connection(ts: &TestStore) {
    let s = &ts.store;
    let mut reader = s.generation_reader();
    let first = reader.read().await.unwrap();
    assert_eq!(first, s.config_generation().await.unwrap());
    assert_eq!(reader.read().await.unwrap(), first, "nothing changed");
    let org = s.create_org("Acme", t(0)).await.unwrap();
    s.create_channel(new_channel(org.id, None, "Sales", true), no_effects())
        .await
        .unwrap();
    let second = reader.read().await.unwrap();
    assert!(second > first, "a new channel moves the generation");
    if ts.backend() == "postgres" {
        // Every connection of the store is closed by the server, the kept one among them.
        ts.raw_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();
    }
    assert_eq!(reader.read().await.unwrap(), second);
    s.create_channel(new_channel(org.id, None, "Support", false), no_effects())
        .await
        .unwrap();
    assert!(reader.read().await.unwrap() > second);
}
