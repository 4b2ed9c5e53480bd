use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::messages::{fetch_message, insert_steps, status_step, write_outbound_in};
use super::{Backend, Conn, dialect};
use crate::queue::{
    BatchRecord, ClaimedSend, ItemEffectsFn, LeaseResult, NewBatch, QueuedOutcome, SendQueueStore,
};
use crate::{EffectsFn, MessageRecord, NewOutbound, RecordedOutbound, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

#[derive(sqlx::FromRow)]
struct BatchRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    total: i64,
    created_at: Timestamp,
    completed_at: Option<Timestamp>,
}

async fn batch_record(conn: &mut Conn, row: BatchRow) -> StoreResult<BatchRecord> {
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, COUNT(*) FROM messages WHERE batch_id = $1 GROUP BY status")
            .bind(row.id)
            .fetch_all(&mut *conn)
            .await?;
    let in_progress: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM send_queue WHERE batch_id = $1 AND lease_token IS NOT NULL",
    )
    .bind(row.id)
    .fetch_one(&mut *conn)
    .await?;
    Ok(BatchRecord {
        id: row.id,
        uuid: row.uuid,
        org_id: row.org_id,
        total: row.total,
        counts: counts.into_iter().collect::<BTreeMap<_, _>>(),
        in_progress,
        created_at: row.created_at,
        completed_at: row.completed_at,
    })
}

/// A one-row update under a lease: done, or the lease was lost.
fn lease_held(rows: u64) -> LeaseResult<()> {
    if rows == 1 {
        LeaseResult::Done(())
    } else {
        LeaseResult::Lost
    }
}

const SELECT_BATCH: &str =
    "SELECT id, uuid, org_id, total, created_at, completed_at FROM message_batches";

/// Whether `token` still holds the lease of the message's queue row (locking the row on
/// PostgreSQL for the rest of the transaction).
async fn holds_lease(conn: &mut Conn, message_id: i64, token: Uuid) -> StoreResult<bool> {
    let held: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT message_id FROM send_queue WHERE message_id = $1 AND lease_token = $2{}",
        dialect::FOR_NO_KEY_UPDATE
    ))
    .bind(message_id)
    .bind(token)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(held.is_some())
}

#[async_trait]
impl SendQueueStore for Backend {
    async fn record_batch(
        &self,
        batch: NewBatch,
        items: Vec<NewOutbound>,
        completion: Option<crate::ClaimToken>,
        item_effects: ItemEffectsFn<'_>,
    ) -> StoreResult<(BatchRecord, Vec<RecordedOutbound>)> {
        let mut tx = self.write().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO message_batches (uuid, org_id, api_key_id, total, created_at)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(batch.uuid)
        .bind(batch.org_id)
        .bind(batch.api_key_id)
        .bind(items.len() as i64)
        .bind(batch.now)
        .fetch_one(&mut *tx)
        .await?;
        let mut effects = Effects::none();
        let mut recorded = Vec::with_capacity(items.len());
        for mut item in items {
            let Some(queue) = item.queue.as_mut() else {
                return Err(StoreError::Other(
                    "a batch item without a queue entry".into(),
                ));
            };
            queue.batch_id = Some(id);
            let r = write_outbound_in(&mut tx, item, None, None).await?;
            let e = item_effects(&r);
            effects.outbox.extend(e.outbox);
            effects.log.extend(e.log);
            recorded.push(r);
        }
        let row: BatchRow = sqlx::query_as(&format!("{SELECT_BATCH} WHERE id = $1"))
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        let record = batch_record(&mut tx, row).await?;
        if let Some(completion) = completion {
            let completion = super::completions::Completion::batch(completion, &record)?;
            super::completions::complete_tx(&mut tx, &completion).await?;
        }
        tx.commit(effects).await?;
        Ok((record, recorded))
    }

    async fn find_batch(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<BatchRecord>> {
        let mut conn = self.reader().acquire().await?;
        let row: Option<BatchRow> =
            sqlx::query_as(&format!("{SELECT_BATCH} WHERE uuid = $1 AND org_id = $2"))
                .bind(uuid)
                .bind(org_id)
                .fetch_optional(&mut *conn)
                .await?;
        match row {
            Some(row) => Ok(Some(batch_record(&mut conn, row).await?)),
            None => Ok(None),
        }
    }

    async fn claim_queued(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: i64,
    ) -> StoreResult<Vec<ClaimedSend>> {
        let mut tx = self.write().await?;
        type Row = (i64, i64, Option<Timestamp>, Option<String>, Option<i64>);
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "SELECT message_id, attempts, in_flight_at, reported_provider_message_id, batch_id
             FROM send_queue
             WHERE not_before <= $1 AND (lease_until IS NULL OR lease_until <= $1)
             ORDER BY not_before, message_id LIMIT $2{}",
            dialect::SKIP_LOCKED
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let until = now.saturating_add(lease);
        let mut claimed = Vec::with_capacity(rows.len());
        for (message_id, attempts, in_flight_at, reported, batch_id) in rows {
            let token = Uuid::new_v4();
            // A row in flight stays so (until its outcome is recorded): a claim that dies
            // before deciding leaves it as unknown as it found it.
            sqlx::query(
                "UPDATE send_queue SET lease_token = $1, lease_until = $2 WHERE message_id = $3",
            )
            .bind(token)
            .bind(until)
            .bind(message_id)
            .execute(&mut *tx)
            .await?;
            claimed.push(ClaimedSend {
                message: fetch_message(&mut tx, message_id).await?,
                token,
                attempts,
                was_in_flight: in_flight_at.is_some(),
                in_flight_at,
                reported_provider_message_id: reported,
                batch_id,
            });
        }
        tx.commit(Effects::none()).await?;
        Ok(claimed)
    }

    async fn defer_queued(
        &self,
        message_id: i64,
        token: Uuid,
        not_before: Timestamp,
        attempted: bool,
    ) -> StoreResult<LeaseResult<()>> {
        let done = sqlx::query(
            "UPDATE send_queue SET not_before = $1, lease_token = NULL, lease_until = NULL,
                    in_flight_at = NULL, reported_provider_message_id = NULL,
                    attempts = attempts + $2
             WHERE message_id = $3 AND lease_token = $4",
        )
        .bind(not_before)
        .bind(i64::from(attempted))
        .bind(message_id)
        .bind(token)
        .execute(self.writer())
        .await?;
        Ok(lease_held(done.rows_affected()))
    }

    async fn await_outcome(
        &self,
        message_id: i64,
        token: Uuid,
        until: Timestamp,
    ) -> StoreResult<LeaseResult<()>> {
        let done = sqlx::query(
            "UPDATE send_queue SET not_before = $1, lease_token = NULL, lease_until = NULL
             WHERE message_id = $2 AND lease_token = $3 AND in_flight_at IS NOT NULL",
        )
        .bind(until)
        .bind(message_id)
        .bind(token)
        .execute(self.writer())
        .await?;
        Ok(lease_held(done.rows_affected()))
    }

    async fn report_provider_id(
        &self,
        channel_id: i64,
        uuid: Uuid,
        provider_message_id: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        // Due at once unless a live lease holds it (its worker records the outcome itself).
        let done = sqlx::query(
            "UPDATE send_queue SET reported_provider_message_id = $1,
                    not_before = CASE WHEN lease_until IS NULL OR lease_until <= $2
                                      THEN $2 ELSE not_before END
             WHERE in_flight_at IS NOT NULL AND reported_provider_message_id IS NULL
               AND message_id = (SELECT id FROM messages WHERE uuid = $3 AND channel_id = $4)",
        )
        .bind(provider_message_id)
        .bind(now)
        .bind(uuid)
        .bind(channel_id)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn mark_in_flight(
        &self,
        message_id: i64,
        token: Uuid,
        now: Timestamp,
    ) -> StoreResult<LeaseResult<()>> {
        let done = sqlx::query(
            "UPDATE send_queue SET in_flight_at = $1 WHERE message_id = $2 AND lease_token = $3",
        )
        .bind(now)
        .bind(message_id)
        .bind(token)
        .execute(self.writer())
        .await?;
        Ok(lease_held(done.rows_affected()))
    }

    async fn finish_queued(
        &self,
        message_id: i64,
        token: Uuid,
        outcome: QueuedOutcome,
        effects: EffectsFn<'_, MessageRecord>,
    ) -> StoreResult<LeaseResult<MessageRecord>> {
        let mut tx = self.write().await?;
        if !holds_lease(&mut tx, message_id, token).await? {
            return Ok(LeaseResult::Lost);
        }
        let batch_id: Option<i64> =
            sqlx::query_scalar("SELECT batch_id FROM send_queue WHERE message_id = $1")
                .bind(message_id)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query("DELETE FROM send_queue WHERE message_id = $1")
            .bind(message_id)
            .execute(&mut *tx)
            .await?;
        let mut provider_message_id = outcome.provider_message_id.clone();
        if let Some(pid) = &provider_message_id {
            // An id this channel already has (see write_outbound): the message is recorded
            // without it rather than lost.
            let taken: Option<i64> = sqlx::query_scalar(
                "SELECT m2.id FROM messages m JOIN messages m2 ON m2.channel_id = m.channel_id
                 WHERE m.id = $1 AND m2.provider_message_id = $2",
            )
            .bind(message_id)
            .bind(pid)
            .fetch_optional(&mut *tx)
            .await?;
            if taken.is_some() {
                provider_message_id = None;
            }
        }
        sqlx::query(
            "UPDATE messages SET status = $1, provider_message_id = $2, error = $3, updated_at = $4
             WHERE id = $5",
        )
        .bind(outcome.status.as_str())
        .bind(provider_message_id)
        .bind(outcome.error.as_ref().map(sqlx::types::Json))
        .bind(outcome.now)
        .bind(message_id)
        .execute(&mut *tx)
        .await?;
        let mut steps = outcome.steps.clone();
        steps.push(status_step(
            outcome.now,
            outcome.status,
            outcome.error.as_ref(),
        ));
        insert_steps(&mut tx, message_id, &steps).await?;
        if let Some(batch_id) = batch_id {
            // Serializes the items' completions of a batch (PostgreSQL), so that exactly one
            // transaction sees the last one.
            let _: i64 = sqlx::query_scalar(&format!(
                "SELECT id FROM message_batches WHERE id = $1{}",
                dialect::FOR_NO_KEY_UPDATE
            ))
            .bind(batch_id)
            .fetch_one(&mut *tx)
            .await?;
            let left: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM send_queue WHERE batch_id = $1")
                    .bind(batch_id)
                    .fetch_one(&mut *tx)
                    .await?;
            if left == 0 {
                sqlx::query(
                    "UPDATE message_batches SET completed_at = $1 WHERE id = $2 AND completed_at IS NULL",
                )
                .bind(outcome.now)
                .bind(batch_id)
                .execute(&mut *tx)
                .await?;
            }
        }
        let message = fetch_message(&mut tx, message_id).await?;
        tx.commit(effects(&message)).await?;
        Ok(LeaseResult::Done(message))
    }

    async fn queued_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM send_queue")
            .fetch_one(self.reader())
            .await?)
    }
}
