//! Conversations: rows, and the open conversation of a contact on a channel.

use async_trait::async_trait;
use uuid::Uuid;

use super::contacts::ContactRow;
use super::{Backend, Conn, Db, push_in_list};
use crate::{ConversationStore, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::{Contact, Conversation, ConversationStatus};

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

#[derive(sqlx::FromRow)]
struct ContactConversationRow {
    #[sqlx(flatten)]
    contact: ContactRow,
    cv_id: Option<i64>,
    cv_uuid: Option<Uuid>,
    cv_org_id: Option<i64>,
    cv_status: Option<String>,
    cv_last_inbound_at: Option<Timestamp>,
    cv_created_at: Option<Timestamp>,
    cv_updated_at: Option<Timestamp>,
    cv_consent_uuid: Option<Uuid>,
}

/// A contact and its open conversation on a channel, if any, read by one statement: a send's
/// recipient in the transaction of its record (one round trip instead of two; the partial
/// unique index keeps one open conversation per contact and channel).
pub(super) async fn contact_with_open_conversation(
    conn: &mut Conn,
    contact_id: i64,
    channel_id: i64,
) -> StoreResult<(Contact, Option<Conversation>)> {
    let row: ContactConversationRow = sqlx::query_as(
        "SELECT ct.id, ct.uuid, ct.org_id, ct.phone, ct.name, ct.telegram_chat_id, ct.created_at,
                ct.updated_at, cv.id AS cv_id, cv.uuid AS cv_uuid, cv.org_id AS cv_org_id,
                cv.status AS cv_status,
                cv.last_inbound_at AS cv_last_inbound_at, cv.created_at AS cv_created_at,
                cv.updated_at AS cv_updated_at, ccs.uuid AS cv_consent_uuid
         FROM contacts ct
         LEFT JOIN conversations cv
                ON cv.contact_id = ct.id AND cv.channel_id = $2 AND cv.status = 'open'
         LEFT JOIN consents ccs ON ccs.id = cv.consent_id
         WHERE ct.id = $1",
    )
    .bind(contact_id)
    .bind(channel_id)
    .fetch_one(&mut *conn)
    .await?;
    let contact = Contact::from(row.contact);
    let conversation = match (
        row.cv_id,
        row.cv_uuid,
        row.cv_org_id,
        row.cv_status,
        row.cv_created_at,
        row.cv_updated_at,
    ) {
        (Some(id), Some(uuid), Some(org_id), Some(status), Some(created_at), Some(updated_at)) => {
            Some(Conversation {
                id,
                uuid,
                org_id,
                contact_id: contact.id,
                contact_uuid: contact.uuid,
                channel_id,
                status: status
                    .parse::<ConversationStatus>()
                    .map_err(StoreError::Other)?,
                last_inbound_at: row.cv_last_inbound_at,
                created_at,
                updated_at,
                consent_uuid: row.cv_consent_uuid,
            })
        }
        _ => None,
    };
    Ok((contact, conversation))
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
    let open = open_conversation_of(conn, contact_id, channel_id).await?;
    continue_or_open(conn, open, org_id, contact_id, channel_id, now).await
}

/// [`open_or_continue`] once the open conversation has been looked up (`open`).
pub(super) async fn continue_or_open(
    conn: &mut Conn,
    open: Option<Conversation>,
    org_id: i64,
    contact_id: i64,
    channel_id: i64,
    now: Timestamp,
) -> StoreResult<(Conversation, bool)> {
    if let Some(c) = open {
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
