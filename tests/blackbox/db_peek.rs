//! Reads a test's database directly, for what the API does not show yet: the outbox events
//! written with each change (their delivery is another part of the service) and the number of
//! idempotency records (to see the purge work).

#![allow(dead_code)]

use serde_json::Value;

use crate::support::{Backend, TestEnv};

/// An outbox event: name, `data`, channel identity (or null).
#[derive(Clone, Debug)]
pub struct Event {
    pub name: String,
    pub data: Value,
    pub channel: Value,
}

async fn rows(
    env: &TestEnv,
    sql_sqlite: &str,
    sql_pg: &str,
    org_id: i64,
) -> Vec<(String, String, String)> {
    match env.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&env.database_url).await.unwrap();
            let rows = sqlx::query_as(sql_sqlite)
                .bind(org_id)
                .fetch_all(&pool)
                .await
                .unwrap();
            pool.close().await;
            rows
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
            let rows = sqlx::query_as(sql_pg)
                .bind(org_id)
                .fetch_all(&pool)
                .await
                .unwrap();
            pool.close().await;
            rows
        }
    }
}

/// The organization's outbox events, oldest first. An event written with its envelope keeps
/// its data there only (`data` is JSON `null`, see the store's `event_payload::DATA_IN_ENVELOPE`).
pub async fn events(env: &TestEnv, org_id: i64) -> Vec<Event> {
    rows(
        env,
        "SELECT name, CASE WHEN data = 'null' AND envelope IS NOT NULL
                           THEN COALESCE(json_extract(envelope, '$.data'), 'null') ELSE data END,
                COALESCE(channel, 'null')
         FROM events WHERE org_id = $1 ORDER BY id",
        "SELECT name, CASE WHEN data = 'null'::jsonb AND envelope IS NOT NULL
                           THEN (envelope::jsonb -> 'data')::text ELSE data::text END,
                COALESCE(channel::text, 'null')
         FROM events WHERE org_id = $1 ORDER BY id",
        org_id,
    )
    .await
    .into_iter()
    .map(|(name, data, channel)| Event {
        name,
        data: serde_json::from_str(&data).unwrap(),
        channel: serde_json::from_str(&channel).unwrap(),
    })
    .collect()
}

/// The organization's outbox events with this name.
pub async fn events_named(env: &TestEnv, org_id: i64, name: &str) -> Vec<Event> {
    events(env, org_id)
        .await
        .into_iter()
        .filter(|e| e.name == name)
        .collect()
}

/// How many idempotency records exist (all credentials).
pub async fn idempotency_records(env: &TestEnv) -> i64 {
    let sql = "SELECT CAST(COUNT(*) AS TEXT), '', '' FROM idempotency_records WHERE $1 = $1";
    let r = rows(env, sql, sql, 0).await;
    r[0].0.parse().unwrap()
}
