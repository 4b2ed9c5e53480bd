//! Authentication, keys (revoked, expired, rotated, legacy), scopes, organization isolation and rate limits.

use reqwest::Method;
use serde_json::json;

use crate::both_backends;
use crate::support::{Backend, TestEnv};

both_backends!(
    authentication_failures_are_401_with_codes,
    revoked_expired_rotated_and_legacy_keys,
    scopes_are_enforced_per_endpoint,
    organizations_are_isolated,
    rate_limits_headers_and_429,
    key_events_are_recorded_in_the_outbox_and_log,
    shared_rate_limits_through_redis,
    scopes_come_before_bodies_and_odd_input_is_a_json_4xx,
);

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

    // A key never gets every scope by omission: --scopes is required, '*' says so explicitly.
    let refused = env.admin_raw(&["key", "create", "--org", &org]).await;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("--scopes is required")
            && refused.stderr.contains("messages:write"),
        "{}",
        refused.stderr
    );
    let typo = env
        .admin_raw(&["key", "create", "--org", &org, "--scopes", "mesages:write"])
        .await;
    assert!(!typo.success);
    assert!(
        typo.stderr.contains("unknown scope `mesages:write`")
            && typo.stderr.contains("webhooks:read"),
        "the valid scopes are listed: {}",
        typo.stderr
    );
    let unscoped = env
        .admin(&["key", "create", "--org", &org, "--scopes", "*"])
        .await;
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
async fn shared_rate_limits_through_redis(backend: Backend) {
    let Some(redis) = crate::support::redis_url() else {
        crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
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
