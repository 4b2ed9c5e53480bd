//! Records and the storage interface of contacts: created by messages or through the API,
//! searched, changed and (softly) deleted.

use async_trait::async_trait;
use uuid::Uuid;

use crate::page::PageQuery;
use crate::{EffectsFn, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::phone::Phone;

#[derive(Clone, Debug)]
pub struct NewContact {
    pub org_id: i64,
    pub uuid: Uuid,
    pub phone: Option<Phone>,
    pub name: Option<String>,
    pub telegram_chat_id: Option<String>,
    pub now: Timestamp,
}

/// Contact search: by exact phone (E.164) and/or name substring (case-insensitive).
#[derive(Clone, Debug, Default)]
pub struct ContactQuery {
    pub phone: Option<Phone>,
    /// Lower-cased.
    pub name_contains: Option<String>,
    /// Created at or after.
    pub since: Option<Timestamp>,
    /// Created before.
    pub until: Option<Timestamp>,
}

/// A change to a contact: each field that is `Some` is replaced (`name: Some(None)` clears it).
#[derive(Clone, Debug, Default)]
pub struct ContactPatch {
    pub phone: Option<Phone>,
    pub name: Option<Option<String>>,
}

/// A contact before and after a change.
#[derive(Clone, Debug)]
pub struct ContactChange {
    pub before: Contact,
    pub after: Contact,
}

/// Contacts of an organization.
#[async_trait]
pub trait ContactStore: Send + Sync {
    /// Creates a contact; a phone or Telegram chat the organization already has is
    /// `UniqueViolation`.
    async fn create_contact(
        &self,
        new: NewContact,
        effects: EffectsFn<'_, Contact>,
    ) -> StoreResult<Contact>;
    /// A contact of the organization by UUID.
    async fn find_contact(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<Contact>>;
    /// The organization's contact with this phone.
    async fn find_contact_by_phone(
        &self,
        org_id: i64,
        phone: &Phone,
    ) -> StoreResult<Option<Contact>>;
    /// A page of the organization's live contacts, newest first.
    async fn list_contacts(
        &self,
        org_id: i64,
        query: &ContactQuery,
        page: PageQuery,
    ) -> StoreResult<Vec<Contact>>;
    /// Changes a live contact; a phone another live contact has is `UniqueViolation`.
    async fn update_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        patch: ContactPatch,
        now: Timestamp,
        effects: EffectsFn<'_, ContactChange>,
    ) -> StoreResult<ContactChange>;
    /// Deletes a live contact: the row stays (messages keep referring to it) without its phone,
    /// name and Telegram chat, and leaves its groups. Returns the contact as it was.
    async fn delete_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
        effects: EffectsFn<'_, Contact>,
    ) -> StoreResult<Contact>;
    /// A contact of the organization by UUID, deleted ones included (for filters over history,
    /// whose messages keep referring to deleted contacts).
    async fn find_contact_with_deleted(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<Option<Contact>>;
    /// Live contacts of the organization by UUID (unknown ones are missing from the answer).
    async fn resolve_contacts(&self, org_id: i64, uuids: &[Uuid]) -> StoreResult<Vec<Contact>>;
}
