//! The plans of the multi-row `UPDATE ... FROM (VALUES ...)` statements, for the planner test
//! `sqlite::tests::multi_row_updates_find_their_rows_by_primary_key`. Compiled into both
//! backends' copies of `shared` (tests only); SQLite's test uses it.
#![allow(dead_code)]

use sqlx::QueryBuilder;
use uuid::Uuid;

use super::completions::{Completion, push_complete_many};
use super::webhooks::push_successes;
use super::{Conn, Db};
use crate::webhooks::{AttemptOutcome, AttemptRecord};
use crate::{ClaimToken, StoreResult, StoredResponse};
use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::delivery::Disposition;

/// Each multi-row update, named, with the lines of its `EXPLAIN QUERY PLAN` (three rows each).
pub(crate) async fn explain_multi_row_updates(
    conn: &mut Conn,
) -> StoreResult<Vec<(&'static str, Vec<String>)>> {
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
    let mut qb = QueryBuilder::<Db>::new("EXPLAIN QUERY PLAN ");
    push_complete_many(&mut qb, &completions);
    let claims = lines(qb, conn).await?;

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
    let successes = lines(qb, conn).await?;

    Ok(vec![
        ("idempotency completions", claims),
        ("delivery successes", successes),
    ])
}

async fn lines(mut qb: QueryBuilder<'_, Db>, conn: &mut Conn) -> StoreResult<Vec<String>> {
    let rows: Vec<(i64, i64, i64, String)> = qb.build_query_as().fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(|r| r.3).collect())
}
