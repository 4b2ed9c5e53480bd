//! Conversations: rows, and the open conversation of a contact on a channel.

use async_trait::async_trait;
use uuid::Uuid;

use super::{Backend, Conn, Db, push_in_list};
use crate::{ConversationStore, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::{Conversation, ConversationStatus};

macro_rules! select_conversations {
    ($rest:literal) => {
        concat!(
            "SELECT cv.id, cv.uuid, cv.org_id, cv.contact_id, ct.uuid AS contact_uuid, cv.channel_id, cv.status,
                    cv.last_inbound_at, cv.created_at, cv.updated_at, ccs.uuid AS consent_uuid
             FROM conversations cv JOIN contacts ct ON ct.id = cv.contact_id
             LEFT JOIN consents ccs ON ccs.id = cv.consent_id ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct ConversationRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    contact_id: i64,
    contact_uuid: Uuid,
    channel_id: i64,
    status: String,
    last_inbound_at: Option<Timestamp>,
    created_at: Timestamp,
    updated_at: Timestamp,
    consent_uuid: Option<Uuid>,
}

impl TryFrom<ConversationRow> for Conversation {
    type Error = StoreError;
    fn try_from(r: ConversationRow) -> Result<Self, StoreError> {
        Ok(Conversation {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            contact_id: r.contact_id,
            contact_uuid: r.contact_uuid,
            channel_id: r.channel_id,
            status: r
                .status
                .parse::<ConversationStatus>()
                .map_err(StoreError::Other)?,
            last_inbound_at: r.last_inbound_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
            consent_uuid: r.consent_uuid,
        })
    }
}

pub(super) async fn fetch_conversation(conn: &mut Conn, id: i64) -> StoreResult<Conversation> {
    let row: ConversationRow = sqlx::query_as(select_conversations!("WHERE cv.id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

pub(super) async fn open_conversation_of(
    conn: &mut Conn,
    contact_id: i64,
    channel_id: i64,
) -> StoreResult<Option<Conversation>> {
    let row: Option<ConversationRow> = sqlx::query_as(select_conversations!(
        "WHERE cv.contact_id = $1 AND cv.channel_id = $2 AND cv.status = 'open'"
    ))
    .bind(contact_id)
    .bind(channel_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(TryInto::try_into).transpose()
}

/// The open conversations of these contacts on a channel (one statement; a group commit's
/// recipients).
pub(super) async fn open_conversations_of(
    conn: &mut Conn,
    channel_id: i64,
    contact_ids: &[i64],
) -> StoreResult<Vec<Conversation>> {
    if contact_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut qb = sqlx::QueryBuilder::<Db>::new(select_conversations!(
        "WHERE cv.status = 'open' AND cv.channel_id = "
    ));
    qb.push_bind(channel_id).push(" AND cv.contact_id");
    push_in_list(&mut qb, contact_ids);
    let rows: Vec<ConversationRow> = qb.build_query_as().fetch_all(&mut *conn).await?;
    rows.into_iter().map(TryInto::try_into).collect()
}

/// The open conversation of a contact on a channel, opened if there is none. Concurrent
/// callers converge on one row: the partial unique index decides.
pub(super) async fn open_or_continue(
    conn: &mut Conn,
    org_id: i64,
    contact_id: i64,
    channel_id: i64,
    now: Timestamp,
) -> StoreResult<(Conversation, bool)> {
    // Most sends continue a conversation: look first, insert only when there is none.
    if let Some(c) = open_conversation_of(conn, contact_id, channel_id).await? {
        return Ok((c, false));
    }
    let created: Option<i64> = sqlx::query_scalar(
        "INSERT INTO conversations (uuid, org_id, contact_id, channel_id, status, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'open', $5, $5)
         ON CONFLICT (contact_id, channel_id) WHERE status = 'open' DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(contact_id)
    .bind(channel_id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    match created {
        Some(id) => Ok((fetch_conversation(conn, id).await?, true)),
        None => open_conversation_of(conn, contact_id, channel_id)
            .await?
            .map(|c| (c, false))
            .ok_or_else(|| StoreError::Other("the open conversation vanished".into())),
    }
}

#[async_trait]
impl ConversationStore for Backend {
    async fn find_open_conversation(
        &self,
        contact_id: i64,
        channel_id: i64,
    ) -> StoreResult<Option<Conversation>> {
        let row: Option<ConversationRow> = sqlx::query_as(select_conversations!(
            "WHERE cv.contact_id = $1 AND cv.channel_id = $2 AND cv.status = 'open'"
        ))
        .bind(contact_id)
        .bind(channel_id)
        .fetch_optional(self.reader())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn find_conversation(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<Option<Conversation>> {
        let row: Option<ConversationRow> = sqlx::query_as(select_conversations!(
            "WHERE cv.uuid = $1 AND cv.org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        row.map(TryInto::try_into).transpose()
    }
}
