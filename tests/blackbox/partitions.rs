//! Retention by partition (PostgreSQL, `SWITCHBOARD_RETENTION_PARTITIONS`): the running service
//! converts its webhook tables once, keeps the rows written before, drops whole partitions past
//! the retention, and its hand-offs survive kill -9 on partitioned tables.

use std::time::{Duration, Instant};

use crate::receivers::{ReceivedRequest, Receiver};
use crate::recovery::{ledger, send};
use crate::support::{Backend, Server, TestEnv};
use crate::webhooks::{Api, handed_takeover, with};

crate::async_tests!(4;
    partitioned_retention_keeps_the_history_and_drops_whole_partitions,
    handed_deliveries_on_partitioned_tables_are_taken_over_after_kill_9,
);

const WAIT: Duration = Duration::from_secs(30);
const PHONE: &str = "+4915123450177";

fn needs_postgres() {
    if crate::support::postgres_url().is_none() {
        crate::support::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set");
    }
}

/// Answers one scalar query on the test's database.
async fn scalar<T>(env: &TestEnv, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
    let v = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
    pool.close().await;
    v
}

async fn partitioned(env: &TestEnv) -> bool {
    scalar(
        env,
        "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('webhook_deliveries'))",
    )
    .await
}

/// Whether a table exists.
async fn exists(env: &TestEnv, table: &str) -> bool {
    scalar(env, &format!("SELECT to_regclass('{table}') IS NOT NULL")).await
}

/// Sends `n` messages and waits until the receiver has `total` deliveries in all.
async fn send_and_wait(server: &Server, key: &str, rx: &Receiver, n: usize, total: usize) {
    for i in 0..n {
        send(server, key, PHONE, &format!("kept {i}")).await;
    }
    rx.wait_for("/ep", total, WAIT).await;
}

/// Rows written before the conversion stay readable; two instances starting at once convert
/// once; past the retention the history rows are deleted and the partition that held the later
/// rows is dropped whole (events with it); the service goes on writing to the new partition.
async fn partitioned_retention_keeps_the_history_and_drops_whole_partitions() {
    needs_postgres();
    let env = TestEnv::new(Backend::Postgres).await;
    let seed = env.seed().await;
    let rx = Receiver::start().await;

    // Plain tables: three deliveries.
    let plain = with(&[]);
    let mut a = env.start(&plain).await;
    let ep = Api::new(&a, &seed.key)
        .create(&rx.url("/ep"), &["message.sent"])
        .await;
    send_and_wait(&a, &seed.key, &rx, 3, 3).await;
    a.terminate().await;
    // (Already partitioned when the whole suite runs so: SWITCHBOARD_TEST_RETENTION_PARTITIONS.)
    let before = partitioned(&env).await;
    assert_eq!(before, crate::support::partitioned_suite());

    // Two instances start at once with partitions on (the default retention): one converts,
    // the history stays in the ledger, new deliveries go to the first range partition.
    let on = with(&[("SWITCHBOARD_RETENTION_PARTITIONS", "true")]);
    let (mut b, mut b2) = tokio::join!(env.start(&on), env.start(&on));
    assert!(partitioned(&env).await);
    let converted = [&b, &b2]
        .iter()
        .filter(|s| s.logs().contains("partitioned events, webhook_deliveries"))
        .count();
    assert_eq!(
        converted,
        usize::from(!before),
        "one instance converts the tables"
    );
    assert_eq!(ledger(&b, &seed.key, &ep.uuid).await.len(), 3);
    send_and_wait(&b2, &seed.key, &rx, 3, 6).await;
    let api = Api::new(&b, &seed.key);
    let listed = ledger(&b, &seed.key, &ep.uuid).await;
    assert_eq!(listed.len(), 6);
    for d in &listed {
        api.wait_status(d["delivery_id"].as_str().unwrap(), "delivered")
            .await;
    }
    let in_partition: i64 = scalar(&env, "SELECT count(*) FROM webhook_deliveries_p1").await;
    let later = if before { 6 } else { 3 };
    assert_eq!(
        in_partition, later,
        "the later deliveries are in the range partition"
    );
    b.terminate().await;
    b2.terminate().await;

    // A retention of 2 s (a span of 1 s): everything goes, the history row by row, the range
    // partitions whole.
    let short = with(&[
        ("SWITCHBOARD_RETENTION_PARTITIONS", "true"),
        ("SWITCHBOARD_DELIVERY_RETENTION", "2s"),
        ("SWITCHBOARD_PURGE_INTERVAL", "100ms"),
    ]);
    let c = env.start(&short).await;
    let end = Instant::now() + WAIT;
    while exists(&env, "webhook_deliveries_p1").await || exists(&env, "events_p1").await {
        assert!(Instant::now() < end, "partition 1 was not dropped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        c.logs().contains("dropped a partition past the retention"),
        "{}",
        c.logs()
    );
    assert!(!exists(&env, "webhook_attempts_p1").await);
    let history: i64 = scalar(&env, "SELECT count(*) FROM webhook_deliveries_history").await;
    assert_eq!(
        history, 0,
        "the rows from before the conversion are deleted"
    );
    // The service goes on: a send after the drops is delivered (into a newer partition).
    send_and_wait(&c, &seed.key, &rx, 1, 7).await;
    let last: Vec<String> = rx
        .requests("/ep")
        .iter()
        .map(ReceivedRequest::delivery)
        .collect();
    assert_eq!(
        last.iter().collect::<std::collections::HashSet<_>>().len(),
        7
    );
    let newer: i64 = scalar(
        &env,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_deliveries'::regclass",
    )
    .await;
    assert!(newer >= 3, "history, default and a newer range partition");
}

/// The hand-off test of `webhooks.rs` on partitioned tables: two instances, deliveries leased
/// to the first by the sends' transactions, kill -9, the second takes them over with the
/// interrupted attempts logged.
async fn handed_deliveries_on_partitioned_tables_are_taken_over_after_kill_9() {
    needs_postgres();
    handed_takeover(
        Backend::Postgres,
        &[("SWITCHBOARD_RETENTION_PARTITIONS", "true")],
    )
    .await
}
