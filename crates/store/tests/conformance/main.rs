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

/// Declares `name::sqlite` and `name::postgres` for each test function `name`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            use $crate::TestArg;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let s = switchboard_store::testing::sqlite().await;
                super::$name(TestArg::from_test_store(&s)).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(s) = switchboard_store::testing::postgres().await else { return };
                super::$name(TestArg::from_test_store(&s)).await;
            }
        }
    )* };
}

mod support;

mod core;
mod media;
mod messaging;
mod org_data;
mod org_features;
mod templates;
mod webhooks;
