//! Contacts: rows, the find-or-create of senders and recipients, searches and changes.

use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{Backend, Conn, Db, IN_LIST_CHUNK, push_in_list, push_page};
use crate::legacy::*;
use crate::{EffectsFn, NewContact, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::phone::Phone;

pub(super) const SELECT_CONTACTS: &str =
    "SELECT id, uuid, org_id, phone, name, telegram_chat_id, created_at, updated_at FROM contacts ";

#[derive(sqlx::FromRow)]
pub(super) struct ContactRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    phone: Option<String>,
    name: Option<String>,
    telegram_chat_id: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<ContactRow> for Contact {
    fn from(r: ContactRow) -> Self {
        Contact {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            phone: r.phone.map(Phone::from_stored),
            name: r.name,
            telegram_chat_id: r.telegram_chat_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

pub(super) async fn fetch_contact(conn: &mut Conn, id: i64) -> StoreResult<Contact> {
    let row: ContactRow = sqlx::query_as(&format!("{SELECT_CONTACTS} WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(row.into())
}

/// The contacts with these ids (one statement; a group commit's recipients).
pub(super) async fn contacts_by_ids(conn: &mut Conn, ids: &[i64]) -> StoreResult<Vec<Contact>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut qb = QueryBuilder::<Db>::new(SELECT_CONTACTS);
    qb.push("WHERE id");
    push_in_list(&mut qb, ids);
    let rows: Vec<ContactRow> = qb.build_query_as().fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// The organization's contacts with these phones (one statement; a group commit's recipients).
pub(super) async fn contacts_by_phones(
    conn: &mut Conn,
    org_id: i64,
    phones: &[&str],
) -> StoreResult<Vec<Contact>> {
    if phones.is_empty() {
        return Ok(Vec::new());
    }
    let mut qb = QueryBuilder::<Db>::new(SELECT_CONTACTS);
    qb.push("WHERE org_id = ")
        .push_bind(org_id)
        .push(" AND phone");
    push_in_list(&mut qb, phones);
    let rows: Vec<ContactRow> = qb.build_query_as().fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

async fn insert_contact(conn: &mut Conn, new: &NewContact) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO contacts (uuid, org_id, phone, name, telegram_chat_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id",
    )
    .bind(new.uuid)
    .bind(new.org_id)
    .bind(new.phone.as_ref().map(Phone::as_str))
    .bind(&new.name)
    .bind(&new.telegram_chat_id)
    .bind(new.now)
    .fetch_one(&mut *conn)
    .await?)
}

/// The organization's contact with this phone, created (with `name`) if there is none.
/// Concurrent callers converge on one row: the unique index decides.
pub(super) async fn contact_by_phone(
    conn: &mut Conn,
    org_id: i64,
    phone: &Phone,
    name: Option<&str>,
    now: Timestamp,
) -> StoreResult<(Contact, bool)> {
    let created: Option<i64> = sqlx::query_scalar(
        "INSERT INTO contacts (uuid, org_id, phone, name, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (org_id, phone) WHERE phone IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(phone.as_str())
    .bind(name)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = created {
        return Ok((fetch_contact(conn, id).await?, true));
    }
    let row: ContactRow = sqlx::query_as(&format!(
        "{SELECT_CONTACTS} WHERE org_id = $1 AND phone = $2"
    ))
    .bind(org_id)
    .bind(phone.as_str())
    .fetch_one(&mut *conn)
    .await?;
    Ok((row.into(), false))
}

/// The organization's contact with this Telegram chat, created if there is none.
pub(super) async fn contact_by_telegram(
    conn: &mut Conn,
    org_id: i64,
    chat_id: &str,
    name: Option<&str>,
    now: Timestamp,
) -> StoreResult<(Contact, bool)> {
    let created: Option<i64> = sqlx::query_scalar(
        "INSERT INTO contacts (uuid, org_id, name, telegram_chat_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (org_id, telegram_chat_id) WHERE telegram_chat_id IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(name)
    .bind(chat_id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = created {
        return Ok((fetch_contact(conn, id).await?, true));
    }
    let row: ContactRow = sqlx::query_as(&format!(
        "{SELECT_CONTACTS} WHERE org_id = $1 AND telegram_chat_id = $2"
    ))
    .bind(org_id)
    .bind(chat_id)
    .fetch_one(&mut *conn)
    .await?;
    Ok((row.into(), false))
}

/// Escapes `%`, `_` and `\` for a LIKE pattern with `ESCAPE '\'`.
fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

async fn live_contact(conn: &mut Conn, org_id: i64, uuid: Uuid) -> StoreResult<Contact> {
    let row: Option<ContactRow> = sqlx::query_as(&format!(
        "{SELECT_CONTACTS} WHERE uuid = $1 AND org_id = $2 AND deleted_at IS NULL"
    ))
    .bind(uuid)
    .bind(org_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(Into::into).ok_or(StoreError::NotFound)
}

#[async_trait]
impl ContactStore for Backend {
    async fn create_contact(
        &self,
        new: NewContact,
        effects: EffectsFn<'_, Contact>,
    ) -> StoreResult<Contact> {
        let mut tx = self.write().await?;
        let id = insert_contact(&mut tx, &new).await?;
        let contact = fetch_contact(&mut tx, id).await?;
        tx.commit(effects(&contact)).await?;
        Ok(contact)
    }

    async fn find_contact(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<Contact>> {
        let row: Option<ContactRow> = sqlx::query_as(&format!(
            "{SELECT_CONTACTS} WHERE uuid = $1 AND org_id = $2 AND deleted_at IS NULL"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn find_contact_by_phone(
        &self,
        org_id: i64,
        phone: &Phone,
    ) -> StoreResult<Option<Contact>> {
        let row: Option<ContactRow> = sqlx::query_as(&format!(
            "{SELECT_CONTACTS} WHERE org_id = $1 AND phone = $2"
        ))
        .bind(org_id)
        .bind(phone.as_str())
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn list_contacts(
        &self,
        org_id: i64,
        query: &ContactQuery,
        page: PageQuery,
    ) -> StoreResult<Vec<Contact>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_CONTACTS);
        qb.push(" WHERE deleted_at IS NULL AND org_id = ")
            .push_bind(org_id);
        if let Some(phone) = &query.phone {
            qb.push(" AND phone = ")
                .push_bind(phone.as_str().to_owned());
        }
        if let Some(name) = &query.name_contains {
            qb.push(" AND LOWER(name) LIKE ")
                .push_bind(format!("%{}%", like_escape(name)))
                .push(" ESCAPE '\\'");
        }
        if let Some(since) = query.since {
            qb.push(" AND created_at >= ").push_bind(since);
        }
        if let Some(until) = query.until {
            qb.push(" AND created_at < ").push_bind(until);
        }
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<ContactRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn update_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        patch: ContactPatch,
        now: Timestamp,
        effects: EffectsFn<'_, ContactChange>,
    ) -> StoreResult<ContactChange> {
        let mut tx = self.write().await?;
        let before = live_contact(&mut tx, org_id, uuid).await?;
        let phone = patch
            .phone
            .as_ref()
            .map(|p| p.as_str().to_owned())
            .or_else(|| before.phone.as_ref().map(|p| p.as_str().to_owned()));
        let name = patch.name.clone().unwrap_or_else(|| before.name.clone());
        sqlx::query("UPDATE contacts SET phone = $1, name = $2, updated_at = $3 WHERE id = $4")
            .bind(phone)
            .bind(name)
            .bind(now)
            .bind(before.id)
            .execute(&mut *tx)
            .await?;
        let after = fetch_contact(&mut tx, before.id).await?;
        let change = ContactChange { before, after };
        tx.commit(effects(&change)).await?;
        Ok(change)
    }

    async fn delete_contact(
        &self,
        org_id: i64,
        uuid: Uuid,
        now: Timestamp,
        effects: EffectsFn<'_, Contact>,
    ) -> StoreResult<Contact> {
        let mut tx = self.write().await?;
        let before = live_contact(&mut tx, org_id, uuid).await?;
        sqlx::query(
            "UPDATE contacts SET phone = NULL, name = NULL, telegram_chat_id = NULL, deleted_at = $1,
                 updated_at = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(before.id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM contact_group_members WHERE contact_id = $1")
            .bind(before.id)
            .execute(&mut *tx)
            .await?;
        tx.commit(effects(&before)).await?;
        Ok(before)
    }

    async fn find_contact_with_deleted(
        &self,
        org_id: i64,
        uuid: Uuid,
    ) -> StoreResult<Option<Contact>> {
        let row: Option<ContactRow> = sqlx::query_as(&format!(
            "{SELECT_CONTACTS} WHERE uuid = $1 AND org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn resolve_contacts(&self, org_id: i64, uuids: &[Uuid]) -> StoreResult<Vec<Contact>> {
        if uuids.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(uuids.len());
        for chunk in uuids.chunks(IN_LIST_CHUNK) {
            let mut qb = QueryBuilder::<Db>::new(SELECT_CONTACTS);
            qb.push(" WHERE deleted_at IS NULL AND org_id = ")
                .push_bind(org_id)
                .push(" AND uuid");
            push_in_list(&mut qb, chunk);
            let rows: Vec<ContactRow> = qb.build_query_as().fetch_all(self.reader()).await?;
            out.extend(rows.into_iter().map(Contact::from));
        }
        Ok(out)
    }
}
