//! Issue 6: organization data reads. Members with roles and effective permissions
//! (`GET /users`, `admin user ...`), the permission and scope catalogues (`GET /permissions`),
//! and the organization's audit, admin and security log (`GET /events`).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use switchboard_domain::Timestamp;
use switchboard_domain::event::{Actor, Effects, EventCategory, OrgEvent, Subject};

use crate::both_backends;
use crate::support::{Backend, Resp, Server, TestEnv};

both_backends!(
    users_show_memberships_roles_and_effective_permissions,
    grants_revocations_and_resets_change_effective_permissions,
    admin_user_commands_refuse_bad_input_and_change_nothing,
    user_operations_leave_log_entries_and_webhook_events,
    org_data_endpoints_require_their_scopes,
    org_data_is_isolated_between_organizations,
    permissions_catalogue_lists_permissions_roles_and_scopes,
    events_are_filtered_by_category_type_actor_and_time,
    events_bad_filters_are_400_naming_the_parameter,
    events_and_users_paginate_across_pages,
    existing_operations_leave_their_events,
    org_events_cannot_be_changed_in_the_database,
);

const USERS: &str = "/api/v1/integrations/users";
const PERMISSIONS: &str = "/api/v1/integrations/permissions";
const EVENTS: &str = "/api/v1/integrations/events";

/// The store of the test's database, for fixtures the API cannot create (log entries written
/// by API keys and the system, at chosen times).
async fn store(env: &TestEnv) -> switchboard_store::SharedStore {
    let config = switchboard::config::Config::from_sources(
        &env.base_env().into_iter().collect(),
        None,
        None,
    )
    .unwrap();
    switchboard_store::connect(&config.database_url, config.database_max_connections)
        .await
        .unwrap()
}

fn at(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn data(r: &Resp) -> Vec<Value> {
    r.body["data"].as_array().expect("a list").clone()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn member<'a>(list: &'a [Value], email: &str) -> &'a Value {
    list.iter()
        .find(|u| u["email"].as_str().unwrap().eq_ignore_ascii_case(email))
        .unwrap_or_else(|| panic!("{email} in {list:?}"))
}

async fn add_user(env: &TestEnv, org: i64, email: &str, role: &str) -> Value {
    env.admin(&[
        "user",
        "add",
        "--org",
        &org.to_string(),
        "--email",
        email,
        "--role",
        role,
    ])
    .await
}

/// Every entry of the organization's log, following the cursor.
async fn all_events(server: &Server, key: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{EVENTS}?limit=200");
        if !query.is_empty() {
            path.push('&');
            path.push_str(query);
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let r = server.get(&path, key).await.expect(200);
        out.extend(data(&r));
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    out
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

async fn users_show_memberships_roles_and_effective_permissions(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let alice = env
        .admin(&[
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "alice@example.com",
            "--name",
            "Alice Smith",
            "--role",
            "owner",
        ])
        .await;
    let bob = add_user(&env, seed.org_id, "Bob@Example.com", "agent").await;
    add_user(&env, seed.org_id, "carol@example.com", "viewer").await;

    // The admin tool prints the user object.
    assert_eq!(alice["email"], "alice@example.com");
    assert_eq!(alice["name"], "Alice Smith");
    assert_eq!(alice["role"], "owner");
    assert!(alice["uuid"].is_string());
    assert_eq!(bob["name"], Value::Null);
    assert_eq!(bob["email"], "Bob@Example.com", "the address as given");

    let server = env.start(&[]).await;
    let r = server.get(USERS, &seed.key).await.expect(200);
    assert_eq!(r.body["has_more"], false);
    assert_eq!(r.body["next_cursor"], Value::Null);
    let list = data(&r);
    assert_eq!(
        list.iter()
            .map(|u| u["email"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["alice@example.com", "Bob@Example.com", "carol@example.com"],
        "oldest membership first"
    );
    for u in &list {
        for field in [
            "uuid",
            "email",
            "role",
            "roles",
            "membership",
            "permissions",
            "permission_overrides",
            "created_at",
        ] {
            assert!(!u[field].is_null(), "{field} in {u}");
        }
        assert_eq!(u["membership"]["status"], "active");
        assert_eq!(u["membership"]["role"], u["role"]);
        assert_eq!(u["roles"], json!([u["role"]]));
        let perms = strings(&u["permissions"]);
        let mut sorted = perms.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(perms, sorted, "effective permissions are sorted: {u}");
        assert!(
            u["membership"]["created_at"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
    }
    // Exactly what the admin tool printed.
    assert_eq!(member(&list, "bob@example.com"), &bob);
    assert_eq!(member(&list, "alice@example.com")["name"], "Alice Smith");

    let set = |email: &str| -> BTreeSet<String> {
        strings(&member(&list, email)["permissions"])
            .into_iter()
            .collect()
    };
    let (owner, agent, viewer) = (
        set("alice@example.com"),
        set("bob@example.com"),
        set("carol@example.com"),
    );
    assert!(
        agent.is_subset(&owner) && agent.len() < owner.len(),
        "an agent has fewer permissions than an owner"
    );
    assert!(owner.contains("billing.manage") && owner.contains("users.manage"));
    assert!(agent.contains("messages.send") && !agent.contains("users.manage"));
    assert!(viewer.contains("messages.read") && !viewer.contains("messages.send"));

    // No credential of any kind is shown (none is stored).
    let text = r.text.to_lowercase();
    for word in ["password", "hash", "secret", "token"] {
        assert!(!text.contains(word), "{word} in {}", r.text);
    }

    // The role filter.
    let agents = server
        .get(&format!("{USERS}?role=agent"), &seed.key)
        .await
        .expect(200);
    assert_eq!(
        data(&agents)
            .iter()
            .map(|u| u["email"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["Bob@Example.com"]
    );

    // A role change shows at once.
    let promoted = env
        .admin(&[
            "user",
            "role",
            "--org",
            &org,
            "--email",
            "BOB@example.com",
            "--role",
            "manager",
        ])
        .await;
    assert_eq!(promoted["role"], "manager");
    let r = server.get(USERS, &seed.key).await.expect(200);
    let bob_now = member(&data(&r), "bob@example.com").clone();
    assert_eq!(bob_now, promoted);
    assert!(strings(&bob_now["permissions"]).contains(&"campaigns.manage".to_owned()));

    // The address is unique without regard to case: the same person in another organization.
    let dup = env
        .admin_raw(&[
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "ALICE@EXAMPLE.COM",
            "--role",
            "agent",
        ])
        .await;
    assert!(
        !dup.success && dup.stderr.contains("already a member"),
        "{}",
        dup.stderr
    );
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let alice_elsewhere = add_user(
        &env,
        other["id"].as_i64().unwrap(),
        "Alice@Example.COM",
        "viewer",
    )
    .await;
    assert_eq!(alice_elsewhere["uuid"], alice["uuid"]);
    assert_eq!(alice_elsewhere["role"], "viewer");
    let r = server.get(USERS, &seed.key).await.expect(200);
    assert_eq!(
        member(&data(&r), "alice@example.com")["role"],
        "owner",
        "each organization keeps its own role"
    );

    // Removal.
    let removed = env
        .admin(&[
            "user",
            "remove",
            "--org",
            &org,
            "--email",
            "carol@example.com",
        ])
        .await;
    assert_eq!(removed["removed"], true);
    let r = server.get(USERS, &seed.key).await.expect(200);
    assert_eq!(data(&r).len(), 2);
    let listed = env.admin(&["user", "list", "--org", &org]).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);
    let shown = env
        .admin(&[
            "user",
            "show",
            "--org",
            &org,
            "--email",
            "alice@example.com",
        ])
        .await;
    assert_eq!(shown["uuid"], alice["uuid"]);
}

async fn grants_revocations_and_resets_change_effective_permissions(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let original = add_user(&env, seed.org_id, "bob@example.com", "agent").await;
    let base = strings(&original["permissions"]);
    assert!(!base.contains(&"reports.view".to_owned()));
    assert!(base.contains(&"messages.send".to_owned()));
    let server = env.start(&[]).await;
    let perm = |flag: &'static str, p: &'static str| {
        let org = org.clone();
        let env = &env;
        async move {
            env.admin(&[
                "user",
                "permission",
                "--org",
                &org,
                "--email",
                "bob@example.com",
                flag,
                p,
            ])
            .await
        }
    };
    let read = || async {
        let r = server.get(USERS, &seed.key).await.expect(200);
        member(&data(&r), "bob@example.com").clone()
    };

    let granted = perm("--grant", "reports.view").await;
    assert!(strings(&granted["permissions"]).contains(&"reports.view".to_owned()));
    assert_eq!(
        granted["permission_overrides"],
        json!({"granted": ["reports.view"], "revoked": []})
    );
    assert_eq!(read().await, granted, "the API shows the grant");

    let revoked = perm("--revoke", "messages.send").await;
    let now = strings(&revoked["permissions"]);
    assert!(!now.contains(&"messages.send".to_owned()));
    assert!(now.contains(&"reports.view".to_owned()));
    assert_eq!(
        revoked["permission_overrides"],
        json!({"granted": ["reports.view"], "revoked": ["messages.send"]})
    );
    assert_eq!(read().await, revoked);

    // Overrides are kept across a role change; the owner role does not bring back a revoked
    // permission.
    let owner = env
        .admin(&[
            "user",
            "role",
            "--org",
            &org,
            "--email",
            "bob@example.com",
            "--role",
            "owner",
        ])
        .await;
    assert!(!strings(&owner["permissions"]).contains(&"messages.send".to_owned()));
    assert!(strings(&owner["permissions"]).contains(&"billing.manage".to_owned()));
    env.admin(&[
        "user",
        "role",
        "--org",
        &org,
        "--email",
        "bob@example.com",
        "--role",
        "agent",
    ])
    .await;

    // Reset restores what the role decides.
    perm("--reset", "reports.view").await;
    let restored = perm("--reset", "messages.send").await;
    assert_eq!(strings(&restored["permissions"]), base);
    assert_eq!(
        restored["permission_overrides"],
        json!({"granted": [], "revoked": []})
    );
    assert_eq!(read().await["permissions"], original["permissions"]);

    // Granting what the role has already is kept as an override; granting twice changes
    // nothing and records nothing.
    let before = all_events(&server, &seed.key, "type=team.*").await.len();
    perm("--grant", "messages.send").await;
    let twice = perm("--grant", "messages.send").await;
    assert_eq!(strings(&twice["permissions"]), base);
    assert_eq!(
        twice["permission_overrides"]["granted"],
        json!(["messages.send"])
    );
    let after = all_events(&server, &seed.key, "type=team.*").await.len();
    assert_eq!(after, before + 1, "one entry for one change");
}

async fn admin_user_commands_refuse_bad_input_and_change_nothing(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    add_user(&env, seed.org_id, "bob@example.com", "agent").await;
    let server = env.start(&[]).await;
    let snapshot = || async {
        (
            server.get(USERS, &seed.key).await.expect(200).body,
            all_events(&server, &seed.key, "").await,
        )
    };
    let before = snapshot().await;
    let refusals: Vec<Vec<&str>> = vec![
        vec![
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "not-an-address",
            "--role",
            "agent",
        ],
        vec![
            "user", "add", "--org", &org, "--email", "", "--role", "agent",
        ],
        vec![
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "new@example.com",
            "--role",
            "boss",
        ],
        vec![
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "new@example.com",
            "--role",
            "Owner",
        ],
        vec!["user", "add", "--org", &org, "--email", "new@example.com"],
        vec![
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "new@example.com",
            "--name",
            "   ",
            "--role",
            "agent",
        ],
        vec![
            "user",
            "add",
            "--org",
            "999999",
            "--email",
            "new@example.com",
            "--role",
            "agent",
        ],
        vec![
            "user",
            "add",
            "--org",
            "abc",
            "--email",
            "new@example.com",
            "--role",
            "agent",
        ],
        vec![
            "user",
            "add",
            "--org",
            &org,
            "--email",
            "BOB@example.com",
            "--role",
            "agent",
        ],
        vec![
            "user",
            "role",
            "--org",
            &org,
            "--email",
            "nobody@example.com",
            "--role",
            "agent",
        ],
        vec![
            "user",
            "role",
            "--org",
            &org,
            "--email",
            "bob@example.com",
            "--role",
            "superuser",
        ],
        vec![
            "user",
            "role",
            "--org",
            "999999",
            "--email",
            "bob@example.com",
            "--role",
            "admin",
        ],
        vec![
            "user",
            "permission",
            "--org",
            &org,
            "--email",
            "bob@example.com",
            "--grant",
            "messages.delete_everything",
        ],
        vec![
            "user",
            "permission",
            "--org",
            &org,
            "--email",
            "bob@example.com",
        ],
        vec![
            "user",
            "permission",
            "--org",
            &org,
            "--email",
            "bob@example.com",
            "--grant",
            "reports.view",
            "--revoke",
            "messages.send",
        ],
        vec![
            "user",
            "permission",
            "--org",
            &org,
            "--email",
            "nobody@example.com",
            "--grant",
            "reports.view",
        ],
        vec![
            "user",
            "remove",
            "--org",
            &org,
            "--email",
            "nobody@example.com",
        ],
        vec![
            "user",
            "remove",
            "--org",
            "999999",
            "--email",
            "bob@example.com",
        ],
        vec![
            "user",
            "remove",
            "--org",
            &org,
            "--email",
            "bob@@example.com",
        ],
        vec![
            "user",
            "show",
            "--org",
            &org,
            "--email",
            "nobody@example.com",
        ],
        vec!["user", "list", "--org", "999999"],
    ];
    for args in &refusals {
        let out = env.admin_raw(args).await;
        assert!(!out.success, "{args:?} must fail");
        assert!(
            out.stdout.trim().is_empty(),
            "{args:?} prints nothing on stdout: {}",
            out.stdout
        );
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: one line on stderr, got {:?}",
            out.stderr
        );
    }
    assert_eq!(snapshot().await, before, "refused commands change nothing");

    // Help exists.
    for args in [
        &["admin", "user", "--help"][..],
        &["admin", "user", "add", "--help"],
        &["admin", "user", "permission", "--help"],
    ] {
        let out = env.run(args, &[]).await;
        assert!(
            out.success && out.stdout.contains("Usage"),
            "{args:?}: {}",
            out.stdout
        );
    }
    // Without --json, a readable line.
    let out = env
        .run(
            &[
                "admin",
                "user",
                "add",
                "--org",
                &org,
                "--email",
                "dan@example.com",
                "--role",
                "viewer",
            ],
            &[],
        )
        .await;
    assert!(
        out.success && out.stdout.starts_with("added dan@example.com"),
        "{}",
        out.stdout
    );
}

async fn user_operations_leave_log_entries_and_webhook_events(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let bob = add_user(&env, seed.org_id, "Bob@Example.com", "agent").await;
    let uuid = bob["uuid"].as_str().unwrap().to_owned();
    let with = |cmd: &'static str, extra: [&'static str; 2]| {
        let org = org.clone();
        let env = &env;
        async move {
            env.admin(&[
                "user",
                cmd,
                "--org",
                &org,
                "--email",
                "bob@example.com",
                extra[0],
                extra[1],
            ])
            .await
        }
    };
    with("role", ["--role", "manager"]).await;
    with("role", ["--role", "manager"]).await; // no change: nothing recorded
    with("permission", ["--grant", "billing.view"]).await;
    with("permission", ["--revoke", "messages.send"]).await;
    with("permission", ["--reset", "billing.view"]).await;
    env.admin(&[
        "user",
        "remove",
        "--org",
        &org,
        "--email",
        "bob@example.com",
    ])
    .await;

    let server = env.start(&[]).await;
    let mut log = all_events(&server, &seed.key, "type=team.*").await;
    log.reverse(); // oldest first
    assert_eq!(
        types(&log),
        vec![
            "team.member_added",
            "team.role_changed",
            "team.permission_granted",
            "team.permission_revoked",
            "team.permission_reset",
            "team.member_removed",
        ]
    );
    for e in &log {
        assert_eq!(e["category"], "admin");
        assert_eq!(e["actor"], json!({"type": "admin"}));
        assert_eq!(e["subject"], json!({"type": "user", "id": uuid}));
        assert_eq!(e["details"]["user_uuid"], uuid.as_str());
        let text = e.to_string().to_lowercase();
        assert!(
            !text.contains("bob@example.com"),
            "the permanent log names users by UUID only: {e}"
        );
        assert!(e["uuid"].is_string() && e["created_at"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(log[0]["details"]["role"], "agent");
    assert_eq!(log[1]["details"]["role"], "manager");
    assert_eq!(log[1]["details"]["previous_role"], "agent");
    assert_eq!(log[2]["details"]["permission"], "billing.view");
    assert!(strings(&log[2]["details"]["permissions"]).contains(&"billing.view".to_owned()));
    assert_eq!(log[3]["details"]["permission"], "messages.send");
    assert_eq!(log[4]["details"]["previous_override"], "grant");
    assert_eq!(log[5]["details"]["role"], "manager");

    // The webhook catalogue's team.* events went to the outbox in the same transactions.
    let store = store(&env).await;
    let outbox: Vec<_> = store
        .list_outbox_events(seed.org_id, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.name.starts_with("team."))
        .collect();
    assert_eq!(
        outbox.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        vec![
            "team.member_added",
            "team.role_changed",
            "team.member_removed"
        ]
    );
    for e in &outbox {
        assert_eq!(e.data["user_uuid"], uuid.as_str());
        assert_eq!(e.data["email"], "Bob@Example.com");
        assert!(e.channel.is_none());
    }
    assert_eq!(outbox[0].data["role"], "agent");
    assert_eq!(
        (&outbox[1].data["role"], &outbox[1].data["previous_role"]),
        (&json!("manager"), &json!("agent"))
    );
    assert_eq!(outbox[2].data["role"], "manager");
}

async fn org_data_endpoints_require_their_scopes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    add_user(&env, seed.org_id, "bob@example.com", "agent").await;
    let narrow = env.key(seed.org_id, "channels:read,messages:write").await;
    let server = env.start(&[]).await;
    let first_event = data(&server.get(EVENTS, &seed.key).await.expect(200))[0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let one_event = format!("{EVENTS}/{first_event}");
    for (path, scope) in [
        (USERS, "users:read"),
        (PERMISSIONS, "permissions:read"),
        (EVENTS, "events:read"),
        (one_event.as_str(), "events:read"),
    ] {
        let r = server
            .get(path, &narrow)
            .await
            .expect_error(403, "insufficient_scope");
        assert_eq!(
            r.body["error"]["details"]["required_scope"], scope,
            "{path}"
        );
        // A scope check comes before any parameter check.
        server
            .get(&format!("{path}?limit=0&bogus=1"), &narrow)
            .await
            .expect_error(403, "insufficient_scope");
        let only = env.key(seed.org_id, scope).await;
        server.get(path, &only).await.expect(200);
        // Another org-data scope is not enough.
        let wrong = if scope == "users:read" {
            "events:read"
        } else {
            "users:read"
        };
        let wrong = env.key(seed.org_id, wrong).await;
        server
            .get(path, &wrong)
            .await
            .expect_error(403, "insufficient_scope");
        server
            .call(reqwest::Method::GET, path, None, None)
            .await
            .expect_error(401, "missing_api_key");
    }
    // Pre-scope (legacy) keys act as wildcard keys.
    env.admin(&[
        "key",
        "import-legacy",
        "--org",
        &seed.org_id.to_string(),
        "--key",
        "legacy-plaintext-key-for-org-data",
    ])
    .await;
    for path in [USERS, PERMISSIONS, EVENTS] {
        server
            .get(path, "legacy-plaintext-key-for-org-data")
            .await
            .expect(200);
    }
}

async fn org_data_is_isolated_between_organizations(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let a = env.seed().await;
    let b = env.seed().await;
    add_user(&env, a.org_id, "alice@a.example", "owner").await;
    add_user(&env, b.org_id, "bert@b.example", "admin").await;
    add_user(&env, b.org_id, "shared@example.com", "owner").await;
    add_user(&env, a.org_id, "shared@example.com", "viewer").await;
    let b_only_key = env
        .admin(&[
            "key",
            "create",
            "--org",
            &b.org_id.to_string(),
            "--scopes",
            "*",
        ])
        .await;
    let server = env.start(&[]).await;

    let users_a = data(&server.get(USERS, &a.key).await.expect(200));
    let emails: Vec<&str> = users_a
        .iter()
        .map(|u| u["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, vec!["alice@a.example", "shared@example.com"]);
    assert_eq!(
        member(&users_a, "shared@example.com")["role"],
        "viewer",
        "A sees A's membership only"
    );
    let users_b = data(&server.get(USERS, &b.key).await.expect(200));
    assert!(users_b.iter().all(|u| u["email"] != "alice@a.example"));
    assert_eq!(member(&users_b, "shared@example.com")["role"], "owner");

    let events_a = all_events(&server, &a.key, "").await;
    let events_b = all_events(&server, &b.key, "").await;
    let uuids_b: BTreeSet<String> = events_b
        .iter()
        .map(|e| e["uuid"].as_str().unwrap().to_owned())
        .collect();
    assert!(!events_a.is_empty() && !events_b.is_empty());
    for e in &events_a {
        assert!(!uuids_b.contains(e["uuid"].as_str().unwrap()));
        assert_ne!(e["details"]["api_key_id"], b_only_key["id"], "{e}");
        assert_ne!(e["details"]["api_key_id"], b.key_id, "{e}");
    }
    assert!(
        events_b
            .iter()
            .any(|e| e["details"]["api_key_id"] == b_only_key["id"])
    );
    // Another organization's entry is a 404, like an unknown one.
    let theirs = events_b[0]["uuid"].as_str().unwrap();
    server
        .get(&format!("{EVENTS}/{theirs}"), &a.key)
        .await
        .expect_error(404, "not_found");
    server
        .get(&format!("{EVENTS}/{theirs}"), &b.key)
        .await
        .expect(200);
    for bad in ["not-a-uuid", "00000000-0000-0000-0000-000000000000"] {
        server
            .get(&format!("{EVENTS}/{bad}"), &a.key)
            .await
            .expect_error(404, "not_found");
    }
}

async fn permissions_catalogue_lists_permissions_roles_and_scopes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let key = env.key(seed.org_id, "permissions:read").await;
    let server = env.start(&[]).await;
    let r = server.get(PERMISSIONS, &key).await.expect(200);
    let c = &r.body;

    let permissions = c["permissions"].as_array().unwrap();
    let names: Vec<&str> = permissions
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for expected in [
        "messages.send",
        "messages.read",
        "contacts.manage",
        "contacts.read",
        "conversations.manage",
        "templates.manage",
        "campaigns.manage",
        "webhooks.manage",
        "channels.manage",
        "users.manage",
        "billing.view",
        "billing.manage",
        "reports.view",
        "settings.manage",
        "audit.view",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    for p in permissions {
        assert!(
            p["description"].as_str().unwrap().len() > 10,
            "{p} has a description"
        );
    }

    let roles = c["roles"].as_array().unwrap();
    assert_eq!(
        roles
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["owner", "admin", "manager", "agent", "viewer"]
    );
    let role_perms = |name: &str| -> BTreeSet<String> {
        strings(&roles.iter().find(|r| r["name"] == name).unwrap()["permissions"])
            .into_iter()
            .collect()
    };
    assert_eq!(role_perms("owner").len(), names.len());
    assert!(role_perms("agent").is_subset(&role_perms("owner")));
    for r in roles {
        assert!(r["description"].as_str().unwrap().len() > 10);
        for p in strings(&r["permissions"]) {
            assert!(names.contains(&p.as_str()), "{p} is in the catalogue");
        }
    }

    // The scopes of specification section 5, each with what it allows.
    let scopes = c["scopes"].as_array().unwrap();
    let spec = [
        "channels:read",
        "contacts:read",
        "contacts:write",
        "groups:read",
        "groups:write",
        "messages:read",
        "messages:write",
        "campaigns:write",
        "templates:read",
        "canned_replies:read",
        "canned_replies:write",
        "users:read",
        "permissions:read",
        "events:read",
        "webhooks:read",
        "webhooks:write",
        "flow:read",
        "flow:write",
        "*",
    ];
    assert_eq!(scopes.len(), spec.len());
    let allows = |scope: &str, method: &str, path: &str| {
        scopes
            .iter()
            .find(|s| s["name"] == scope)
            .unwrap_or_else(|| panic!("scope {scope}"))["endpoints"]
            .as_array()
            .unwrap()
            .contains(&json!({"method": method, "path": path}))
    };
    for s in spec {
        let entry = scopes.iter().find(|x| x["name"] == s).unwrap();
        assert!(entry["description"].as_str().unwrap().len() > 10);
        assert!(
            !entry["endpoints"].as_array().unwrap().is_empty(),
            "{s} allows something"
        );
    }
    for (scope, method, path) in [
        ("channels:read", "GET", "/api/v1/integrations/channels"),
        ("messages:read", "GET", "/api/v1/integrations/messages"),
        ("messages:write", "POST", "/api/v1/integrations/messages"),
        (
            "messages:write",
            "POST",
            "/api/v1/integrations/messages/template",
        ),
        ("messages:write", "POST", "/api/send"),
        ("users:read", "GET", "/api/v1/integrations/users"),
        (
            "permissions:read",
            "GET",
            "/api/v1/integrations/permissions",
        ),
        ("events:read", "GET", "/api/v1/integrations/events"),
        (
            "webhooks:read",
            "GET",
            "/api/v1/integrations/webhook-events",
        ),
        (
            "webhooks:write",
            "POST",
            "/api/v1/integrations/webhook-endpoints/{uuid}/rotate-secret",
        ),
        ("webhooks:write", "DELETE", "/api/webhooks/{id}"),
        ("contacts:read", "GET", "/api/contacts"),
        ("contacts:write", "DELETE", "/api/contacts/{uuid}"),
        ("groups:read", "GET", "/api/groups/{id}/contacts"),
        ("canned_replies:write", "POST", "/api/canned-replies"),
        ("templates:read", "GET", "/api/templates"),
        ("templates:read", "GET", "/api/v1/integrations/templates"),
        (
            "messages:read",
            "GET",
            "/api/v1/integrations/messages/{uuid}",
        ),
        ("campaigns:write", "POST", "/api/campaigns"),
        ("flow:read", "GET", "/api/flows"),
        ("flow:write", "POST", "/api/flows/{id}/trigger"),
    ] {
        assert!(
            allows(scope, method, path),
            "{scope} allows {method} {path}"
        );
    }
    assert!(!allows("messages:read", "POST", "/api/send"));

    // The three endpoints are in the OpenAPI document.
    let doc = server
        .call(
            reqwest::Method::GET,
            "/api/v1/integrations/openapi.json",
            None,
            None,
        )
        .await
        .expect(200);
    for path in [
        USERS,
        PERMISSIONS,
        EVENTS,
        "/api/v1/integrations/events/{uuid}",
    ] {
        let op = &doc.body["paths"][path]["get"];
        assert!(op.is_object(), "{path} is documented");
        assert!(op["responses"]["200"].is_object() && op["responses"]["403"].is_object());
    }
    let params: Vec<&str> = doc.body["paths"][EVENTS]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        params,
        vec![
            "limit", "cursor", "category", "type", "actor", "since", "until"
        ]
    );
}

/// Log entries as other parts of the service write them: by API keys, by the system, at
/// chosen times (2025, before anything the admin tools write during the test).
async fn write_fixture_log(env: &TestEnv, org_id: i64, key_id: i64) -> Vec<OrgEvent> {
    let store = store(env).await;
    let key = Actor::ApiKey {
        api_key_id: key_id,
        api_key_prefix: "sbk_fixture0".into(),
    };
    let other_key = Actor::ApiKey {
        api_key_id: key_id + 1000,
        api_key_prefix: "sbk_fixture1".into(),
    };
    let rows = [
        (
            "conversation.initiated",
            EventCategory::Audit,
            key.clone(),
            "2025-01-01T00:00:00Z",
        ),
        (
            "campaign_send.validated",
            EventCategory::Audit,
            other_key.clone(),
            "2025-01-01T00:00:01Z",
        ),
        (
            "campaign_send.refused",
            EventCategory::Audit,
            key.clone(),
            "2025-01-01T00:00:02Z",
        ),
        (
            "webhook_endpoint.disabled",
            EventCategory::Admin,
            Actor::System,
            "2025-01-01T00:00:03Z",
        ),
        (
            "webhook_endpoint.secret_rotated",
            EventCategory::Security,
            key.clone(),
            "2025-01-01T00:00:04Z",
        ),
        (
            "settings.changed",
            EventCategory::Admin,
            Actor::Admin,
            "2025-01-01T00:00:05Z",
        ),
    ];
    let mut written = Vec::new();
    for (kind, category, actor, time) in rows {
        let e = OrgEvent::new(
            org_id,
            kind,
            category,
            actor,
            Some(Subject::new("fixture", written.len())),
            json!({ "n": written.len() }),
            at(time),
        );
        store
            .write_effects(Effects::none().log(e.clone()))
            .await
            .unwrap();
        written.push(e);
    }
    written
}

fn ns(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .filter_map(|e| e["details"]["n"].as_i64())
        .collect()
}

async fn events_are_filtered_by_category_type_actor_and_time(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let fixtures = write_fixture_log(&env, seed.org_id, seed.key_id).await;
    let server = env.start(&[]).await;
    let key = &seed.key;
    let get = |query: String| {
        let server = &server;
        async move {
            data(
                &server
                    .get(&format!("{EVENTS}?{query}"), key)
                    .await
                    .expect(200),
            )
        }
    };

    // Newest first: the admin tools' entries (now), then the fixtures (2025) from the last.
    let everything = get(String::new()).await;
    assert_eq!(ns(&everything), vec![5, 4, 3, 2, 1, 0]);
    let times: Vec<&str> = everything
        .iter()
        .map(|e| e["created_at"].as_str().unwrap())
        .collect();
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, sorted, "newest first");
    assert_eq!(
        types(&everything[..2]),
        vec!["security.api_key_created", "channel.created"]
    );
    assert_eq!(everything.len(), 8);

    // The shape of one entry.
    let e = everything.iter().find(|e| e["details"]["n"] == 4).unwrap();
    assert_eq!(
        e,
        &json!({
            "uuid": fixtures[4].uuid,
            "type": "webhook_endpoint.secret_rotated",
            "category": "security",
            "actor": {"type": "api_key", "api_key_id": seed.key_id, "api_key_prefix": "sbk_fixture0"},
            "subject": {"type": "fixture", "id": "4"},
            "details": {"n": 4},
            "created_at": "2025-01-01T00:00:04.000Z",
        })
    );
    let one = server
        .get(&format!("{EVENTS}/{}", fixtures[4].uuid), key)
        .await
        .expect(200);
    assert_eq!(&one.body, e);

    assert_eq!(ns(&get("category=audit".into()).await), vec![2, 1, 0]);
    let security = get("category=security".into()).await;
    assert_eq!(ns(&security), vec![4]);
    assert!(
        types(&security).contains(&"security.api_key_created".to_owned()),
        "the seed's key creation is a security entry"
    );
    assert!(security.iter().all(|e| e["category"] == "security"));
    let admin = get("category=admin".into()).await;
    assert_eq!(ns(&admin), vec![5, 3]);
    assert!(types(&admin).contains(&"channel.created".to_owned()));

    assert_eq!(ns(&get("type=campaign_send.refused".into()).await), vec![2]);
    assert_eq!(ns(&get("type=campaign_send.*".into()).await), vec![2, 1]);
    assert_eq!(ns(&get("type=webhook_endpoint.*".into()).await), vec![4, 3]);
    assert!(get("type=no_such.event".into()).await.is_empty());
    assert_eq!(get("type=*".into()).await, everything, "`*` is every type");
    assert!(
        get("type=campaign.*".into()).await.is_empty(),
        "a prefix is a whole namespace"
    );

    assert_eq!(
        ns(&get(format!("actor=api_key:{}", seed.key_id)).await),
        vec![4, 2, 0]
    );
    assert_eq!(ns(&get("actor=api_key".into()).await), vec![4, 2, 1, 0]);
    assert_eq!(ns(&get("actor=system".into()).await), vec![3]);
    let by_admin = get("actor=admin".into()).await;
    assert_eq!(ns(&by_admin), vec![5]);
    assert!(by_admin.iter().all(|e| e["actor"]["type"] == "admin"));
    assert!(by_admin.len() >= 3, "the seed's admin operations too");
    assert!(get("actor=api_key:999999".into()).await.is_empty());

    assert_eq!(
        ns(&get("since=2025-01-01T00:00:01Z&until=2025-01-01T00:00:04Z".into()).await),
        vec![3, 2, 1],
        "since inclusive, until exclusive"
    );
    assert_eq!(
        ns(&get("since=2025-01-01T01:00:02%2B01:00".into()).await),
        vec![5, 4, 3, 2],
        "any offset"
    );
    assert_eq!(get("until=2025-01-01T00:00:00Z".into()).await.len(), 0);
    assert_eq!(
        ns(&get(format!(
            "category=audit&actor=api_key:{}&type=campaign_send.*&since=2024-12-31T00:00:00Z&until=2026-01-01T00:00:00.000Z",
            seed.key_id
        ))
        .await),
        vec![2],
        "filters combine"
    );
}

async fn events_bad_filters_are_400_naming_the_parameter(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    for (query, param) in [
        ("category=bogus", "category"),
        ("category=", "category"),
        ("category=AUDIT", "category"),
        ("type=BAD!", "type"),
        ("type=team", "type"),
        ("type=", "type"),
        ("type=**", "type"),
        ("type=team.**", "type"),
        ("type=team.%25", "type"),
        ("actor=robot", "actor"),
        ("actor=api_key:abc", "actor"),
        ("actor=api_key:", "actor"),
        ("actor=api_key:-4", "actor"),
        ("actor=", "actor"),
        ("since=yesterday", "since"),
        ("since=2025-01-01", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        (
            "since=2025-01-02T00:00:00Z&until=2025-01-01T00:00:00Z",
            "until",
        ),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=abc", "limit"),
        ("limit=", "limit"),
        ("cursor=garbage", "cursor"),
        // Forged cursors with times PostgreSQL cannot hold: v1.<i64::MAX>.1, v1.<i64::MIN>.1.
        ("cursor=djEuOTIyMzM3MjAzNjg1NDc3NTgwNy4x", "cursor"),
        ("cursor=djEuLTkyMjMzNzIwMzY4NTQ3NzU4MDguMQ", "cursor"),
        ("cursor=", "cursor"),
        ("colour=red", "colour"),
        ("category=audit&category=admin", "category"),
    ] {
        let r = server
            .get(&format!("{EVENTS}?{query}"), &seed.key)
            .await
            .expect_error(
                400,
                if query.contains("cursor=") {
                    "invalid_cursor"
                } else {
                    "invalid_request"
                },
            );
        assert_eq!(r.body["error"]["details"]["param"], param, "{query}");
    }
    for (query, param) in [
        ("role=boss", "role"),
        ("limit=500", "limit"),
        ("cursor=%21%21", "cursor"),
        ("cursor=djEuOTIyMzM3MjAzNjg1NDc3NTgwNy4x", "cursor"),
        ("email=x", "email"),
    ] {
        let r = server
            .get(&format!("{USERS}?{query}"), &seed.key)
            .await
            .expect_error(
                400,
                if query.contains("cursor=") {
                    "invalid_cursor"
                } else {
                    "invalid_request"
                },
            );
        assert_eq!(r.body["error"]["details"]["param"], param, "{query}");
    }
    // Limits at the bounds, and the extreme times RFC 3339 allows, are fine.
    for query in [
        "limit=1",
        "limit=200",
        "category=audit&limit=200",
        "since=0000-01-01T00:00:00Z",
        "until=9999-12-31T23:59:59.999Z",
    ] {
        server
            .get(&format!("{EVENTS}?{query}"), &seed.key)
            .await
            .expect(200);
    }
}

async fn events_and_users_paginate_across_pages(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut fixtures = write_fixture_log(&env, seed.org_id, seed.key_id).await;
    fixtures.extend(write_fixture_log(&env, seed.org_id, seed.key_id).await);
    for i in 0..5 {
        add_user(
            &env,
            seed.org_id,
            &format!("member{i}@example.com"),
            "agent",
        )
        .await;
    }
    let server = env.start(&[]).await;

    // Every entry exactly once, newest first, in pages of 4.
    let total = all_events(&server, &seed.key, "").await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("{EVENTS}?limit=4&cursor={c}"),
            None => format!("{EVENTS}?limit=4"),
        };
        let r = server.get(&path, &seed.key).await.expect(200);
        let page = data(&r);
        pages += 1;
        assert!(page.len() <= 4);
        seen.extend(page);
        match r.body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(r.body["has_more"], true);
                cursor = Some(c.to_owned());
            }
            None => {
                assert_eq!(r.body["has_more"], false);
                break;
            }
        }
    }
    assert_eq!(seen, total);
    assert_eq!(pages, total.len().div_ceil(4));
    let uuids: BTreeSet<&str> = seen.iter().map(|e| e["uuid"].as_str().unwrap()).collect();
    assert_eq!(uuids.len(), seen.len(), "no entry twice");
    assert_eq!(total.len(), 12 + 5 + 2);

    // With a filter: 6 audit entries in pages of 4, then 2.
    let first = server
        .get(&format!("{EVENTS}?category=audit&limit=4"), &seed.key)
        .await
        .expect(200);
    assert_eq!(data(&first).len(), 4);
    let next = first.body["next_cursor"].as_str().unwrap();
    let second = server
        .get(
            &format!("{EVENTS}?category=audit&limit=4&cursor={next}"),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(data(&second).len(), 2);
    assert_eq!(second.body["has_more"], false);
    assert_eq!(second.body["next_cursor"], Value::Null);
    let mut audit: Vec<Value> = data(&first);
    audit.extend(data(&second));
    assert!(audit.iter().all(|e| e["category"] == "audit"));
    // The two copies of the fixtures share their times: ties are ordered by id, newest first.
    assert_eq!(
        audit
            .iter()
            .map(|e| e["uuid"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>(),
        [8, 2, 7, 1, 6, 0]
            .iter()
            .map(|i: &usize| fixtures[*i].uuid.to_string())
            .collect::<Vec<_>>()
    );

    // Users: 5 members in pages of 2.
    let mut emails = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{USERS}?limit=2&cursor={c}"),
            None => format!("{USERS}?limit=2"),
        };
        let r = server.get(&path, &seed.key).await.expect(200);
        emails.extend(
            data(&r)
                .iter()
                .map(|u| u["email"].as_str().unwrap().to_owned()),
        );
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        emails,
        (0..5)
            .map(|i| format!("member{i}@example.com"))
            .collect::<Vec<_>>()
    );
}

async fn existing_operations_leave_their_events(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let created = env
        .admin(&["key", "create", "--org", &org, "--scopes", "channels:read"])
        .await;
    let rotated = env
        .admin(&["key", "rotate", &created["id"].to_string()])
        .await;
    env.admin(&["key", "revoke", &rotated["id"].to_string()])
        .await;
    let legacy = "legacy-plaintext-key-0123456789";
    let imported = env
        .admin(&["key", "import-legacy", "--org", &org, "--key", legacy])
        .await;
    env.admin(&[
        "channel",
        "update",
        &seed.channel_id.to_string(),
        "--name",
        "Renamed",
    ])
    .await;
    add_user(&env, seed.org_id, "ops@example.com", "admin").await;

    let server = env.start(&[]).await;
    let text = server
        .get(&format!("{EVENTS}?limit=200"), &seed.key)
        .await
        .expect(200)
        .text;
    for secret in [
        seed.key.as_str(),
        created["key"].as_str().unwrap(),
        rotated["key"].as_str().unwrap(),
        legacy,
    ] {
        assert!(!text.contains(secret), "no key material in the log");
    }
    let mut log = all_events(&server, &seed.key, "").await;
    log.reverse();
    let summary: Vec<(String, String, String)> = log
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["category"].as_str().unwrap().to_owned(),
                e["subject"]["id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let id = |v: &Value| v.to_string();
    let expected = vec![
        ("channel.created", "admin", seed.channel_id.to_string()),
        (
            "security.api_key_created",
            "security",
            seed.key_id.to_string(),
        ),
        ("security.api_key_created", "security", id(&created["id"])),
        ("security.api_key_created", "security", id(&rotated["id"])),
        ("security.api_key_revoked", "security", id(&created["id"])),
        ("security.api_key_rotated", "security", id(&created["id"])),
        ("security.api_key_revoked", "security", id(&rotated["id"])),
        ("security.api_key_created", "security", id(&imported["id"])),
        ("channel.updated", "admin", seed.channel_id.to_string()),
        ("team.member_added", "admin", String::new()),
    ];
    assert_eq!(summary.len(), expected.len(), "{summary:?}");
    for ((t, c, s), (et, ec, es)) in summary.iter().zip(&expected) {
        assert_eq!((t.as_str(), c.as_str()), (*et, *ec), "{summary:?}");
        if !es.is_empty() {
            assert_eq!(s, es, "{t}: {summary:?}");
        }
    }
    assert!(log.iter().all(|e| e["actor"] == json!({"type": "admin"})));
    let rotation = log
        .iter()
        .find(|e| e["type"] == "security.api_key_rotated")
        .unwrap();
    assert_eq!(rotation["details"]["replaced_by"], rotated["id"]);
    let import = &log[7];
    assert_eq!(import["details"]["reason"], "imported");
    assert_eq!(import["details"]["legacy"], true);
    assert_eq!(log[8]["details"]["changed"], json!(["name"]));
}

async fn org_events_cannot_be_changed_in_the_database(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let statements = [
        "UPDATE org_events SET type = 'tampered.entry'",
        "DELETE FROM org_events",
    ];
    match backend {
        Backend::Sqlite => {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&env.database_url)
                .await
                .unwrap();
            for sql in statements {
                let err = sqlx::query(sql).execute(&mut c).await.unwrap_err();
                assert!(err.to_string().contains("append-only"), "{sql}: {err}");
            }
        }
        Backend::Postgres => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&env.database_url)
                .await
                .unwrap();
            for sql in statements.iter().chain(&["TRUNCATE org_events"]) {
                let err = sqlx::query(sql).execute(&mut c).await.unwrap_err();
                assert!(err.to_string().contains("append-only"), "{sql}: {err}");
            }
        }
    }
    let server = env.start(&[]).await;
    let log = all_events(&server, &seed.key, "").await;
    assert!(types(&log).contains(&"security.api_key_created".to_owned()));
    assert!(log.iter().all(|e| e["type"] != "tampered.entry"));
}
