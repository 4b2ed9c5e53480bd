//! Issue 8: faults (database and Redis outages), hostile clients, secrets in logs.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::faults::{Proxy, via};
use crate::support::{Backend, TestEnv};

/// Polls `f` until it returns true or `deadline` passes.
async fn eventually<F, Fut>(deadline: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_is_503_and_the_service_recovers_without_restart() {
    if crate::support::postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set; skipping");
        return;
    }
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    let target = {
        let u = url::Url::parse(&env.database_url).unwrap();
        format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(5432))
    };
    let proxy = Proxy::start(&target).await;
    let proxied = via(&env.database_url, &proxy);
    let server = env.start(&[("SWITCHBOARD_DATABASE_URL", &proxied)]).await;
    let path = "/api/v1/integrations/channels";
    server.get(path, &seed.key).await.expect(200);
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);

    proxy.take_down();
    let r = server
        .get(path, &seed.key)
        .await
        .expect_error(503, "service_unavailable");
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
    server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_falls_back_to_per_instance_limits() {
    let Some(redis) = crate::support::redis_url() else {
        eprintln!("SWITCHBOARD_TEST_REDIS_URL is not set; skipping");
        return;
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
        metrics.contains("rate_limit_redis_errors_total"),
        "{metrics}"
    );
    assert!(
        server.logs().contains("Redis rate limiting failed"),
        "a warning is logged"
    );
}
