//! Contacts: created, changed and deleted by the legacy `/api/contacts` routes and `admin contact
//! create`, each with its event (`contact.created`, `contact.updated`, `contact.deleted`) in the
//! transaction of the change. Sends and inbound messages create contacts too (`sending`,
//! `receiving`).

use uuid::Uuid;

use switchboard_domain::clock::Clock;
use switchboard_domain::contact::{Contact, validate_contact_name};
use switchboard_domain::event::Effects;
use switchboard_domain::phone::Phone;
use switchboard_store::legacy::ContactPatch;
use switchboard_store::{NewContact, Store, StoreError};

use super::message_events::contact_event;
use super::{OpError, OpResult};

/// Creates a contact of the organization with `phone` (normalized) and `name` (checked).
/// `UniqueViolation`: another live contact has the phone.
pub async fn add_contact(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    phone: Phone,
    name: Option<String>,
) -> Result<Contact, StoreError> {
    let now = clock.now();
    store
        .create_contact(
            NewContact {
                org_id,
                uuid: Uuid::now_v7(),
                phone: Some(phone),
                name,
                telegram_chat_id: None,
                now,
            },
            Box::new(move |c| Effects::none().event(contact_event("contact.created", c, now))),
        )
        .await
}

/// Changes a live contact's phone or name. `NotFound`: no such live contact in the
/// organization; `UniqueViolation`: another live contact has the phone.
pub async fn update_contact(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    uuid: Uuid,
    patch: ContactPatch,
) -> Result<Contact, StoreError> {
    let now = clock.now();
    let change = store
        .update_contact(
            org_id,
            uuid,
            patch,
            now,
            Box::new(move |c| {
                Effects::none().event(contact_event("contact.updated", &c.after, now))
            }),
        )
        .await?;
    Ok(change.after)
}

/// Deletes a live contact (soft: messages keep referring to it; it leaves its groups).
/// `NotFound`: no such live contact in the organization.
pub async fn delete_contact(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    uuid: Uuid,
) -> Result<Contact, StoreError> {
    let now = clock.now();
    store
        .delete_contact(
            org_id,
            uuid,
            now,
            Box::new(move |c| Effects::none().event(contact_event("contact.deleted", c, now))),
        )
        .await
}

/// `admin contact create`.
pub async fn create_contact(
    store: &dyn Store,
    clock: &dyn Clock,
    org_id: i64,
    phone: &str,
    name: Option<&str>,
) -> OpResult<Contact> {
    let phone = Phone::parse(phone).map_err(|e| OpError::invalid_field("phone", e.to_string()))?;
    let name = name
        .map(|n| validate_contact_name(n).map_err(|e| OpError::invalid_field("name", e)))
        .transpose()?;
    super::orgs::require_org(store, org_id).await?;
    add_contact(store, clock, org_id, phone.clone(), name)
        .await
        .map_err(|e| match e {
            StoreError::UniqueViolation(_) => OpError::conflict_field(
                "phone",
                format!("organization {org_id} already has a contact with {phone}"),
            ),
            StoreError::ForeignKeyViolation => {
                OpError::not_found(format!("organization {org_id} does not exist"))
            }
            other => other.into(),
        })
}
