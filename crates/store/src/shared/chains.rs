//! Ordered delivery (CONVENTIONS "Ordered delivery"): on a `per_contact` endpoint, the
//! deliveries of one contact form a chain, numbered 1, 2, 3, ... in the order they were written.
//! Only the head of a chain is due; the others are held (`due_at` NULL) and the transaction
//! that ends the head (`delivered`, `failed`, `retries_exhausted`) releases the next. The claim
//! query is therefore the unordered one, unchanged.
//!
//! Every decision takes the chain's row lock first (`delivery_chains`, an upsert or an update
//! that PostgreSQL holds until the transaction ends; SQLite has one writer), so a delivery
//! written while its predecessor ends is either held and then released, or written due: never
//! stuck, never two heads.

use std::sync::LazyLock;

use uuid::Uuid;

use super::webhook_sql as sql;
use super::{Conn, dialect};
use crate::StoreResult;
use switchboard_domain::Timestamp;

/// Takes the chain's lock and the next sequence number (1 for a new chain).
pub(super) async fn next_sequence(
    conn: &mut Conn,
    endpoint_id: i64,
    key: Uuid,
) -> StoreResult<i64> {
    let next: i64 = sqlx::query_scalar(
        "INSERT INTO delivery_chains (endpoint_id, order_key, next_sequence) VALUES ($1, $2, 2)
         ON CONFLICT (endpoint_id, order_key) DO UPDATE SET next_sequence = delivery_chains.next_sequence + 1
         RETURNING next_sequence",
    )
    .bind(endpoint_id)
    .bind(key)
    .fetch_one(&mut *conn)
    .await?;
    Ok(next - 1)
}

/// Makes the earliest held delivery of a chain due (see [`release_next`]).
static RELEASE_NEXT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE webhook_deliveries SET due_at = $1, next_attempt_at = $2, updated_at = $3
         WHERE id = (
             SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
             WHERE d.endpoint_id = $4 AND d.order_key = $5 AND d.status IN {unfinished}
               AND d.due_at IS NULL AND d.lease_token IS NULL
               AND ep.status = {active} AND ep.deleted_at IS NULL
             ORDER BY d.sequence LIMIT 1)
           AND NOT EXISTS (
             SELECT 1 FROM webhook_deliveries a
             WHERE a.endpoint_id = $6 AND a.order_key = $7 AND a.status IN {unfinished}
               AND (a.due_at IS NOT NULL OR a.lease_token IS NOT NULL))",
        unfinished = *sql::UNFINISHED,
        active = *sql::ACTIVE,
    )
});

/// After a delivery of the chain ended: takes the chain's lock and, when no unfinished
/// delivery of the chain is due or in flight and the endpoint is active, makes the earliest
/// held one due now. Returns whether one was released.
pub(super) async fn release_next(
    conn: &mut Conn,
    endpoint_id: i64,
    key: Uuid,
    now: Timestamp,
) -> StoreResult<bool> {
    if !dialect::LOCK_CHAIN.is_empty() {
        sqlx::query(dialect::LOCK_CHAIN)
            .bind(endpoint_id)
            .bind(key)
            .execute(&mut *conn)
            .await?;
    }
    let released = sqlx::query(&RELEASE_NEXT)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(endpoint_id)
        .bind(key)
        .bind(endpoint_id)
        .bind(key)
        .execute(&mut *conn)
        .await?;
    Ok(released.rows_affected() > 0)
}
