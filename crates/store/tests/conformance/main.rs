//! One conformance suite for every storage backend: each test runs against SQLite and, when
//! `SWITCHBOARD_TEST_POSTGRES_URL` is set, against a fresh PostgreSQL database.
//!
//! Declare tests with `conformance!(name, ...)`; a test is `async fn name(s: SharedStore)`, or
//! `async fn name(ts: &TestStore)` when it also needs the database itself (`raw_execute`).

use switchboard_store::SharedStore;
use switchboard_store::testing::TestStore;

/// What a conformance test takes: the store, or the whole test database.
pub trait TestArg<'a> {
    fn from_test_store(t: &'a TestStore) -> Self;
}

impl<'a> TestArg<'a> for SharedStore {
    fn from_test_store(t: &'a TestStore) -> Self {
        t.store.clone()
    }
}

impl<'a> TestArg<'a> for &'a TestStore {
    fn from_test_store(t: &'a TestStore) -> Self {
        t
    }
}

/// Declares `name::sqlite`, `name::postgres` and `name::postgres_partitioned` for each test
/// function `name`; the last runs on a PostgreSQL database whose webhook tables are partitioned
/// for retention (`LedgerStore::partition_for_retention`, the operator's
/// `SWITCHBOARD_RETENTION_PARTITIONS`), since every statement must work on both shapes. The
/// PostgreSQL runs are skipped (reported as ignored, never as passed) when
/// `SWITCHBOARD_TEST_POSTGRES_URL` is unset.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            use $crate::TestArg;
            fn sqlite() {
                $crate::run_async(2, async {
                    let s = switchboard_store::testing::sqlite().await;
                    super::$name(TestArg::from_test_store(&s)).await;
                })
            }
            fn postgres() {
                $crate::run_async(2, async {
                    let Some(s) = switchboard_store::testing::postgres().await else {
                        switchboard_testkit::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set")
                    };
                    super::$name(TestArg::from_test_store(&s)).await;
                })
            }
            fn postgres_partitioned() {
                $crate::run_async(2, async {
                    let Some(s) = switchboard_store::testing::postgres().await else {
                        switchboard_testkit::skip("SWITCHBOARD_TEST_POSTGRES_URL is not set")
                    };
                    assert!(s.store.partition_for_retention().await.unwrap());
                    super::$name(TestArg::from_test_store(&s)).await;
                })
            }
            switchboard_testkit::register!("sqlite", sqlite);
            switchboard_testkit::register!("postgres", postgres);
            switchboard_testkit::register!("postgres_partitioned", postgres_partitioned);
        }
    )* };
}

/// Runs one test's future on a multi-threaded runtime of its own (as `#[tokio::test]` does).
fn run_async(threads: usize, test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(test)
}

fn main() {
    switchboard_testkit::main()
}

mod support;

mod core;
mod media;
mod messaging;
mod org_data;
mod org_features;
mod templates;
mod webhooks;
