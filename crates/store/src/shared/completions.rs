//! The completion of idempotency claims inside the transaction that writes their result (a
//! send's record, a batch, a group commit): the statements alone, below every module that
//! writes results, so that none of them imports another to complete its claims.
//!
//! What a claim keeps is data: a response's bytes (`response_format` NULL), or the record of a
//! send (`send`: a [`RecordedSend`]) or a batch (`batch`: a [`BatchRecord`]) as JSON, from which
//! the API renders its answer, the first time and on every replay ([`Stored`]).

use super::{Conn, Db, dialect};
use crate::queue::BatchRecord;
use crate::{
    ClaimCompletion, ClaimRef, ClaimToken, NewKey, RecordedOutbound, RecordedSend, StoreError,
    StoreResult, Stored, StoredResponse,
};

const SEND: &str = "send";
const BATCH: &str = "batch";

/// One claim's completion, as written.
pub(crate) struct Completion {
    claim: ClaimRef,
    status: u16,
    body: Vec<u8>,
    format: Option<&'static str>,
}

impl Completion {
    /// A response's bytes.
    pub(crate) fn response(token: ClaimToken, r: &StoredResponse) -> Completion {
        Completion {
            claim: ClaimRef::Held(token),
            status: r.status,
            body: r.body.clone(),
            format: None,
        }
    }

    /// A send's record with what its answer needs beside it.
    pub(crate) fn send(
        c: &ClaimCompletion,
        recorded: &RecordedOutbound,
    ) -> StoreResult<Completion> {
        Ok(Completion {
            claim: c.claim.clone(),
            status: c.status,
            body: to_json(&c.with(recorded))?,
            format: Some(SEND),
        })
    }

    /// A batch's record (answered 202).
    pub(crate) fn batch(token: ClaimToken, b: &BatchRecord) -> StoreResult<Completion> {
        Ok(Completion {
            claim: ClaimRef::Held(token),
            status: 202,
            body: to_json(b)?,
            format: Some(BATCH),
        })
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| StoreError::Other(format!("a record to keep: {e}")))
}

/// What a completed claim's row keeps, read back.
pub(crate) fn stored(status: u16, body: Vec<u8>, format: Option<&str>) -> StoreResult<Stored> {
    let read = |what: &str, e: serde_json::Error| {
        StoreError::Other(format!("a kept {what} cannot be read: {e}"))
    };
    Ok(match format {
        None => Stored::Response(StoredResponse { status, body }),
        Some(SEND) => Stored::Send(Box::new(
            serde_json::from_slice::<RecordedSend>(&body).map_err(|e| read("send", e))?,
        )),
        Some(BATCH) => Stored::Batch(
            serde_json::from_slice::<BatchRecord>(&body).map_err(|e| read("batch", e))?,
        ),
        Some(other) => {
            return Err(StoreError::Other(format!(
                "a kept response of an unknown format `{other}`"
            )));
        }
    })
}

/// Completes a claim inside the caller's transaction (or writes a new key completed). A claim
/// that is no longer owned (taken over after its lease expired), or a new key that exists
/// already, is `ClaimLost`: the caller must roll back.
pub(crate) async fn complete_tx(conn: &mut Conn, c: &Completion) -> StoreResult<()> {
    let token = match &c.claim {
        ClaimRef::Held(token) => token,
        ClaimRef::New(key) => return insert_completed(conn, &[(key, c)]).await,
    };
    let done = sqlx::query(
        "UPDATE idempotency_records
         SET state = 'completed', owner = NULL, locked_until = NULL, response_status = $1, response_body = $2,
             response_format = $3
         WHERE id = $4 AND owner = $5 AND state = 'in_progress'",
    )
    .bind(i32::from(c.status))
    .bind(&c.body)
    .bind(c.format)
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
/// records), and writes the new keys among them completed ([`insert_completed`]). Fails with
/// `ClaimLost` unless every claim still held its key and every new key was written; the caller
/// then rolls back and completes each alone, so that only the lost one fails.
pub(crate) async fn complete_many_tx(conn: &mut Conn, done: &[Completion]) -> StoreResult<()> {
    let mut held = Vec::new();
    let mut new = Vec::new();
    for c in done {
        match &c.claim {
            ClaimRef::Held(token) => held.push((*token, c)),
            ClaimRef::New(key) => new.push((key, c)),
        }
    }
    for chunk in held.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<Db>::new("");
        push_complete_many(&mut qb, chunk);
        // On PostgreSQL, planned at each execution (as the deliveries' multi-row update, for the
        // same reason): a connection's cached generic plan, made while the table was small,
        // kept a sequential scan and a hash join of the whole table (`EXPLAIN EXECUTE` after
        // 50 000 records: 17 ms a group, where the fresh plan's primary key takes 0.3 ms).
        let updated = qb
            .build()
            .persistent(dialect::CACHE_GROWING_PLANS)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if updated != chunk.len() as u64 {
            return Err(StoreError::ClaimLost);
        }
    }
    insert_completed(conn, &new).await
}

/// Writes new keys completed, with their responses, by one multi-row `INSERT ... ON CONFLICT DO
/// NOTHING` per 500: `ClaimLost` unless every one was inserted (a key that exists, or that an
/// earlier row of the same statement took, is skipped). In the order of their keys, so that two
/// groups that share keys (duplicates racing) take them in the same order and wait for each
/// other instead of deadlocking.
async fn insert_completed(conn: &mut Conn, new: &[(&NewKey, &Completion)]) -> StoreResult<()> {
    let mut new = new.to_vec();
    new.sort_by(|(a, _), (b, _)| (a.api_key_id, &a.key).cmp(&(b.api_key_id, &b.key)));
    for chunk in new.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<Db>::new(
            "INSERT INTO idempotency_records (api_key_id, idempotency_key, method, path, fingerprint,
                                              state, created_at, expires_at, response_status,
                                              response_body, response_format) ",
        );
        qb.push_values(chunk, |mut row, (k, c)| {
            row.push_bind(k.api_key_id)
                .push_bind(k.key.as_str())
                .push_bind(k.method.as_str())
                .push_bind(k.path.as_str())
                .push_bind(k.fingerprint.as_slice())
                .push_bind("completed")
                .push_bind(k.now)
                .push_bind(k.now.saturating_add(k.retention))
                .push_bind(i32::from(c.status))
                .push_bind(c.body.as_slice())
                .push_bind(c.format);
        });
        qb.push(" ON CONFLICT (api_key_id, idempotency_key) DO NOTHING");
        let inserted = qb.build().execute(&mut *conn).await?.rows_affected();
        if inserted != chunk.len() as u64 {
            return Err(StoreError::ClaimLost);
        }
    }
    Ok(())
}

/// The statement of [`complete_many_tx`] for `chunk`, appended to `qb`.
///
/// A claim is found by its id and its owner alone: an owner is only ever set together with
/// `state = 'in_progress'` (a claim, a takeover) and cleared when the claim completes, so the
/// owner also says the claim is in progress. With a constant `state = 'in_progress'` term
/// beside the join, SQLite's planner scanned the whole table for every group (`SCAN
/// idempotency_records` with a bloom filter on the `VALUES`): 1 to 3 ms a group with 12 000
/// kept records, growing with the day's sends. Without it, each row is found by its primary
/// key (checked by `sqlite::tests::statements_on_growing_tables_use_their_keys`).
pub(super) fn push_complete_many<'a>(
    qb: &mut sqlx::QueryBuilder<'a, Db>,
    chunk: &[(ClaimToken, &'a Completion)],
) {
    qb.push(
        "UPDATE idempotency_records
         SET state = 'completed', owner = NULL, locked_until = NULL, response_status = v.column3,
             response_body = v.column4, response_format = v.column5
         FROM (",
    );
    qb.push_values(chunk, |mut row, (token, c)| {
        row.push_bind(token.record_id)
            .push_bind(token.owner)
            .push_bind(i32::from(c.status))
            .push_bind(c.body.as_slice())
            .push_bind(c.format);
    });
    qb.push(
        ") AS v WHERE idempotency_records.id = v.column1 AND idempotency_records.owner = v.column2",
    );
}
