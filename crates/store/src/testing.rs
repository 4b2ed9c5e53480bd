//! Test support (feature `testing`): a store on a fresh database, SQLite in a temporary
//! directory or a new PostgreSQL database on `SWITCHBOARD_TEST_POSTGRES_URL`, dropped with the
//! guard. Used by the conformance suite and the service's unit tests.

use std::sync::Arc;

use uuid::Uuid;

use crate::{PgStore, SharedStore, SqliteStore, SystemStore};

/// A store on a fresh database, dropped with the guard.
pub struct TestStore {
    pub store: SharedStore,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

impl TestStore {
    /// Runs one SQL statement on a connection of its own, outside the store (to check what the
    /// database itself allows). Returns the rows affected.
    pub async fn raw_execute(&self, sql: &str) -> Result<u64, sqlx::Error> {
        use sqlx::Connection;
        if let Some((admin, name)) = &self.pg {
            let mut url = url::Url::parse(admin).unwrap();
            url.set_path(name);
            let mut c = sqlx::PgConnection::connect(url.as_str()).await?;
            Ok(sqlx::query(sql).execute(&mut c).await?.rows_affected())
        } else {
            let dir = self._dir.as_ref().expect("a SQLite store has a directory");
            let url = format!("sqlite://{}", dir.path().join("t.db").display());
            let mut c = sqlx::SqliteConnection::connect(&url).await?;
            Ok(sqlx::query(sql).execute(&mut c).await?.rows_affected())
        }
    }
}

impl TestStore {
    /// A second store on the same database, as another process or instance would open it.
    pub async fn another_instance(&self) -> SharedStore {
        if let Some((admin, name)) = &self.pg {
            let mut url = url::Url::parse(admin).unwrap();
            url.set_path(name);
            Arc::new(PgStore::connect(url.as_str(), 4).await.unwrap())
        } else {
            let dir = self._dir.as_ref().expect("a SQLite store has a directory");
            Arc::new(
                SqliteStore::connect(&dir.path().join("t.db"), 2)
                    .await
                    .unwrap(),
            )
        }
    }

    /// Whether the webhook tables are partitioned for retention (PostgreSQL, once
    /// `partition_for_retention` ran).
    pub async fn partitioned(&self) -> bool {
        self.pg.is_some()
            && self
                .raw_execute(
                    "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass('webhook_deliveries')",
                )
                .await
                .unwrap()
                == 1
    }

    /// `postgres` or `sqlite`.
    pub fn backend(&self) -> &'static str {
        self.store.backend()
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some((admin, name)) = self.pg.take() {
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    use sqlx::Connection;
                    if let Ok(mut c) = sqlx::PgConnection::connect(&admin).await {
                        let _ = sqlx::query(&format!(
                            "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                        ))
                        .execute(&mut c)
                        .await;
                    }
                });
            })
            .join();
        }
    }
}

pub async fn sqlite() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::connect(&dir.path().join("t.db"), 4)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    TestStore {
        store: Arc::new(store),
        _dir: Some(dir),
        pg: None,
    }
}

pub async fn postgres() -> Option<TestStore> {
    let admin = std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())?;
    use sqlx::Connection;
    let name = format!("sbunit_{}", Uuid::new_v4().simple());
    let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut c)
        .await
        .unwrap();
    let mut url = url::Url::parse(&admin).unwrap();
    url.set_path(&name);
    let store = PgStore::connect(url.as_str(), 8).await.unwrap();
    store.migrate().await.unwrap();
    Some(TestStore {
        store: Arc::new(store),
        _dir: None,
        pg: Some((admin, name)),
    })
}
