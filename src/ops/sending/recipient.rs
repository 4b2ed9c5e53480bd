//! The recipient of a send.

use uuid::Uuid;

use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::phone::Phone;
use switchboard_store::{RecipientRef, Store};

use super::SendError;

/// The recipient of a send: the organization's contact by UUID (which must agree with `phone`
/// when both are given), or by phone (`None` when the organization has no contact with it).
pub(crate) async fn find_recipient(
    store: &dyn Store,
    org_id: i64,
    contact_uuid: Option<Uuid>,
    phone: Option<&Phone>,
) -> Result<Option<Contact>, SendError> {
    match (contact_uuid, phone) {
        (Some(uuid), phone) => {
            let contact = store.find_contact(org_id, uuid).await?.ok_or_else(|| {
                SendError::Validation(
                    switchboard_domain::FieldError::new(
                        "contact_uuid",
                        "no contact with this UUID exists in the organization",
                    )
                    .into(),
                )
            })?;
            if let Some(p) = phone {
                if contact.phone.as_ref() != Some(p) {
                    return Err(SendError::Validation(
                        switchboard_domain::FieldError::new(
                            "phone",
                            "does not match the phone of the contact given by contact_uuid",
                        )
                        .into(),
                    ));
                }
            }
            Ok(Some(contact))
        }
        (None, Some(phone)) => Ok(store.find_contact_by_phone(org_id, phone).await?),
        (None, None) => Err(SendError::Validation(
            switchboard_domain::FieldError::new(
                "contact_uuid",
                "is required (or give the recipient's phone)",
            )
            .into(),
        )),
    }
}

/// The recipient as the provider sees it: the existing contact, or the one to be created
/// with the message.
pub(crate) fn recipient_contact(
    existing: Option<&Contact>,
    org_id: i64,
    phone: Option<&Phone>,
    name: Option<&str>,
    now: Timestamp,
) -> Contact {
    existing.cloned().unwrap_or_else(|| Contact {
        id: 0,
        uuid: Uuid::nil(),
        org_id,
        phone: phone.cloned(),
        name: name.map(str::to_owned),
        telegram_chat_id: None,
        created_at: now,
        updated_at: now,
    })
}

/// Who a checked send's message is recorded for: the contact found, else the phone given
/// ([`find_recipient`] requires one of them).
pub(crate) fn recipient_ref(existing: Option<&Contact>, phone: Option<&Phone>) -> RecipientRef {
    match (existing, phone) {
        (Some(c), _) => RecipientRef::Contact(c.id),
        (None, Some(p)) => RecipientRef::Phone(p.clone()),
        (None, None) => unreachable!("find_recipient requires one"),
    }
}
