//! The send queue's rows as a message recorded `queued` enters it: below both the message
//! records (`messages`, which enqueue) and the queue's worker side (`queue`, which reads
//! messages back), so that neither imports the other both ways.

use super::Conn;
use crate::queue::QueueEntry;
use crate::{NewOutbound, StoreResult};

/// Inserts the queue row of a message just written `queued`.
pub(super) async fn enqueue(
    conn: &mut Conn,
    message_id: i64,
    new: &NewOutbound,
    queue: &QueueEntry,
) -> StoreResult<()> {
    if let Some(batch_id) = queue.batch_id {
        sqlx::query("UPDATE messages SET batch_id = $1 WHERE id = $2")
            .bind(batch_id)
            .bind(message_id)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query(
        "INSERT INTO send_queue (message_id, org_id, channel_id, batch_id, not_before)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(message_id)
    .bind(new.org_id)
    .bind(new.channel.id)
    .bind(queue.batch_id)
    .bind(queue.not_before)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
