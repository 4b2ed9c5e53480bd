//! Idempotency records: claim (a short transaction of its own), complete (inside the
//! transaction that writes the result, conditional on still owning the claim), release, purge.

use async_trait::async_trait;

use super::{Backend, dialect};
use crate::{
    ClaimOutcome, ClaimToken, IdempotencyClaim, IdempotencyState, IdempotencyStore, StoreError,
    StoreResult, Stored, StoredResponse,
};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

#[derive(sqlx::FromRow)]
pub(super) struct RecordRow {
    id: i64,
    fingerprint: Vec<u8>,
    state: String,
    locked_until: Option<Timestamp>,
    response_status: Option<i32>,
    response_body: Option<Vec<u8>>,
    response_format: Option<String>,
    expires_at: Timestamp,
}

impl RecordRow {
    fn response(&self) -> StoreResult<Stored> {
        match (self.response_status, &self.response_body) {
            (Some(status), Some(body)) => super::completions::stored(
                u16::try_from(status)
                    .map_err(|_| StoreError::Other("stored status out of range".into()))?,
                body.clone(),
                self.response_format.as_deref(),
            ),
            _ => Err(StoreError::Other(
                "a completed idempotency record has no response".into(),
            )),
        }
    }
}

/// Claims an expired record (not purged yet) in place, as if the key were new.
async fn start_over(
    conn: &mut super::Conn,
    c: &IdempotencyClaim,
    record_id: i64,
    locked_until: Timestamp,
    expires_at: Timestamp,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE idempotency_records
         SET method = $1, path = $2, fingerprint = $3, state = 'in_progress', owner = $4, locked_until = $5,
             response_status = NULL, response_body = NULL, response_format = NULL, created_at = $6, expires_at = $7
         WHERE id = $8",
    )
    .bind(&c.method)
    .bind(&c.path)
    .bind(&c.fingerprint)
    .bind(c.owner)
    .bind(locked_until)
    .bind(c.now)
    .bind(expires_at)
    .bind(record_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[async_trait]
impl IdempotencyStore for Backend {
    async fn claim_idempotency(&self, c: IdempotencyClaim) -> StoreResult<ClaimOutcome> {
        let locked_until = c.now.saturating_add(c.lease);
        // A record never expires while its claim holds the key.
        let expires_at = c.now.saturating_add(c.retention.max(c.lease));
        // The common case, a new key: one statement, atomic on its own (no transaction).
        let insert = || {
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO idempotency_records (api_key_id, idempotency_key, method, path, fingerprint, state, owner,
                                                  locked_until, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, 'in_progress', $6, $7, $8, $9)
                 ON CONFLICT (api_key_id, idempotency_key) DO NOTHING
                 RETURNING id",
            )
            .bind(c.api_key_id)
            .bind(&c.key)
            .bind(&c.method)
            .bind(&c.path)
            .bind(&c.fingerprint)
            .bind(c.owner)
            .bind(locked_until)
            .bind(c.now)
            .bind(expires_at)
        };
        let claimed = |record_id| ClaimOutcome::Claimed {
            token: ClaimToken {
                record_id,
                owner: c.owner,
            },
            taken_over: false,
        };
        // With the claims of concurrent requests, by one multi-row statement.
        let new = super::group_commit::NewClaim {
            api_key_id: c.api_key_id,
            key: c.key.clone(),
            method: c.method.clone(),
            path: c.path.clone(),
            fingerprint: c.fingerprint.clone(),
            owner: c.owner,
            locked_until,
            now: c.now,
            expires_at,
        };
        if let Some(record_id) = self.claim_new_grouped(new).await? {
            return Ok(claimed(record_id));
        }
        // The key exists (or existed a moment ago): decide under a transaction.
        let mut tx = self.write().await?;
        let mut tries = 0;
        let row: RecordRow = loop {
            let inserted: Option<i64> = insert().fetch_optional(&mut *tx).await?;
            if let Some(record_id) = inserted {
                tx.commit(Effects::none()).await?;
                return Ok(claimed(record_id));
            }
            // The key exists: lock its row (PostgreSQL) and decide.
            let row: Option<RecordRow> = sqlx::query_as(dialect::SELECT_IDEMPOTENCY_FOR_UPDATE)
                .bind(c.api_key_id)
                .bind(&c.key)
                .fetch_optional(&mut *tx)
                .await?;
            match row {
                Some(row) => break row,
                // Purged (expired) between the insert and the read (PostgreSQL, READ
                // COMMITTED): the key is free again, so insert once more.
                None if tries < 8 => tries += 1,
                None => {
                    return Err(StoreError::Other(
                        "an idempotency record kept vanishing while it was claimed".into(),
                    ));
                }
            }
        };
        let token = ClaimToken {
            record_id: row.id,
            owner: c.owner,
        };
        let lease_over = row.state == "completed" || row.locked_until.is_none_or(|t| t <= c.now);
        if row.expires_at <= c.now && lease_over {
            // Expired and not purged yet: as good as absent. Start over in place.
            start_over(&mut tx, &c, row.id, locked_until, expires_at).await?;
            tx.commit(Effects::none()).await?;
            return Ok(ClaimOutcome::Claimed {
                token,
                taken_over: false,
            });
        }
        let outcome = if row.fingerprint != c.fingerprint {
            ClaimOutcome::Conflict
        } else if row.state == "completed" {
            ClaimOutcome::Replay(row.response()?)
        } else if row.locked_until.is_some_and(|t| t > c.now) {
            ClaimOutcome::InProgress
        } else {
            // The claimant's lease expired (it crashed or is too slow): take the key over.
            sqlx::query(
                "UPDATE idempotency_records SET owner = $1, locked_until = $2, expires_at = $3
                 WHERE id = $4 AND state = 'in_progress'",
            )
            .bind(c.owner)
            .bind(locked_until)
            .bind(row.expires_at.max(locked_until))
            .bind(row.id)
            .execute(&mut *tx)
            .await?;
            ClaimOutcome::Claimed {
                token,
                taken_over: true,
            }
        };
        tx.commit(Effects::none()).await?;
        Ok(outcome)
    }

    async fn complete_idempotency(
        &self,
        token: ClaimToken,
        response: StoredResponse,
    ) -> StoreResult<bool> {
        let mut tx = self.write().await?;
        let completion = super::completions::Completion::response(token, &response);
        match super::completions::complete_tx(&mut tx, &completion).await {
            Ok(()) => {
                tx.commit(Effects::none()).await?;
                Ok(true)
            }
            Err(StoreError::ClaimLost) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release_idempotency(&self, token: ClaimToken) -> StoreResult<()> {
        let mut tx = self.write().await?;
        sqlx::query(
            "DELETE FROM idempotency_records WHERE id = $1 AND owner = $2 AND state = 'in_progress'",
        )
        .bind(token.record_id)
        .bind(token.owner)
        .execute(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(())
    }

    async fn idempotency_state(
        &self,
        api_key_id: i64,
        key: &str,
        now: Timestamp,
    ) -> StoreResult<IdempotencyState> {
        let row: Option<RecordRow> = sqlx::query_as(
            "SELECT id, fingerprint, state, locked_until, response_status, response_body, response_format, expires_at
             FROM idempotency_records WHERE api_key_id = $1 AND idempotency_key = $2",
        )
        .bind(api_key_id)
        .bind(key)
        .fetch_optional(self.reader())
        .await?;
        Ok(match row {
            None => IdempotencyState::Absent,
            Some(r)
                if r.expires_at <= now
                    && (r.state == "completed" || r.locked_until.is_none_or(|t| t <= now)) =>
            {
                IdempotencyState::Absent
            }
            Some(r) if r.state == "completed" => IdempotencyState::Completed {
                response: r.response()?,
                fingerprint: r.fingerprint,
            },
            Some(r) => IdempotencyState::InProgress {
                fingerprint: r.fingerprint,
            },
        })
    }

    async fn purge_idempotency(&self, now: Timestamp, batch: i64) -> StoreResult<u64> {
        let mut tx = self.write().await?;
        let done = sqlx::query(
            // The conditions are repeated outside the sub-query: on PostgreSQL a row that a
            // concurrent request re-claimed after the sub-query read it is re-checked against
            // the outer WHERE only (READ COMMITTED), and must then be kept.
            "DELETE FROM idempotency_records
             WHERE expires_at <= $1 AND (state = 'completed' OR locked_until IS NULL OR locked_until <= $1)
               AND id IN (
                 SELECT id FROM idempotency_records
                 WHERE expires_at <= $1 AND (state = 'completed' OR locked_until IS NULL OR locked_until <= $1)
                 ORDER BY expires_at LIMIT $2)",
        )
        .bind(now)
        .bind(batch)
        .execute(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(done.rows_affected())
    }
}
