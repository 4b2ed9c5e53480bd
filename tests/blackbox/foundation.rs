//! Issue 2: binary, configuration, storage, keys, authentication, scopes, errors, rate limits,
//! the channels endpoint, operations endpoints and the admin tools.

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{Backend, TestEnv};

both_backends!(
    health_ready_metrics_and_openapi_need_no_key,
    authentication_failures_are_401_with_codes,
    revoked_expired_rotated_and_legacy_keys,
    scopes_are_enforced_per_endpoint,
    organizations_are_isolated,
    channels_list_every_field_and_no_secret,
    rate_limits_headers_and_429,
    unknown_routes_methods_and_request_ids,
    admin_tools_print_one_json_object_and_refuse_bad_input,
    channel_defaults_and_updates,
    key_events_are_recorded_in_the_outbox_and_log,
    sigterm_finishes_cleanly,
    json_logs_carry_request_ids_and_no_keys,
    wrong_master_key_is_a_clear_startup_error,
    shared_rate_limits_through_redis,
    slow_and_oversized_clients_are_cut_off,
    scopes_come_before_bodies_and_odd_input_is_a_json_4xx,
    admin_key_list_and_default_channels,
);

async fn health_ready_metrics_and_openapi_need_no_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let server = env.start(&[]).await;
    let r = server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["status"], "ok");
    assert!(r.header("x-request-id").is_some());
    let r = server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["database"], "ok");
    let r = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["info"]["version"], "v1");
    let op = &r.body["paths"]["/api/v1/integrations/channels"]["get"];
    assert!(op.is_object(), "GET /channels is documented");
    assert!(
        op["responses"]["401"].is_object()
            && op["responses"]["403"].is_object()
            && op["responses"]["429"].is_object()
    );
    assert!(r.body["components"]["securitySchemes"]["bearer"].is_object());
    assert!(r.body["components"]["schemas"]["ErrorBody"].is_object());
    let m = server
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect(200);
    assert!(m.text.contains("http_requests_total"), "{}", m.text);
    assert!(
        m.text.contains("route=\"/healthz\""),
        "metrics are labelled by route: {}",
        m.text
    );
    assert!(
        m.text.contains("http_request_duration_seconds"),
        "{}",
        m.text
    );
}

async fn authentication_failures_are_401_with_codes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let path = "/api/v1/integrations/channels";

    let r = server
        .call(Method::GET, path, None, None)
        .await
        .expect_error(401, "missing_api_key");
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    assert!(
        r.header("ratelimit-limit").is_none(),
        "no budget is spent before authentication"
    );

    let basic = server
        .client
        .get(server.url(path))
        .header("Authorization", "Basic dXNlcjpwdw==")
        .send()
        .await
        .unwrap();
    crate::support::Server::read(basic)
        .await
        .expect_error(401, "missing_api_key");

    // The key with its last character changed (to one it is not).
    let last = if seed.key.ends_with('x') { "y" } else { "x" };
    for bad in [
        "not-a-key",
        "sbk_short",
        &format!("{}{last}", &seed.key[..seed.key.len() - 1]),
        &format!("{}A", seed.key),
    ] {
        let r = server
            .get(path, bad)
            .await
            .expect_error(401, "invalid_api_key");
        assert!(
            r.header("www-authenticate")
                .unwrap()
                .contains("invalid_token")
        );
    }
    // A well-formed key that was never issued.
    let fresh = {
        let other = TestEnv::new(Backend::Sqlite).await;
        other.seed().await.key
    };
    server
        .get(path, &fresh)
        .await
        .expect_error(401, "invalid_api_key");
    // The real key works, also with a lower-case scheme.
    server.get(path, &seed.key).await.expect(200);
    let lower = server
        .client
        .get(server.url(path))
        .header("Authorization", format!("bearer {}", seed.key))
        .send()
        .await
        .unwrap();
    crate::support::Server::read(lower).await.expect(200);
}

async fn revoked_expired_rotated_and_legacy_keys(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let server = env.start(&[]).await;
    let path = "/api/v1/integrations/channels";

    // Revocation takes effect on the next request.
    server.get(path, &seed.key).await.expect(200);
    let revoked = env
        .admin(&["key", "revoke", &seed.key_id.to_string()])
        .await;
    assert_eq!(revoked["id"], seed.key_id);
    server
        .get(path, &seed.key)
        .await
        .expect_error(401, "revoked_api_key");
    let again = env
        .admin_raw(&["key", "revoke", &seed.key_id.to_string()])
        .await;
    assert!(!again.success, "revoking twice is refused");

    // An expiry in the past: the key exists but has expired.
    let expired = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "*",
            "--expires-at",
            "2020-01-01T00:00:00Z",
        ])
        .await;
    assert_eq!(expired["expires_at"], "2020-01-01T00:00:00.000Z");
    server
        .get(path, expired["key"].as_str().unwrap())
        .await
        .expect_error(401, "expired_api_key");
    let future = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "channels:read",
            "--expires-at",
            "2999-01-01T00:00:00+02:00",
        ])
        .await;
    assert_eq!(future["expires_at"], "2998-12-31T22:00:00.000Z");
    server
        .get(path, future["key"].as_str().unwrap())
        .await
        .expect(200);

    // Rotation: a new key with the same scopes; the old one stops working at once.
    let rotated = env
        .admin(&["key", "rotate", &future["id"].to_string()])
        .await;
    let new_key = rotated["key"].as_str().unwrap();
    assert_ne!(new_key, future["key"].as_str().unwrap());
    assert_eq!(rotated["scopes"], json!(["channels:read"]));
    server
        .get(path, future["key"].as_str().unwrap())
        .await
        .expect_error(401, "revoked_api_key");
    server.get(path, new_key).await.expect(200);

    // A legacy plaintext key: valid, wildcard, until rotated.
    let legacy = "legacy-plaintext-key-0123456789";
    let imported = env
        .admin(&["key", "import-legacy", "--org", &org, "--key", legacy])
        .await;
    assert!(imported["id"].is_i64());
    server.get(path, legacy).await.expect(200);
    let rotated = env
        .admin(&["key", "rotate", &imported["id"].to_string()])
        .await;
    server
        .get(path, legacy)
        .await
        .expect_error(401, "revoked_api_key");
    server
        .get(path, rotated["key"].as_str().unwrap())
        .await
        .expect(200);
    assert_eq!(rotated["scopes"], json!(["*"]));

    // A key created without a scope list acts as a wildcard key.
    let unscoped = env.admin(&["key", "create", "--org", &org]).await;
    assert_eq!(unscoped["scopes"], json!(["*"]));
    server
        .get(path, unscoped["key"].as_str().unwrap())
        .await
        .expect(200);

    // Only hashes are stored: the database never contains a key.
    let listed = env.admin(&["key", "list", "--org", &org]).await;
    let text = listed.to_string();
    assert!(
        !text.contains(new_key) && !text.contains(legacy),
        "keys are never listed"
    );
    assert!(listed["data"].as_array().unwrap().len() >= 6);
    if backend == Backend::Sqlite {
        let db = std::fs::read(env.dir.path().join("switchboard.db")).unwrap_or_default();
        let wal = std::fs::read(env.dir.path().join("switchboard.db-wal")).unwrap_or_default();
        for bytes in [db, wal] {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(
                !hay.contains(new_key) && !hay.contains(legacy),
                "no key is stored in clear"
            );
        }
    }
}

async fn scopes_are_enforced_per_endpoint(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let path = "/api/v1/integrations/channels";
    let narrow = env.key(seed.org_id, "messages:read,webhooks:read").await;
    let r = server
        .get(path, &narrow)
        .await
        .expect_error(403, "insufficient_scope");
    assert_eq!(
        r.body["error"]["details"]["required_scope"],
        "channels:read"
    );
    assert!(
        r.header("ratelimit-remaining").is_some(),
        "authenticated responses carry rate-limit headers"
    );
    assert!(
        r.header("www-authenticate")
            .unwrap()
            .contains("insufficient_scope")
    );
    let ok = env.key(seed.org_id, "channels:read").await;
    server.get(path, &ok).await.expect(200);

    let unknown = env
        .admin_raw(&[
            "key",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--scopes",
            "channels:read,channels:write",
        ])
        .await;
    assert!(!unknown.success);
    assert!(
        unknown.stderr.contains("unknown scope `channels:write`"),
        "{}",
        unknown.stderr
    );
    assert_eq!(
        unknown.stderr.trim().lines().count(),
        1,
        "one line: {}",
        unknown.stderr
    );
}

async fn organizations_are_isolated(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let a = env.seed().await;
    let b = env.seed().await;
    env.admin(&[
        "channel",
        "create",
        "--org",
        &b.org_id.to_string(),
        "--type",
        "telegram",
        "--name",
        "B only",
    ])
    .await;
    let server = env.start(&[]).await;
    let path = "/api/v1/integrations/channels";
    let ra = server.get(path, &a.key).await.expect(200);
    let rb = server.get(path, &b.key).await.expect(200);
    let ids = |r: &crate::support::Resp| {
        r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_i64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&ra), vec![a.channel_id]);
    assert_eq!(ids(&rb).len(), 2);
    assert!(!ids(&rb).contains(&a.channel_id));
}

async fn channels_list_every_field_and_no_secret(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let secret = "EAAG-very-secret-access-token-XYZ";
    let wa = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "whatsapp_cloud", "--name", "Sales WhatsApp", "--slug", "sales",
            "--provider-config", &json!({"phone_number_id": "1098765", "access_token": secret, "app_secret": "app-secret-abc"}).to_string(),
        ])
        .await;
    assert_eq!(
        wa["identifier"], "1098765",
        "the provider's phone number id is the identifier"
    );
    env.admin(&[
        "channel",
        "create",
        "--org",
        &org,
        "--type",
        "lead_ingestion",
        "--name",
        "Leads",
        "--inactive",
    ])
    .await;
    let server = env.start(&[]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    assert!(
        !r.text.contains(secret) && !r.text.contains("app-secret-abc"),
        "no provider secret in {}",
        r.text
    );
    assert_eq!(r.body["has_more"], false);
    assert_eq!(r.body["next_cursor"], Value::Null);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for c in data {
        for field in [
            "id",
            "uuid",
            "slug",
            "type",
            "name",
            "identifier",
            "can_send_messages",
            "status",
            "supports_media",
        ] {
            assert!(!c[field].is_null(), "field {field} in {c}");
        }
    }
    let sandbox = &data[0];
    assert_eq!(sandbox["type"], "sandbox");
    assert_eq!(sandbox["slug"], "sandbox");
    assert_eq!(sandbox["status"], "active");
    assert_eq!(sandbox["can_send_messages"], true);
    let sales = data.iter().find(|c| c["slug"] == "sales").unwrap();
    assert_eq!(sales["type"], "whatsapp_cloud");
    assert_eq!(sales["name"], "Sales WhatsApp");
    let leads = data.iter().find(|c| c["type"] == "lead_ingestion").unwrap();
    assert_eq!(leads["can_send_messages"], false);
    assert_eq!(leads["supports_media"], false);
    assert_eq!(leads["status"], "inactive");
    assert_eq!(leads["slug"], "leads");
}

async fn rate_limits_headers_and_429(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let other = env.key(seed.org_id, "*").await;
    let server = env.start(&[("SWITCHBOARD_RATE_LIMIT_READS", "3")]).await;
    let path = "/api/v1/integrations/channels";
    // Failed authentication spends nothing.
    for _ in 0..5 {
        server.get(path, "sbk_wrong").await.expect(401);
    }
    for remaining in [2, 1, 0] {
        let r = server.get(path, &seed.key).await.expect(200);
        assert_eq!(r.header("ratelimit-limit"), Some("3"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some(remaining.to_string().as_str())
        );
        assert_eq!(r.header("ratelimit-policy"), Some("\"reads\";q=3;w=60"));
        assert!(
            r.header("ratelimit")
                .unwrap()
                .starts_with(&format!("\"reads\";r={remaining};t="))
        );
        assert!(r.header("ratelimit-reset").unwrap().parse::<u64>().unwrap() <= 60);
    }
    let r = server
        .get(path, &seed.key)
        .await
        .expect_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header("ratelimit-remaining"), Some("0"));
    // Another credential has its own budget.
    server.get(path, &other).await.expect(200);
}

async fn unknown_routes_methods_and_request_ids(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    server
        .get("/api/v1/integrations/nothing-here", &seed.key)
        .await
        .expect_error(404, "not_found");
    server
        .call(Method::GET, "/nothing", None, None)
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::DELETE,
            "/api/v1/integrations/channels",
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(405, "method_not_allowed");
    let r = server
        .client
        .get(server.url("/api/v1/integrations/channels"))
        .bearer_auth(&seed.key)
        .header("X-Request-Id", "client-chosen.id:42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "client-chosen.id:42");
    let r = server
        .client
        .get(server.url("/healthz"))
        .header("X-Request-Id", "bad id with spaces")
        .send()
        .await
        .unwrap();
    let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(
        id.starts_with("req_"),
        "an unsafe inbound id is replaced: {id}"
    );
}

async fn admin_tools_print_one_json_object_and_refuse_bad_input(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let org = env.admin(&["org", "create", "--name", "Acme"]).await;
    assert_eq!(org["name"], "Acme");
    assert!(org["id"].is_i64() && org["uuid"].is_string());
    let org_id = org["id"].to_string();

    let key = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--name",
            "crm",
            "--scopes",
            "channels:read,messages:write",
        ])
        .await;
    for field in ["id", "key", "prefix", "scopes", "expires_at"] {
        assert!(key.get(field).is_some(), "key create prints {field}: {key}");
    }
    let token = key["key"].as_str().unwrap();
    assert!(token.starts_with("sbk_") && token.starts_with(key["prefix"].as_str().unwrap()));
    assert_eq!(key["scopes"], json!(["channels:read", "messages:write"]));
    assert_eq!(key["expires_at"], Value::Null);

    let refusals: &[&[&str]] = &[
        &["org", "create"],
        &["org", "create", "--name", "   "],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "carrier_pigeon",
            "--name",
            "x",
        ],
        &[
            "channel", "create", "--org", "999999", "--type", "sandbox", "--name", "x",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--slug",
            "Not A Slug",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--provider-config",
            "{not json",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--provider-config",
            "[1,2]",
        ],
        &["channel", "update", "424242", "--inactive"],
        &["channel", "update", "1", "--active", "--inactive"],
        &["key", "create", "--org", &org_id, "--scopes", "everything"],
        &["key", "create", "--org", &org_id, "--scopes", ""],
        &[
            "key",
            "create",
            "--org",
            &org_id,
            "--expires-at",
            "next tuesday",
        ],
        &["key", "create", "--org", "999999"],
        &["key", "create", "--org", "abc"],
        &["key", "revoke", "999999"],
        &["key", "rotate", "999999"],
        &[
            "key",
            "import-legacy",
            "--org",
            &org_id,
            "--key",
            "has space",
        ],
        &["no-such-command"],
    ];
    let before = env.admin(&["key", "list", "--org", &org_id]).await["data"]
        .as_array()
        .unwrap()
        .len();
    for args in refusals {
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
    let after = env.admin(&["key", "list", "--org", &org_id]).await["data"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "refused commands change nothing");

    // A default channel from another organization is refused.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let foreign = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &other["id"].to_string(),
            "--type",
            "sandbox",
            "--name",
            "Theirs",
        ])
        .await;
    let out = env
        .admin_raw(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--default-channel",
            &foreign["id"].to_string(),
        ])
        .await;
    assert!(
        !out.success && out.stderr.contains("does not belong"),
        "{}",
        out.stderr
    );
    let own = env
        .admin(&[
            "channel", "create", "--org", &org_id, "--type", "sandbox", "--name", "Ours",
        ])
        .await;
    let k = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--default-channel",
            &own["id"].to_string(),
        ])
        .await;
    assert_eq!(k["default_channel_id"], own["id"]);

    // Without --json, a readable line.
    let out = env
        .run(&["admin", "org", "create", "--name", "Plain"], &[])
        .await;
    assert!(
        out.success && out.stdout.starts_with("created organization"),
        "{}",
        out.stdout
    );

    // Help exists for every command.
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["migrate", "--help"],
        &["admin", "--help"],
        &["admin", "key", "create", "--help"],
    ] {
        let out = env.run(args, &[]).await;
        assert!(
            out.success && out.stdout.contains("Usage"),
            "{args:?}: {}",
            out.stdout
        );
    }
    let out = env.run(&["migrate"], &[]).await;
    assert!(out.success, "{}", out.stderr);
}

async fn channel_defaults_and_updates(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let second = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "Sandbox",
        ])
        .await;
    assert_eq!(second["slug"], "sandbox-2", "a derived slug is made unique");
    let dup = env
        .admin_raw(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "x", "--slug",
            "sandbox",
        ])
        .await;
    assert!(
        !dup.success && dup.stderr.contains("already used"),
        "{}",
        dup.stderr
    );
    // The same slug in another organization is fine.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    env.admin(&[
        "channel",
        "create",
        "--org",
        &other["id"].to_string(),
        "--type",
        "sandbox",
        "--name",
        "x",
        "--slug",
        "sandbox",
    ])
    .await;

    let updated = env
        .admin(&[
            "channel",
            "update",
            &second["id"].to_string(),
            "--default",
            "--inactive",
            "--name",
            "Renamed",
        ])
        .await;
    assert_eq!(updated["status"], "inactive");
    assert_eq!(updated["name"], "Renamed");
    assert_eq!(updated["is_default"], true);
    let server = env.start(&[]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    let defaults: Vec<i64> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["is_default"] == true)
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        defaults,
        vec![second["id"].as_i64().unwrap()],
        "one default per organization"
    );
    let back = env
        .admin(&["channel", "update", &second["id"].to_string(), "--active"])
        .await;
    assert_eq!(back["status"], "active");
}

async fn key_events_are_recorded_in_the_outbox_and_log(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    env.admin(&["key", "revoke", &seed.key_id.to_string()])
        .await;
    let config = switchboard::config::Config::from_sources(
        &env.base_env().into_iter().collect(),
        None,
        None,
    )
    .unwrap();
    let store = switchboard_store::connect(&config.database_url, config.database_max_connections)
        .await
        .unwrap();
    let outbox = store.list_outbox_events(seed.org_id, 100).await.unwrap();
    let names: Vec<&str> = outbox.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["security.api_key_created", "security.api_key_revoked"]
    );
    for e in &outbox {
        assert_eq!(e.data["api_key_id"], seed.key_id);
        assert!(
            !e.data.to_string().contains(&seed.key),
            "no key material in events"
        );
        assert!(e.channel.is_none());
    }
    let log = store.list_org_events(seed.org_id, 100).await.unwrap();
    let types: Vec<&str> = log.iter().map(|e| e.event_type.as_str()).collect();
    assert!(
        types.contains(&"security.api_key_created") && types.contains(&"security.api_key_revoked"),
        "{types:?}"
    );
    assert!(types.contains(&"channel.created"), "{types:?}");
    let revoked = log
        .iter()
        .find(|e| e.event_type == "security.api_key_revoked")
        .unwrap();
    assert_eq!(revoked.category.as_str(), "security");
    assert_eq!(revoked.actor, switchboard_domain::event::Actor::Admin);
    assert_eq!(
        revoked.subject.as_ref().unwrap().id,
        seed.key_id.to_string()
    );
}

async fn sigterm_finishes_cleanly(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut server = env.start(&[]).await;
    server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    assert_eq!(server.terminate().await, Some(0));
    assert!(server.logs().contains("shutting down"), "{}", server.logs());
}

async fn json_logs_carry_request_ids_and_no_keys(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_LOG", "debug")]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    let id = r.header("x-request-id").unwrap().to_owned();
    server
        .get(
            "/api/v1/integrations/channels",
            "sbk_not_a_real_key_at_all_00000000000000",
        )
        .await
        .expect(401);
    // Let the log line reach the pipe.
    let mut found = false;
    for _ in 0..50 {
        if server.logs().contains(&id) {
            found = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(found, "a log line carries the request id {id}");
    let logs = server.logs();
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    assert!(!logs.contains(&seed.key), "the key never appears in logs");
    assert!(
        !logs.contains(&env.master_key),
        "the master key never appears in logs"
    );
}

async fn wrong_master_key_is_a_clear_startup_error(backend: Backend) {
    let env = TestEnv::new(backend).await;
    env.seed().await;
    let other_key = crate::support::hex_key();
    let out = env
        .run(&["serve"], &[("SWITCHBOARD_MASTER_KEY", &other_key)])
        .await;
    assert!(!out.success);
    assert!(
        out.stderr.contains("SWITCHBOARD_MASTER_KEY") && out.stderr.contains("not the master key"),
        "{}",
        out.stderr
    );
    let bad = env
        .run(&["serve"], &[("SWITCHBOARD_WEBHOOK_TIMEOUT", "soon")])
        .await;
    assert!(!bad.success);
    assert!(
        bad.stderr.contains("SWITCHBOARD_WEBHOOK_TIMEOUT")
            && bad.stderr.contains("expected a duration"),
        "{}",
        bad.stderr
    );
}

async fn shared_rate_limits_through_redis(backend: Backend) {
    let Some(redis) = crate::support::redis_url() else {
        eprintln!("SWITCHBOARD_TEST_REDIS_URL is not set; skipping");
        return;
    };
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let settings = [
        ("SWITCHBOARD_REDIS_URL", redis.as_str()),
        ("SWITCHBOARD_RATE_LIMIT_READS", "4"),
    ];
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let path = "/api/v1/integrations/channels";
    let mut statuses = Vec::new();
    for i in 0..8 {
        let server = if i % 2 == 0 { &a } else { &b };
        statuses.push(server.get(path, &seed.key).await.status.as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        4,
        "two instances share one budget: {statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        4,
        "{statuses:?}"
    );
}

async fn slow_and_oversized_clients_are_cut_off(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = TestEnv::new(backend).await;
    let server = env
        .start(&[("SWITCHBOARD_HTTP_HEADER_TIMEOUT", "300ms")])
        .await;
    let addr = server.base.trim_start_matches("http://").to_owned();

    // Headers that never finish: the server closes the connection.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(
        read.is_ok(),
        "the server must close a connection whose headers never finish"
    );
    assert!(
        buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf)
    );

    // A header block over 64 KiB is refused.
    let mut big = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let _ = big.write_all(request.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        big.read_to_end(&mut buf),
    )
    .await;
    let text = String::from_utf8_lossy(&buf);
    assert!(
        !text.starts_with("HTTP/1.1 200"),
        "an oversized header block is not served: {text}"
    );

    // The server is still healthy.
    server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
}

/// A key without the endpoint's scope is refused before its body or query string is read;
/// odd paths and bodies get the API's JSON errors, with `details` always an object.
async fn scopes_come_before_bodies_and_odd_input_is_a_json_4xx(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    let narrow = env.key(seed.org_id, "channels:read").await;
    let some_uuid = uuid::Uuid::new_v4();
    for (method, path, body) in [
        (
            Method::POST,
            "/api/v1/integrations/webhook-endpoints".to_owned(),
            Some(json!({})),
        ),
        (
            Method::PUT,
            format!("/api/v1/integrations/webhook-endpoints/{some_uuid}"),
            Some(json!({"name": 5})),
        ),
        (
            Method::GET,
            "/api/v1/integrations/webhook-deliveries?limit=abc".to_owned(),
            None,
        ),
        (
            Method::GET,
            "/api/v1/integrations/webhook-endpoints?limit=0".to_owned(),
            None,
        ),
        (
            Method::GET,
            "/api/v1/integrations/messages?limit=1&limit=2".to_owned(),
            None,
        ),
        (Method::POST, "/api/contacts".to_owned(), Some(json!({}))),
        (Method::POST, "/api/groups".to_owned(), Some(json!([]))),
        (Method::POST, "/api/campaigns".to_owned(), Some(json!({}))),
    ] {
        let r = server
            .call(method.clone(), &path, Some(&narrow), body.as_ref())
            .await;
        assert_eq!(r.status.as_u16(), 403, "{method} {path}: {}", r.text);
        assert_eq!(
            r.body["error"]["code"], "insufficient_scope",
            "{method} {path}"
        );
    }

    // Every error body has `details`, an object.
    let r = server
        .call(Method::GET, "/api/v1/integrations/channels", None, None)
        .await
        .expect_error(401, "missing_api_key");
    assert_eq!(r.body["error"]["details"], json!({}));

    // A path parameter that is not UTF-8 is an unknown resource, in JSON.
    for path in [
        "/api/v1/integrations/webhook-endpoints/%ff",
        "/api/v1/integrations/webhook-deliveries/%ff%fe",
        "/api/v1/integrations/events/%c3%28",
        "/api/contacts/%ff",
    ] {
        let r = server
            .get(path, &seed.key)
            .await
            .expect_error(404, "not_found");
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
        assert!(r.header("x-request-id").is_some(), "{path}");
    }

    // Bodies: a NUL in any string is a 422 naming the field (PostgreSQL cannot store one), on
    // sends too, before anything is sent.
    let r = server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &json!({"name": "a\u{0}b", "url": "https://example.com/hook", "events": ["*"]}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "name");
    let idem = [("Idempotency-Key", "nul-1")];
    let r = server
        .post_with(
            "/api/v1/integrations/messages/media",
            &seed.key,
            &json!({"phone": "+4915123456789", "media_type": "document",
                    "media_url": "https://example.com/a\u{0}b.pdf"}),
            &idem,
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(
        r.body["error"]["details"]["fields"][0]["field"],
        "media_url"
    );
    let sent = server
        .get("/api/v1/integrations/messages", &seed.key)
        .await
        .expect(200);
    assert_eq!(sent.body["data"], json!([]), "nothing was sent");

    let raw = |body: String| {
        server
            .client
            .post(server.url("/api/v1/integrations/webhook-endpoints"))
            .bearer_auth(&seed.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // A number too large for any type is valid JSON of the wrong shape.
    let r = crate::support::Server::read(
        raw(
            r#"{"name": "n", "url": "https://example.com/h", "events": ["*"], "status": 1e400}"#
                .into(),
        )
        .await
        .unwrap(),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "status");
    // Nesting deeper than 128 is refused also in a field the endpoint ignores.
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    crate::support::Server::read(
        raw(format!(
            r#"{{"name": "n", "url": "https://example.com/h", "events": ["*"], "x": {deep}}}"#
        ))
        .await
        .unwrap(),
    )
    .await
    .expect_error(400, "malformed_json");
    // JSON that is not an object is named as the body, whatever its content.
    let r = crate::support::Server::read(
        raw(r#"["n", "https://example.com/h"]"#.into())
            .await
            .unwrap(),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(r.body["error"]["details"]["fields"][0]["field"], "body");
    let listed = server
        .get("/api/v1/integrations/webhook-endpoints", &seed.key)
        .await
        .expect(200);
    assert_eq!(listed.body["data"], json!([]), "no endpoint was created");
}

async fn admin_key_list_and_default_channels(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let expired = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "*",
            "--expires-at",
            "2020-01-01T00:00:00Z",
        ])
        .await;
    let revoked = env
        .admin(&["key", "create", "--org", &org, "--scopes", "*"])
        .await;
    env.admin(&["key", "revoke", &revoked["id"].to_string()])
        .await;
    let list = env.admin(&["key", "list", "--org", &org]).await;
    let status = |id: &Value| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == *id)
            .map(|k| k["status"].clone())
            .unwrap()
    };
    assert_eq!(status(&expired["id"]), "expired");
    assert_eq!(status(&revoked["id"]), "revoked");
    assert_eq!(status(&json!(seed.key_id)), "active");

    // A key's default channel must be one that can send.
    let leads = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &org,
            "--type",
            "lead_ingestion",
            "--name",
            "Leads",
        ])
        .await;
    let refused = env
        .admin_raw(&[
            "key",
            "create",
            "--org",
            &org,
            "--default-channel",
            &leads["id"].to_string(),
        ])
        .await;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("cannot send messages"),
        "{}",
        refused.stderr
    );
    // Two channels created together get different identifiers.
    let a = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "A",
        ])
        .await;
    let b = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "B",
        ])
        .await;
    assert_ne!(a["identifier"], b["identifier"]);
}
