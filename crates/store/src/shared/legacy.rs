use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::messages::{Conn, ContactRow, SELECT_CONTACTS, fetch_contact};
use super::templates::{SELECT_TEMPLATES, TemplateRow};
use super::{Backend, Db, IN_LIST_CHUNK, dialect, push_in_list};
use crate::legacy::*;
use crate::{EffectsFn, StoreError, StoreResult, TemplateRecord};
use switchboard_domain::Timestamp;
use switchboard_domain::contact::Contact;
use switchboard_domain::event::Effects;
use switchboard_domain::template::TemplateStatus;

/// Appends `AND (time < t OR (time = t AND id < i)) ORDER BY time DESC, id DESC LIMIT n`.
fn push_page(qb: &mut QueryBuilder<'_, Db>, time: &str, id: &str, page: PageQuery) {
    if let Some(after) = page.after {
        qb.push(format!(" AND ({time} < "))
            .push_bind(after.time)
            .push(format!(" OR ({time} = "))
            .push_bind(after.time)
            .push(format!(" AND {id} < "))
            .push_bind(after.id)
            .push("))");
    }
    qb.push(format!(" ORDER BY {time} DESC, {id} DESC LIMIT "))
        .push_bind(page.limit);
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

const SELECT_CANNED: &str =
    "SELECT id, uuid, org_id, shortcut, text, created_at, updated_at FROM canned_replies ";

#[derive(sqlx::FromRow)]
struct CannedRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    shortcut: String,
    text: String,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<CannedRow> for CannedReplyRecord {
    fn from(r: CannedRow) -> Self {
        CannedReplyRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            shortcut: r.shortcut,
            text: r.text,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

const SELECT_CAMPAIGNS: &str =
    "SELECT id, uuid, org_id, api_key_id, api_key_prefix, name, channel_id, group_uuid, request,
        status, created_at, updated_at, completed_at FROM campaigns ";

#[derive(sqlx::FromRow)]
struct CampaignRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    api_key_id: i64,
    api_key_prefix: String,
    name: String,
    channel_id: i64,
    group_uuid: Option<Uuid>,
    request: Json<Value>,
    status: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    completed_at: Option<Timestamp>,
}

async fn campaign_by(conn: &mut Conn, id: i64) -> StoreResult<CampaignRecord> {
    let row: CampaignRow = sqlx::query_as(&format!("{SELECT_CAMPAIGNS} WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    with_counts(conn, row).await
}

async fn with_counts(conn: &mut Conn, r: CampaignRow) -> StoreResult<CampaignRecord> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, COUNT(*) FROM campaign_recipients WHERE campaign_id = $1 GROUP BY status",
    )
    .bind(r.id)
    .fetch_all(&mut *conn)
    .await?;
    let mut counts = CampaignCounts::default();
    for (status, n) in rows {
        counts.total += n;
        match RecipientStatus::parse(&status) {
            Some(RecipientStatus::Pending) => counts.pending += n,
            Some(RecipientStatus::Sent) => counts.sent += n,
            Some(RecipientStatus::Refused) => counts.refused += n,
            Some(RecipientStatus::Failed) => counts.failed += n,
            None => return Err(StoreError::Other(format!("bad recipient status {status}"))),
        }
    }
    Ok(CampaignRecord {
        id: r.id,
        uuid: r.uuid,
        org_id: r.org_id,
        api_key_id: r.api_key_id,
        api_key_prefix: r.api_key_prefix,
        name: r.name,
        channel_id: r.channel_id,
        group_uuid: r.group_uuid,
        request: r.request.0,
        status: CampaignStatus::parse(&r.status)
            .ok_or_else(|| StoreError::Other(format!("bad campaign status {}", r.status)))?,
        counts,
        created_at: r.created_at,
        updated_at: r.updated_at,
        completed_at: r.completed_at,
    })
}

const SELECT_RECIPIENTS: &str =
    "SELECT r.id, r.campaign_id, r.contact_id, ct.uuid AS contact_uuid, r.consent, r.status,
        r.attempts, r.message_id, r.error_code, r.error_message, r.updated_at
 FROM campaign_recipients r JOIN contacts ct ON ct.id = r.contact_id ";

#[derive(sqlx::FromRow)]
struct RecipientRow {
    id: i64,
    campaign_id: i64,
    contact_id: i64,
    contact_uuid: Uuid,
    consent: Json<Value>,
    status: String,
    attempts: i64,
    message_id: Option<i64>,
    error_code: Option<String>,
    error_message: Option<String>,
    updated_at: Timestamp,
}

impl TryFrom<RecipientRow> for RecipientRecord {
    type Error = StoreError;
    fn try_from(r: RecipientRow) -> StoreResult<Self> {
        Ok(RecipientRecord {
            id: r.id,
            campaign_id: r.campaign_id,
            contact_id: r.contact_id,
            contact_uuid: r.contact_uuid,
            consent: r.consent.0,
            status: RecipientStatus::parse(&r.status)
                .ok_or_else(|| StoreError::Other(format!("bad recipient status {}", r.status)))?,
            attempts: r.attempts,
            message_id: r.message_id,
            error_code: r.error_code,
            error_message: r.error_message,
            updated_at: r.updated_at,
        })
    }
}

const SELECT_FLOWS: &str =
    "SELECT id, uuid, org_id, name, channel_id, action, active, created_at, updated_at FROM flows ";

#[derive(sqlx::FromRow)]
struct FlowRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    name: String,
    channel_id: i64,
    action: Json<Value>,
    active: bool,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<FlowRow> for FlowRecord {
    fn from(r: FlowRow) -> Self {
        FlowRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            name: r.name,
            channel_id: r.channel_id,
            action: r.action.0,
            active: r.active,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[async_trait]
impl LegacyStore for Backend {
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

    async fn create_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: &str,
        text: &str,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord> {
        let mut tx = self.write().await?;
        let row: CannedRow = sqlx::query_as(
            "INSERT INTO canned_replies (uuid, org_id, shortcut, text, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             RETURNING id, uuid, org_id, shortcut, text, created_at, updated_at",
        )
        .bind(uuid)
        .bind(org_id)
        .bind(shortcut)
        .bind(text)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn list_canned_replies(
        &self,
        org_id: i64,
        page: PageQuery,
    ) -> StoreResult<Vec<CannedReplyRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_CANNED);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<CannedRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn update_canned_reply(
        &self,
        org_id: i64,
        uuid: Uuid,
        shortcut: Option<&str>,
        text: Option<&str>,
        now: Timestamp,
    ) -> StoreResult<CannedReplyRecord> {
        let mut tx = self.write().await?;
        let row: Option<CannedRow> = sqlx::query_as(
            "UPDATE canned_replies SET shortcut = COALESCE($1, shortcut), text = COALESCE($2, text), updated_at = $3
             WHERE uuid = $4 AND org_id = $5
             RETURNING id, uuid, org_id, shortcut, text, created_at, updated_at",
        )
        .bind(shortcut)
        .bind(text)
        .bind(now)
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    async fn delete_canned_reply(&self, org_id: i64, uuid: Uuid) -> StoreResult<()> {
        let mut tx = self.write().await?;
        let done = sqlx::query("DELETE FROM canned_replies WHERE uuid = $1 AND org_id = $2")
            .bind(uuid)
            .bind(org_id)
            .execute(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn list_templates_page(
        &self,
        org_id: i64,
        channel_id: Option<i64>,
        status: Option<TemplateStatus>,
        page: PageQuery,
    ) -> StoreResult<Vec<TemplateRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_TEMPLATES);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        if let Some(c) = channel_id {
            qb.push(" AND channel_id = ").push_bind(c);
        }
        if let Some(s) = status {
            qb.push(" AND status = ").push_bind(s.as_str());
        }
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<TemplateRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn create_campaign(
        &self,
        new: NewCampaign,
        effects: EffectsFn<'_, CampaignRecord>,
    ) -> StoreResult<CampaignRecord> {
        let mut tx = self.write().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO campaigns (uuid, org_id, api_key_id, api_key_prefix, name, channel_id, group_uuid, request,
                                    status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $9) RETURNING id",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(new.api_key_id)
        .bind(&new.api_key_prefix)
        .bind(&new.name)
        .bind(new.channel_id)
        .bind(new.group_uuid)
        .bind(Json(&new.request))
        .bind(new.now)
        .fetch_one(&mut *tx)
        .await?;
        for (contact_id, consent) in &new.recipients {
            sqlx::query(
                "INSERT INTO campaign_recipients (campaign_id, contact_id, consent, status, updated_at)
                 VALUES ($1, $2, $3, 'pending', $4)",
            )
            .bind(id)
            .bind(*contact_id)
            .bind(Json(consent))
            .bind(new.now)
            .execute(&mut *tx)
            .await?;
        }
        let campaign = campaign_by(&mut tx, id).await?;
        tx.commit(effects(&campaign)).await?;
        Ok(campaign)
    }

    async fn find_campaign(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<CampaignRecord>> {
        let mut conn = self.reader().acquire().await?;
        let row: Option<CampaignRow> = sqlx::query_as(&format!(
            "{SELECT_CAMPAIGNS} WHERE uuid = $1 AND org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(&mut *conn)
        .await?;
        match row {
            Some(r) => Ok(Some(with_counts(&mut conn, r).await?)),
            None => Ok(None),
        }
    }

    async fn list_campaign_recipients(
        &self,
        campaign_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<RecipientRecord>> {
        let rows: Vec<RecipientRow> = sqlx::query_as(&format!(
            "{SELECT_RECIPIENTS} WHERE r.campaign_id = $1 ORDER BY r.id LIMIT $2"
        ))
        .bind(campaign_id)
        .bind(limit)
        .fetch_all(self.reader())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn claim_campaign_recipients(
        &self,
        now: Timestamp,
        lease: Duration,
        limit: i64,
    ) -> StoreResult<Vec<ClaimedRecipient>> {
        let mut tx = self.write().await?;
        let ids: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM campaign_recipients
             WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)
             ORDER BY id LIMIT $2{}",
            dialect::SKIP_LOCKED
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let until = now.saturating_add(lease);
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let token = Uuid::new_v4();
            let done = sqlx::query(
                "UPDATE campaign_recipients SET lease_token = $1, lease_until = $2, attempts = attempts + 1
                 WHERE id = $3 AND status = 'pending' AND (lease_until IS NULL OR lease_until <= $4)",
            )
            .bind(token)
            .bind(until)
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                continue;
            }
            let row: RecipientRow = sqlx::query_as(&format!("{SELECT_RECIPIENTS} WHERE r.id = $1"))
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
            let recipient: RecipientRecord = row.try_into()?;
            let campaign = campaign_by(&mut tx, recipient.campaign_id).await?;
            claimed.push(ClaimedRecipient {
                recipient,
                campaign,
                token,
            });
        }
        tx.commit(Effects::none()).await?;
        Ok(claimed)
    }

    async fn finish_campaign_recipient(
        &self,
        recipient_id: i64,
        token: Uuid,
        outcome: RecipientOutcome,
        now: Timestamp,
        effects: EffectsFn<'_, CampaignRecord>,
    ) -> StoreResult<RecipientFinished> {
        let mut tx = self.write().await?;
        let campaign_id: i64 =
            sqlx::query_scalar("SELECT campaign_id FROM campaign_recipients WHERE id = $1")
                .bind(recipient_id)
                .fetch_one(&mut *tx)
                .await?;
        // Serializes the finishing of a campaign's recipients (PostgreSQL), so that exactly one
        // transaction sees the last pending recipient finish.
        let _: i64 = sqlx::query_scalar(&format!(
            "SELECT id FROM campaigns WHERE id = $1{}",
            dialect::FOR_NO_KEY_UPDATE
        ))
        .bind(campaign_id)
        .fetch_one(&mut *tx)
        .await?;
        let done = sqlx::query(
            "UPDATE campaign_recipients SET status = $1, message_id = $2, error_code = $3, error_message = $4,
                 lease_token = NULL, lease_until = NULL, updated_at = $5
             WHERE id = $6 AND lease_token = $7 AND status = 'pending'",
        )
        .bind(outcome.status.as_str())
        .bind(outcome.message_id)
        .bind(&outcome.error_code)
        .bind(&outcome.error_message)
        .bind(now)
        .bind(recipient_id)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Conflict(
                "the recipient's claim is no longer held".into(),
            ));
        }
        let row: RecipientRow = sqlx::query_as(&format!("{SELECT_RECIPIENTS} WHERE r.id = $1"))
            .bind(recipient_id)
            .fetch_one(&mut *tx)
            .await?;
        let recipient: RecipientRecord = row.try_into()?;
        let pending: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM campaign_recipients WHERE campaign_id = $1 AND status = 'pending'",
        )
        .bind(campaign_id)
        .fetch_one(&mut *tx)
        .await?;
        let mut campaign_finished = None;
        if pending == 0 {
            let sent: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM campaign_recipients WHERE campaign_id = $1 AND status = 'sent'",
            )
            .bind(campaign_id)
            .fetch_one(&mut *tx)
            .await?;
            let status = if sent > 0 {
                CampaignStatus::Completed
            } else {
                CampaignStatus::Failed
            };
            let changed = sqlx::query(
                "UPDATE campaigns SET status = $1, completed_at = $2, updated_at = $2
                 WHERE id = $3 AND status = 'running'",
            )
            .bind(status.as_str())
            .bind(now)
            .bind(campaign_id)
            .execute(&mut *tx)
            .await?;
            if changed.rows_affected() == 1 {
                campaign_finished = Some(campaign_by(&mut tx, campaign_id).await?);
            }
        }
        let fx = match &campaign_finished {
            Some(c) => effects(c),
            None => Effects::none(),
        };
        tx.commit(fx).await?;
        Ok(RecipientFinished {
            recipient,
            campaign_finished,
        })
    }

    async fn create_flow(&self, new: NewFlow) -> StoreResult<FlowRecord> {
        let mut tx = self.write().await?;
        let row: FlowRow = sqlx::query_as(
            "INSERT INTO flows (uuid, org_id, name, channel_id, action, active, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
             RETURNING id, uuid, org_id, name, channel_id, action, active, created_at, updated_at",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(&new.name)
        .bind(new.channel_id)
        .bind(Json(&new.action))
        .bind(new.active)
        .bind(new.now)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(row.into())
    }

    async fn find_flow(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<FlowRecord>> {
        let row: Option<FlowRow> =
            sqlx::query_as(&format!("{SELECT_FLOWS} WHERE uuid = $1 AND org_id = $2"))
                .bind(uuid)
                .bind(org_id)
                .fetch_optional(self.reader())
                .await?;
        Ok(row.map(Into::into))
    }

    async fn list_flows(&self, org_id: i64, page: PageQuery) -> StoreResult<Vec<FlowRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_FLOWS);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        push_page(&mut qb, "created_at", "id", page);
        let rows: Vec<FlowRow> = qb.build_query_as().fetch_all(self.reader()).await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}
