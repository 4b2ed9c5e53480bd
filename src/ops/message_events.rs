//! The events of messages, contacts and conversations, written in the transaction of the change
//! that causes them (outbox, with the channel identity):
//!
//! * `message.sent`: every outbound message recorded by a send, with its `status` (`sent`, or
//!   `failed` when the provider rejected it);
//! * `message.received`: every new inbound message;
//! * `message.status.update`: every status change of an outbound message, and every edit or
//!   deletion of an inbound message by the customer (`data.change`: `edited` or `deleted`);
//! * `contact.created`, `conversation.created`: when a send or an inbound message creates them;
//! * `contact.created`, `contact.updated`, `contact.deleted`: the contact changes of
//!   `super::contacts`.

use serde_json::{Value, json};

use crate::views::messages::{ContactOut, ConversationOut, MessageOut};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::message::MessageStatus;
use switchboard_store::{BatchChange, MessageRecord, RecordedOutbound};

pub(crate) fn message_data(m: &MessageRecord) -> Value {
    json!({
        "message_id": m.id,
        "message_uuid": m.uuid,
        "contact_uuid": m.contact_uuid,
        "conversation_uuid": m.conversation_uuid,
        "status": m.status,
        "type": m.message_type,
        "direction": m.direction,
        "provider_message_id": m.provider_message_id,
        "error": m.error,
        "message": MessageOut::from(m),
    })
}

/// `contact.created` / `conversation.created` for what `r` created, then `name` for its message
/// (not for a message recorded `queued`: its `message.sent` comes when the send worker sends
/// it, [`sent_effects`]).
pub(crate) fn recorded_effects(r: &RecordedOutbound, name: &str) -> Effects {
    let m = &r.message;
    let channel = Some(m.channel.clone());
    let mut effects = Effects::none();
    if r.contact_created {
        effects = effects.event(NewEvent::new(
            m.org_id,
            "contact.created",
            json!({ "contact_uuid": r.contact.uuid, "contact": ContactOut::from(&r.contact) }),
            channel.clone(),
            m.updated_at,
        ));
    }
    if let (true, Some(c)) = (r.conversation_created, &r.conversation) {
        effects = effects.event(NewEvent::new(
            m.org_id,
            "conversation.created",
            json!({
                "conversation_uuid": c.uuid,
                "contact_uuid": c.contact_uuid,
                "channel_id": c.channel_id,
                "conversation": ConversationOut::from(c),
            }),
            channel.clone(),
            m.updated_at,
        ));
    }
    if m.status == MessageStatus::Queued {
        return effects;
    }
    effects.event(NewEvent::new(
        m.org_id,
        name,
        message_data(m),
        channel,
        m.updated_at,
    ))
}

/// `message.sent` for a queued message the send worker sent (or that failed).
pub(crate) fn sent_effects(m: &MessageRecord) -> Effects {
    Effects::none().event(NewEvent::new(
        m.org_id,
        "message.sent",
        message_data(m),
        Some(m.channel.clone()),
        m.updated_at,
    ))
}

/// `name` (`contact.created`, `contact.updated`, `contact.deleted`) for a contact.
pub(crate) fn contact_event(name: &str, c: &Contact, at: Timestamp) -> NewEvent {
    NewEvent::new(
        c.org_id,
        name,
        json!({ "contact_uuid": c.uuid, "contact": ContactOut::from(c) }),
        None,
        at,
    )
}

pub(crate) fn batch_effects(change: BatchChange<'_>) -> Effects {
    match change {
        BatchChange::Inbound(r) => recorded_effects(r, "message.received"),
        BatchChange::Changed { message, change } => {
            let mut data = message_data(message);
            data["previous_status"] = json!(message.status);
            data["change"] = json!(change);
            Effects::none().event(NewEvent::new(
                message.org_id,
                "message.status.update",
                data,
                Some(message.channel.clone()),
                message.updated_at,
            ))
        }
        BatchChange::Status { message, previous } => {
            let mut data = message_data(message);
            data["previous_status"] = json!(previous);
            Effects::none().event(NewEvent::new(
                message.org_id,
                "message.status.update",
                data,
                Some(message.channel.clone()),
                message.updated_at,
            ))
        }
    }
}
