//! Issue 8: faults (database and Redis outages), hostile clients, secrets in logs.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::both_backends;
use crate::fault_proxy::{Proxy, via};
use crate::support::{Backend, TestEnv};

crate::async_tests!(2; postgres_outage_is_503_and_the_service_recovers_without_restart, redis_outage_falls_back_to_per_instance_limits);

both_backends!(master_key_rotation_reencrypts_every_secret);

async fn master_key_rotation_reencrypts_every_secret(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let config = serde_json::json!({"phone_number_id": "123", "access_token": "secret-token-1", "app_secret": "s2"});
    let channel = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &seed.org_id.to_string(),
            "--type",
            "whatsapp_cloud",
            "--name",
            "WA",
            "--provider-config",
            &config.to_string(),
        ])
        .await;
    let new_key = crate::support::hex_key();
    let out = env
        .admin(&["master-key", "rotate", "--new-key", &new_key])
        .await;
    assert_eq!(out["rotated"], 1);
    assert!(
        !out.to_string().contains(&new_key),
        "a key given by the operator is not echoed"
    );

    // The old key no longer opens the database; the new one does, and the secret survived.
    let old = env.run(&["serve"], &[]).await;
    assert!(
        !old.success && old.stderr.contains("not the master key"),
        "{}",
        old.stderr
    );
    let server = env.start(&[("SWITCHBOARD_MASTER_KEY", &new_key)]).await;
    server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    let mut settings: std::collections::HashMap<String, String> =
        env.base_env().into_iter().collect();
    settings.insert("SWITCHBOARD_MASTER_KEY".into(), new_key.clone());
    let cfg = switchboard::config::Config::from_sources(&settings, None, None).unwrap();
    let store = switchboard_store::connect(&cfg.database_url, cfg.database_max_connections)
        .await
        .unwrap();
    let secrets = switchboard::crypto::SecretBox::new(
        &switchboard::crypto::MasterKey::from_hex(&new_key).unwrap(),
    );
    let opened = switchboard::ops::channels::provider_config(
        store.as_ref(),
        &secrets,
        channel["id"].as_i64().unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(opened, config);

    // Rotating to the same key is refused and changes nothing.
    let same = env
        .run(
            &[
                "admin",
                "master-key",
                "rotate",
                "--new-key",
                &new_key,
                "--json",
            ],
            &[("SWITCHBOARD_MASTER_KEY", &new_key)],
        )
        .await;
    assert!(
        !same.success && same.stderr.contains("already"),
        "{}",
        same.stderr
    );

    if backend == Backend::Sqlite {
        // With the default key file: the file is replaced by the new key.
        let file_env = TestEnv::new(Backend::Sqlite).await;
        let unset = [("SWITCHBOARD_MASTER_KEY", "")];
        let org = file_env
            .run(&["admin", "org", "create", "--name", "F", "--json"], &unset)
            .await;
        assert!(org.success, "{}", org.stderr);
        let key_file = file_env.dir.path().join("master.key");
        let before = std::fs::read_to_string(&key_file).unwrap();
        let rotated = file_env
            .run(&["admin", "master-key", "rotate", "--json"], &unset)
            .await;
        assert!(rotated.success, "{}", rotated.stderr);
        let after = std::fs::read_to_string(&key_file).unwrap();
        assert_ne!(before, after);
        assert!(
            !rotated.stdout.contains(after.trim()),
            "the new key stays in the file"
        );
        let again = file_env
            .run(&["admin", "org", "list", "--json"], &unset)
            .await;
        assert!(
            again.success,
            "the rotated file opens the database: {}",
            again.stderr
        );
    }
}

/// Polls `f` until it returns true or `deadline` passes.
async fn eventually<F, Fut>(deadline: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn postgres_outage_is_503_and_the_service_recovers_without_restart() {
    if crate::support::postgres_url().is_none() {
        crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
    }
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    let target = {
        let u = url::Url::parse(&env.database_url).unwrap();
        format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(5432))
    };
    let proxy = Proxy::start(&target).await;
    let proxied = via(&env.database_url, &proxy);
    let receiver = crate::receivers::Receiver::start().await;
    let server = env
        .start(&[
            ("SWITCHBOARD_DATABASE_URL", &proxied),
            ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
            ("SWITCHBOARD_WEBHOOK_POLL_INTERVAL", "200ms"),
        ])
        .await;
    let path = "/api/v1/integrations/channels";
    server.get(path, &seed.key).await.expect(200);
    server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &serde_json::json!({"name": "r", "url": receiver.url("/sink"), "events": ["message.sent"]}),
        )
        .await
        .expect(201);
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);

    proxy.take_down();
    // Keys and channel lists are served from the in-process cache for at most
    // `cache::MAX_STALENESS` (20 ms) after the last successful poll, so a read racing the cut
    // may still be answered; after that bound every read goes to the database and fails.
    let mut r = server.get(path, &seed.key).await;
    if r.status.as_u16() == 200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        r = server.get(path, &seed.key).await;
    }
    let r = r.expect_error(503, "service_unavailable");
    let body = serde_json::json!({"phone": "+4915123456789", "message": "during the outage"});
    let headers = [("Idempotency-Key", "outage-1")];
    let send = || server.post_with("/api/v1/integrations/messages", &seed.key, &body, &headers);
    send().await.expect_error(503, "service_unavailable");
    assert!(r.header("retry-after").is_some());
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect_error(503, "service_unavailable");
    server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);

    proxy.bring_up();
    let recovered = eventually(Duration::from_secs(30), || async {
        server.get(path, &seed.key).await.status.as_u16() == 200
    })
    .await;
    assert!(recovered, "requests succeed again once PostgreSQL is back");
    // The failed send was not stored: the client's retry with the same key succeeds, and the
    // dispatcher (which lost its connections too) delivers its event.
    send().await.expect(201);
    let got = receiver.wait_for("/sink", 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "the dispatcher recovered without a restart");
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

async fn redis_outage_falls_back_to_per_instance_limits() {
    let Some(redis) = crate::support::redis_url() else {
        crate::support::skip("SWITCHBOARD_TEST_REDIS_URL is not set");
    };
    let env = TestEnv::new(Backend::Sqlite).await;
    let seed = env.seed().await;
    let target = {
        let u = url::Url::parse(&redis).unwrap();
        format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(6379))
    };
    let proxy = Proxy::start(&target).await;
    let proxied = via(&redis, &proxy);
    let server = env
        .start(&[
            ("SWITCHBOARD_REDIS_URL", &proxied),
            ("SWITCHBOARD_RATE_LIMIT_READS", "3"),
        ])
        .await;
    let path = "/api/v1/integrations/channels";
    server.get(path, &seed.key).await.expect(200);

    proxy.take_down();
    // Limits still apply (never "no limits"), and traffic is still served (never "refuse all").
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(server.get(path, &seed.key).await.status.as_u16());
    }
    assert!(
        statuses.contains(&200),
        "traffic is still served while Redis is down: {statuses:?}"
    );
    assert!(
        statuses.contains(&429),
        "limits still apply while Redis is down: {statuses:?}"
    );
    let metrics = server.call(Method::GET, "/metrics", None, None).await.text;
    assert!(
        metrics.contains("switchboard_rate_limit_redis_errors_total"),
        "{metrics}"
    );
    assert!(
        server.logs().contains("Redis rate limiting failed"),
        "a warning is logged"
    );
}
