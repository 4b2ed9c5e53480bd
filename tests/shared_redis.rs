//! What instances share through Redis (`SWITCHBOARD_TEST_REDIS_URL`): one pace per recipient
//! and channel, one rate-limit budget per key. The per-process pacer is held to the same rules.
//! Without Redis the Redis tests are reported as skipped (crates/testkit), never as passed.

use std::sync::Arc;
use std::time::Duration;

use switchboard::http::rate_limit::{LimitClass, RateLimiter};
use switchboard::providers::pacing::Pacer;
use switchboard::shared_redis::SharedRedis;
use switchboard_domain::clock::{SharedClock, SystemClock};
use switchboard_domain::pacing::Pace;

fn run(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(test)
}

fn redis_url() -> String {
    std::env::var("SWITCHBOARD_TEST_REDIS_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| switchboard_testkit::skip("SWITCHBOARD_TEST_REDIS_URL is not set"))
}

fn rand_channel() -> i64 {
    (uuid::Uuid::new_v4().as_u128() % 1_000_000_000) as i64
}

async fn shares_one_pace(a: &Pacer, b: &Pacer) {
    // One recipient: the first send goes now, the second (from the other instance) must wait
    // the interval, which is beyond a 1 s bound.
    let channel = rand_channel();
    assert!(matches!(
        a.reserve(channel, 80, "491511", Duration::from_secs(1)).await,
        Pace::Go { wait_us } if wait_us < 100_000
    ));
    assert!(matches!(
        b.reserve(channel, 80, "491511", Duration::from_secs(1)).await,
        Pace::Later { after_us } if after_us > 5_000_000
    ));
    // What reachability answers on either instance: the recipient's next send is about the
    // interval away; another recipient's is not.
    for p in [a, b] {
        let wait = p.wait_for(channel, "491511").await;
        assert!(wait > Duration::from_secs(5), "{wait:?}");
        assert!(p.wait_for(channel, "491599").await < Duration::from_millis(100));
    }
    // Other recipients share the channel's rate: at 10/s, the fourth send is 300 ms out.
    let channel = rand_channel();
    let mut waits = Vec::new();
    for (i, p) in [a, b, a, b].iter().enumerate() {
        match p
            .reserve(channel, 10, &format!("4915{i}"), Duration::from_secs(1))
            .await
        {
            Pace::Go { wait_us } => waits.push(wait_us),
            other => panic!("{other:?}"),
        }
    }
    assert!(waits[3] > 250_000 && waits[3] < 350_000, "{waits:?}");
    assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
}

fn a_local_pacer_keeps_one_pace() {
    run(async {
        let p = Pacer::local(Duration::from_secs(6));
        shares_one_pace(&p, &p).await;
    })
}

fn redis_shares_one_pace_between_instances() {
    let url = redis_url();
    run(async move {
        let ns = uuid::Uuid::new_v4().to_string();
        let a = Pacer::shared(
            Duration::from_secs(6),
            SharedRedis::connect(&url, &ns).await.unwrap(),
        );
        let b = Pacer::shared(
            Duration::from_secs(6),
            SharedRedis::connect(&url, &ns).await.unwrap(),
        );
        shares_one_pace(&a, &b).await;
    })
}

fn redis_shares_one_rate_limit_budget() {
    let url = redis_url();
    run(async move {
        let clock: SharedClock = Arc::new(SystemClock);
        let ns = uuid::Uuid::new_v4().to_string();
        let a = RateLimiter::with_redis(
            clock.clone(),
            SharedRedis::connect(&url, &ns).await.unwrap(),
        );
        let b = RateLimiter::with_redis(clock, SharedRedis::connect(&url, &ns).await.unwrap());
        let mut admitted = 0;
        for i in 0..10 {
            let limiter = if i % 2 == 0 { &a } else { &b };
            if limiter.check(1, LimitClass::Sends, 6).await.allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 6, "two limiters on one Redis enforce one budget");
    })
}

switchboard_testkit::register!("a_local_pacer_keeps_one_pace", a_local_pacer_keeps_one_pace);
switchboard_testkit::register!(
    "redis_shares_one_pace_between_instances",
    redis_shares_one_pace_between_instances
);
switchboard_testkit::register!(
    "redis_shares_one_rate_limit_budget",
    redis_shares_one_rate_limit_budget
);

fn main() {
    switchboard_testkit::main()
}
