//! Contacts (`admin contact create`).

use serde_json::json;
use uuid::Uuid;

use crate::views::messages::ContactOut;
use switchboard_domain::clock::Clock;
use switchboard_domain::contact::{Contact, validate_contact_name};
use switchboard_domain::event::{Effects, NewEvent};
use switchboard_domain::phone::Phone;
use switchboard_store::{NewContact, Store, StoreError};

use super::{OpError, OpResult};

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
    let now = clock.now();
    store
        .create_contact(
            NewContact {
                org_id,
                uuid: Uuid::now_v7(),
                phone: Some(phone.clone()),
                name,
                telegram_chat_id: None,
                now,
            },
            Box::new(move |c| {
                Effects::none().event(NewEvent::new(
                    c.org_id,
                    "contact.created",
                    json!({ "contact_uuid": c.uuid, "contact": ContactOut::from(c) }),
                    None,
                    now,
                ))
            }),
        )
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
