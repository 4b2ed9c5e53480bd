//! Contact groups and their memberships.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::contacts::ContactRow;
use super::{Backend, Conn, Db, IN_LIST_CHUNK, push_in_list, push_page};
use crate::legacy::*;
use crate::{EffectsFn, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

const SELECT_GROUPS: &str = "SELECT g.id, g.uuid, g.org_id, g.name, g.created_at, g.updated_at,
        (SELECT COUNT(*) FROM contact_group_members m WHERE m.group_id = g.id) AS member_count
 FROM contact_groups g ";

#[derive(sqlx::FromRow)]
struct GroupRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    name: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    member_count: i64,
}

impl From<GroupRow> for GroupRecord {
    fn from(r: GroupRow) -> Self {
        GroupRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            name: r.name,
            member_count: r.member_count,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

async fn group_tx(conn: &mut Conn, org_id: i64, uuid: Uuid) -> StoreResult<GroupRecord> {
    let row: Option<GroupRow> = sqlx::query_as(&format!(
        "{SELECT_GROUPS} WHERE g.uuid = $1 AND g.org_id = $2"
    ))
    .bind(uuid)
    .bind(org_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(Into::into).ok_or(StoreError::NotFound)
}

#[async_trait]
impl GroupStore for Backend {
    async fn create_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        name: &str,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO contact_groups (uuid, org_id, name, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(uuid)
        .bind(org_id)
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let group = group_tx(&mut tx, org_id, uuid).await?;
        tx.commit(effects(&group)).await?;
        Ok(group)
    }

    async fn find_group(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<GroupRecord>> {
        let row: Option<GroupRow> = sqlx::query_as(&format!(
            "{SELECT_GROUPS} WHERE g.uuid = $1 AND g.org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn list_groups(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<GroupRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_GROUPS);
        qb.push(" WHERE g.org_id = ").push_bind(org_id);
        push_page(&mut qb, "g.created_at", "g.id", page);
        let rows: Vec<GroupRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn rename_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        name: &str,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord> {
        let mut tx = self.write().await?;
        let done = sqlx::query(
            "UPDATE contact_groups SET name = $1, updated_at = $2 WHERE uuid = $3 AND org_id = $4",
        )
        .bind(name)
        .bind(now)
        .bind(uuid)
        .bind(org_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        let group = group_tx(&mut tx, org_id, uuid).await?;
        tx.commit(effects(&group)).await?;
        Ok(group)
    }

    async fn delete_group(
        &self,
        org_id: i64,
        uuid: Uuid,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<GroupRecord> {
        let mut tx = self.write().await?;
        let group = group_tx(&mut tx, org_id, uuid).await?;
        sqlx::query("DELETE FROM contact_group_members WHERE group_id = $1")
            .bind(group.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM contact_groups WHERE id = $1")
            .bind(group.id)
            .execute(&mut *tx)
            .await?;
        tx.commit(effects(&group)).await?;
        Ok(group)
    }

    async fn change_group_members(
        &self,
        org_id: i64,
        uuid: Uuid,
        contacts: &[Uuid],
        add: bool,
        now: Timestamp,
        effects: EffectsFn<'_, GroupRecord>,
    ) -> StoreResult<MembershipOutcome> {
        let mut tx = self.write().await?;
        let group = group_tx(&mut tx, org_id, uuid).await?;
        // One statement per chunk of contacts, not one per contact: a change may name 1 000
        // of them, inside a transaction on the single writer.
        let mut found: HashMap<Uuid, i64> = HashMap::with_capacity(contacts.len());
        for chunk in contacts.chunks(IN_LIST_CHUNK) {
            let mut qb = QueryBuilder::<Db>::new("SELECT uuid, id FROM contacts WHERE org_id = ");
            qb.push_bind(org_id)
                .push(" AND deleted_at IS NULL AND uuid");
            push_in_list(&mut qb, chunk);
            let rows: Vec<(Uuid, i64)> = qb.build_query_as().fetch_all(&mut *tx).await?;
            found.extend(rows);
        }
        let unknown: Vec<Uuid> = contacts
            .iter()
            .filter(|u| !found.contains_key(u))
            .copied()
            .collect();
        if !unknown.is_empty() {
            tx.rollback().await?;
            return Ok(MembershipOutcome::UnknownContacts(unknown));
        }
        let ids: Vec<i64> = contacts.iter().map(|u| found[u]).collect();
        let mut changed = 0i64;
        for chunk in ids.chunks(IN_LIST_CHUNK) {
            let done = if add {
                let mut qb = QueryBuilder::<Db>::new(
                    "INSERT INTO contact_group_members (group_id, contact_id, added_at) ",
                );
                qb.push_values(chunk, |mut row, id| {
                    row.push_bind(group.id).push_bind(*id).push_bind(now);
                });
                qb.push(" ON CONFLICT (group_id, contact_id) DO NOTHING");
                qb.build().execute(&mut *tx).await?
            } else {
                let mut qb =
                    QueryBuilder::<Db>::new("DELETE FROM contact_group_members WHERE group_id = ");
                qb.push_bind(group.id).push(" AND contact_id");
                push_in_list(&mut qb, chunk);
                qb.build().execute(&mut *tx).await?
            };
            changed += done.rows_affected() as i64;
        }
        if changed == 0 {
            tx.commit(Effects::none()).await?;
            return Ok(MembershipOutcome::Changed { group, changed });
        }
        sqlx::query("UPDATE contact_groups SET updated_at = $1 WHERE id = $2")
            .bind(now)
            .bind(group.id)
            .execute(&mut *tx)
            .await?;
        let group = group_tx(&mut tx, org_id, uuid).await?;
        tx.commit(effects(&group)).await?;
        Ok(MembershipOutcome::Changed { group, changed })
    }

    async fn list_group_members(
        &self,
        group_id: i64,
        page: PageQuery,
    ) -> StoreResult<Vec<GroupMember>> {
        #[derive(sqlx::FromRow)]
        struct MemberRow {
            #[sqlx(flatten)]
            contact: ContactRow,
            added_at: Timestamp,
        }
        let mut qb = QueryBuilder::<Db>::new(
            "SELECT c.id, c.uuid, c.org_id, c.phone, c.name, c.telegram_chat_id, c.created_at, c.updated_at,
                    m.added_at
             FROM contact_group_members m JOIN contacts c ON c.id = m.contact_id WHERE m.group_id = ",
        );
        qb.push_bind(group_id);
        push_page(&mut qb, "m.added_at", "c.id", page);
        let rows: Vec<MemberRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows
            .into_iter()
            .map(|r| GroupMember {
                contact: r.contact.into(),
                added_at: r.added_at,
            })
            .collect())
    }
}
