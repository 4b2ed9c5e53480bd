//! A group commit's records written together (`super::group_commit`): the few statements of a
//! whole group of sends instead of several per send.

use std::collections::HashMap;

use sqlx::types::Json;
use uuid::Uuid;

use super::contacts::{contact_by_phone, contacts_by_ids, contacts_by_phones};
use super::conversations::{open_conversations_of, open_or_continue};
use super::messages::status_step;
use super::{Conn, Db};
use crate::messaging::Written;
use crate::{
    ConversationPolicy, MessageRecord, MessageStep, NewOutbound, RecipientRef, RecordedOutbound,
    StoreError, StoreResult,
};
use switchboard_domain::contact::{Contact, Conversation};
use switchboard_domain::message::Direction;

/// One record of a group commit: what to write, and the `traceparent` of its send.
pub(super) struct GroupRecord<'a> {
    pub new: &'a NewOutbound,
    pub trace: Option<&'a str>,
}

/// Whether a record can be written by [`write_outbound_group`]: one that the send queue does
/// not take over (those enqueue a row of their own, one at a time).
pub(super) fn groupable(new: &NewOutbound) -> bool {
    new.queue.is_none()
}

/// Writes a group commit's records as [`write_outbound_in`] writes each (no consent, no contact
/// name), with a few statements for the whole group instead of several per record: one read
/// of the recipients' contacts (per organization for phones), one of their open conversations
/// (per channel) and one multi-row `INSERT` of the messages (the records are built from what
/// it wrote, not read back). Only contacts and conversations that do not exist yet are created
/// one at a time, in the records' order (the group's lock order). Anything unusual fails the
/// whole group (a contact of another organization, a provider message id the channel already
/// has), and the caller then writes its records one per transaction, where each gets its own
/// answer.
pub(super) async fn write_outbound_group(
    conn: &mut Conn,
    records: &[GroupRecord<'_>],
) -> StoreResult<Vec<RecordedOutbound>> {
    // The recipients: existing contacts read together, missing ones created in order.
    let ids: Vec<i64> = records
        .iter()
        .filter_map(|r| match r.new.recipient {
            RecipientRef::Contact(id) => Some(id),
            RecipientRef::Phone(_) => None,
        })
        .collect();
    let by_id: HashMap<i64, Contact> = contacts_by_ids(conn, &ids)
        .await?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    let mut by_phone: HashMap<(i64, String), Contact> = HashMap::new();
    let mut orgs: Vec<i64> = records
        .iter()
        .filter(|r| matches!(r.new.recipient, RecipientRef::Phone(_)))
        .map(|r| r.new.org_id)
        .collect();
    orgs.sort_unstable();
    orgs.dedup();
    for org in orgs {
        let phones: Vec<&str> = records
            .iter()
            .filter(|r| r.new.org_id == org)
            .filter_map(|r| match &r.new.recipient {
                RecipientRef::Phone(p) => Some(p.as_str()),
                RecipientRef::Contact(_) => None,
            })
            .collect();
        for c in contacts_by_phones(conn, org, &phones).await? {
            if let Some(p) = &c.phone {
                by_phone.insert((org, p.as_str().to_owned()), c.clone());
            }
        }
    }
    let mut contacts: Vec<(Contact, bool)> = Vec::with_capacity(records.len());
    for r in records {
        let new = r.new;
        contacts.push(match &new.recipient {
            RecipientRef::Contact(id) => match by_id.get(id) {
                Some(c) if c.org_id == new.org_id => (c.clone(), false),
                _ => return Err(StoreError::NotFound),
            },
            RecipientRef::Phone(phone) => {
                let key = (new.org_id, phone.as_str().to_owned());
                match by_phone.get(&key) {
                    Some(c) => (c.clone(), false),
                    None => {
                        let (c, created) =
                            contact_by_phone(conn, new.org_id, phone, None, new.now).await?;
                        by_phone.insert(key, c.clone());
                        (c, created)
                    }
                }
            }
        });
    }

    // Their open conversations: read together, missing ones opened in order.
    let mut open: HashMap<(i64, i64), Conversation> = HashMap::new();
    let mut channels: Vec<i64> = records.iter().map(|r| r.new.channel.id).collect();
    channels.sort_unstable();
    channels.dedup();
    for channel in channels {
        let mut of: Vec<i64> = records
            .iter()
            .zip(&contacts)
            .filter(|(r, _)| r.new.channel.id == channel)
            .map(|(_, (c, _))| c.id)
            .collect();
        of.sort_unstable();
        of.dedup();
        for c in open_conversations_of(conn, channel, &of).await? {
            open.insert((c.contact_id, c.channel_id), c);
        }
    }
    let mut conversations: Vec<(Option<Conversation>, bool)> = Vec::with_capacity(records.len());
    for (r, (contact, _)) in records.iter().zip(&contacts) {
        let new = r.new;
        let key = (contact.id, new.channel.id);
        conversations.push(match (open.get(&key), new.conversation) {
            (Some(c), _) => (Some(c.clone()), false),
            (None, ConversationPolicy::ContinueIfOpen) => (None, false),
            (None, ConversationPolicy::OpenOrContinue) => {
                let (c, created) =
                    open_or_continue(conn, new.org_id, contact.id, new.channel.id, new.now).await?;
                open.insert(key, c.clone());
                (Some(c), created)
            }
        });
    }

    // The messages: one INSERT (they are built from what it wrote, not read back).
    let mut by_uuid = insert_group_messages(conn, records, &contacts, &conversations).await?;
    let mut recorded = Vec::with_capacity(records.len());
    for ((r, (contact, contact_created)), (conversation, conversation_created)) in
        records.iter().zip(contacts).zip(conversations)
    {
        let message = by_uuid
            .remove(&r.new.uuid)
            .ok_or_else(|| StoreError::Other("a message of the group was not written".into()))?;
        recorded.push(RecordedOutbound {
            message,
            contact,
            contact_created,
            conversation,
            conversation_created,
        });
    }
    Ok(recorded)
}

/// The messages of a group (their contacts and conversations resolved, in the same order): one
/// multi-row `INSERT`; the records, by uuid, are what it wrote.
async fn insert_group_messages(
    conn: &mut Conn,
    records: &[GroupRecord<'_>],
    contacts: &[(Contact, bool)],
    conversations: &[(Option<Conversation>, bool)],
) -> StoreResult<HashMap<Uuid, MessageRecord>> {
    let journeys: Vec<Vec<MessageStep>> = records
        .iter()
        .map(|r| {
            let mut journey = r.new.steps.clone();
            journey.push(status_step(r.new.now, r.new.status, r.new.error.as_ref()));
            journey
        })
        .collect();
    let mut qb = sqlx::QueryBuilder::<Db>::new(
        "INSERT INTO messages (uuid, org_id, channel_id, contact_id, conversation_id, api_key_id, direction,
                               type, status, content, provider_message_id, error, created_at, updated_at, trace,
                               journey, context) ",
    );
    qb.push_values(records.iter().enumerate(), |mut b, (i, r)| {
        let new = r.new;
        b.push_bind(new.uuid)
            .push_bind(new.org_id)
            .push_bind(new.channel.id)
            .push_bind(contacts[i].0.id)
            .push_bind(conversations[i].0.as_ref().map(|c| c.id))
            .push_bind(new.api_key_id)
            .push_bind(Direction::Outbound.as_str())
            .push_bind(new.message_type.as_str())
            .push_bind(new.status.as_str())
            .push_bind(Json(&new.content))
            .push_bind(new.provider_message_id.as_deref())
            .push_bind(new.error.as_ref().map(Json))
            .push_bind(new.now)
            .push_bind(new.now)
            .push_bind(r.trace)
            .push_bind(Json(&journeys[i]))
            .push_bind(new.context.as_ref().map(Json));
    });
    qb.push(
        " ON CONFLICT (provider_message_id, channel_id) WHERE provider_message_id IS NOT NULL DO NOTHING
         RETURNING id, uuid",
    );
    // RETURNING's order is not the VALUES' order on SQLite: the ids are matched by uuid.
    let ids: HashMap<Uuid, i64> = qb
        .build_query_as::<(i64, Uuid)>()
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|(id, uuid)| (uuid, id))
        .collect();
    if ids.len() != records.len() {
        return Err(StoreError::UniqueViolation(Some(
            "messages_provider_id_channel".into(),
        )));
    }
    // Every row was written (no conflict skipped one), and each holds exactly what the INSERT
    // bound: the records are built from it, with no read-back of the rows.
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let id = *ids.get(&r.new.uuid).ok_or_else(|| {
                StoreError::Other("a message of the group was not written".into())
            })?;
            let record = r.new.as_written(Written {
                id,
                provider_message_id: r.new.provider_message_id.clone(),
                contact: &contacts[i].0,
                conversation: conversations[i].0.as_ref(),
                consent_uuid: None,
                trace: r.trace.map(str::to_owned),
            });
            Ok((record.uuid, record))
        })
        .collect()
}
