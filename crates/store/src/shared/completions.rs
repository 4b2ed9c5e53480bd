//! The completion of idempotency claims inside the transaction that writes their result (a
//! send's record, a batch, a group commit): the statements alone, below every module that
//! writes results, so that none of them imports another to complete its claims.

use super::{Conn, Db};
use crate::{ClaimToken, StoreError, StoreResult, StoredResponse};

/// Stores the response of a claim inside the caller's transaction. A claim that is no longer
/// owned (taken over after its lease expired) is `Conflict`: the caller must roll back.
pub(crate) async fn complete_tx(
    conn: &mut Conn,
    token: ClaimToken,
    response: &StoredResponse,
) -> StoreResult<()> {
    let done = sqlx::query(
        "UPDATE idempotency_records
         SET state = 'completed', owner = NULL, locked_until = NULL, response_status = $1, response_body = $2
         WHERE id = $3 AND owner = $4 AND state = 'in_progress'",
    )
    .bind(i32::from(response.status))
    .bind(&response.body)
    .bind(token.record_id)
    .bind(token.owner)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        Err(StoreError::ClaimLost)
    }
}

/// Completes several claims with one `UPDATE ... FROM (VALUES ...)` per 500 (a group commit's
/// records). Fails with `ClaimLost` unless every claim still held its key; the caller then
/// rolls back and completes each alone, so that only the lost one fails.
pub(crate) async fn complete_many_tx(
    conn: &mut Conn,
    done: &[(ClaimToken, StoredResponse)],
) -> StoreResult<()> {
    for chunk in done.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "UPDATE idempotency_records
             SET state = 'completed', owner = NULL, locked_until = NULL, response_status = v.column3,
                 response_body = v.column4
             FROM (",
        );
        qb.push_values(chunk, |mut row, (token, response)| {
            row.push_bind(token.record_id)
                .push_bind(token.owner)
                .push_bind(i32::from(response.status))
                .push_bind(response.body.as_slice());
        });
        qb.push(
            ") AS v WHERE idempotency_records.id = v.column1 AND idempotency_records.owner = v.column2
               AND idempotency_records.state = 'in_progress'",
        );
        let updated = qb.build().execute(&mut *conn).await?.rows_affected();
        if updated != chunk.len() as u64 {
            return Err(StoreError::ClaimLost);
        }
    }
    Ok(())
}
