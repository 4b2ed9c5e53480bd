//! The attempt log (`webhook_attempts`): one row per attempt of a delivery.

use super::Conn;
use crate::StoreResult;
use crate::webhooks::AttemptRecord;

/// Appends an attempt to its delivery's log.
pub(super) async fn insert_attempt(
    conn: &mut Conn,
    delivery_id: i64,
    a: &AttemptRecord,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO webhook_attempts (delivery_id, number, url, started_at, duration_ms, response_status, error_code,
                                       error_message, response_body_excerpt, signed_with)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(delivery_id)
    .bind(a.number)
    .bind(&a.url)
    .bind(a.started_at)
    .bind(a.duration_ms)
    .bind(a.response_status)
    .bind(&a.error_code)
    .bind(&a.error_message)
    .bind(&a.response_body_excerpt)
    .bind(signed_with_text(a))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The `signed_with` column: a JSON array of secret ids, or NULL.
pub(super) fn signed_with_text(a: &AttemptRecord) -> Option<String> {
    a.signed_with
        .as_ref()
        .map(|ids| serde_json::to_string(ids).unwrap_or_default())
}
