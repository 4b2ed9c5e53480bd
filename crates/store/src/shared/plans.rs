//! The plans of statements whose rows SQLite's planner once found by scanning a whole table
//! (the multi-row `UPDATE ... FROM (VALUES ...)` statements, the campaign worker's claim), for
//! the planner test `sqlite::tests::statements_on_growing_tables_use_their_keys`. Compiled into
//! both backends' copies of `shared` (tests only); SQLite's test uses it.
#![allow(dead_code)]

use sqlx::QueryBuilder;
use uuid::Uuid;

use super::campaigns::PENDING_RECIPIENTS;
use super::completions::{Completion, push_complete_many};
use super::webhooks::push_successes;
use super::{Conn, Db};
use crate::webhooks::{AttemptOutcome, AttemptRecord};
use crate::{ClaimToken, StoreResult, StoredResponse};
use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::delivery::Disposition;

/// Each statement, named, with the line its plan must hold and the lines of its `EXPLAIN QUERY
/// PLAN` (the multi-row updates with three rows each).
pub(crate) async fn explain_statements(
    conn: &mut Conn,
) -> StoreResult<Vec<(&'static str, &'static str, Vec<String>)>> {
    let completions: Vec<Completion> = (1..=3)
        .map(|record_id| {
            let token = ClaimToken {
                record_id,
                owner: Uuid::new_v4(),
            };
            let response = StoredResponse {
                status: 201,
                body: b"{}".to_vec(),
            };
            Completion::response(token, &response)
        })
        .collect();
    let held: Vec<(ClaimToken, &Completion)> = completions
        .iter()
        .zip(1..)
        .map(|(c, record_id)| {
            let token = ClaimToken {
                record_id,
                owner: Uuid::new_v4(),
            };
            (token, c)
        })
        .collect();
    let mut qb = QueryBuilder::<Db>::new("EXPLAIN QUERY PLAN ");
    push_complete_many(&mut qb, &held);
    let claims = lines(qb.build(), conn).await?;

    let now = Timestamp::from_millis(1_800_000_000_000);
    let outcomes: Vec<AttemptOutcome> = (1..=3)
        .map(|delivery_id| AttemptOutcome {
            delivery_id,
            token: Uuid::new_v4(),
            attempt: AttemptRecord {
                number: 1,
                url: Some("https://example.com/hook".into()),
                started_at: now,
                duration_ms: Some(5),
                response_status: Some(200),
                error_code: None,
                error_message: None,
                response_body_excerpt: None,
                signed_with: None,
            },
            disposition: Disposition::Delivered,
            now,
            disable_after: 5,
        })
        .collect();
    let chunk = [0, 1, 2];
    let first = [Some("{}".to_owned()), None, None];
    let mut qb = QueryBuilder::<Db>::new("EXPLAIN QUERY PLAN ");
    push_successes(&mut qb, &outcomes, &chunk, &first);
    let successes = lines(qb.build(), conn).await?;

    let mut qb = QueryBuilder::<Db>::new("EXPLAIN QUERY PLAN ");
    qb.push(PENDING_RECIPIENTS);
    let recipients = lines(qb.build().bind(now).bind(10_i64), conn).await?;

    Ok(vec![
        (
            "idempotency completions",
            "SEARCH idempotency_records USING INTEGER PRIMARY KEY (rowid=?)",
            claims,
        ),
        (
            "delivery successes",
            "SEARCH webhook_deliveries USING INTEGER PRIMARY KEY (rowid=?)",
            successes,
        ),
        (
            "campaign claims",
            "SCAN campaign_recipients USING INDEX campaign_recipients_pending",
            recipients,
        ),
    ])
}

async fn lines<'q>(
    query: sqlx::query::Query<'q, Db, <Db as sqlx::Database>::Arguments<'q>>,
    conn: &mut Conn,
) -> StoreResult<Vec<String>> {
    use sqlx::Row;
    let rows = query.fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(|r| r.get::<String, _>(3)).collect())
}
