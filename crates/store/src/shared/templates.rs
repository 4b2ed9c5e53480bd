use async_trait::async_trait;
use serde_json::Value;
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Backend, Conn, Db, push_page};
use crate::page::PageQuery;
use crate::{
    ConsentRecord, EffectsFn, NewConsent, NewOutbound, NewTemplate, ProviderTemplateStatus,
    RecordedOutbound, StoreError, StoreResult, TemplateChange, TemplatePatch, TemplateRecord,
    TemplateStore,
};
use switchboard_domain::Timestamp;
use switchboard_domain::template::{
    ConsentPurpose, ConsentSource, TemplateCategory, TemplateStatus,
};

pub(super) const SELECT_TEMPLATES: &str =
    "SELECT id, uuid, org_id, channel_id, name, language, category, status, active, components,
        body_parameters, provider_template_id, created_at, updated_at
 FROM templates ";

const SELECT_CONSENTS: &str = "SELECT id, uuid, org_id, contact_id, channel_id, template_id, api_key_id, context, purpose, source,
        reference, captured_at, recorded_at
 FROM consents ";

#[derive(sqlx::FromRow)]
pub(super) struct TemplateRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    channel_id: i64,
    name: String,
    language: String,
    category: String,
    status: String,
    active: bool,
    components: Json<Value>,
    body_parameters: Option<i64>,
    provider_template_id: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl TryFrom<TemplateRow> for TemplateRecord {
    type Error = StoreError;
    fn try_from(r: TemplateRow) -> Result<Self, StoreError> {
        Ok(TemplateRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            channel_id: r.channel_id,
            name: r.name,
            language: r.language,
            category: r
                .category
                .parse::<TemplateCategory>()
                .map_err(StoreError::Other)?,
            status: r
                .status
                .parse::<TemplateStatus>()
                .map_err(StoreError::Other)?,
            active: r.active,
            components: r.components.0,
            body_parameters: r.body_parameters,
            provider_template_id: r.provider_template_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct ConsentRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    contact_id: i64,
    channel_id: i64,
    template_id: i64,
    api_key_id: Option<i64>,
    context: String,
    purpose: String,
    source: String,
    reference: String,
    captured_at: Timestamp,
    recorded_at: Timestamp,
}

impl TryFrom<ConsentRow> for ConsentRecord {
    type Error = StoreError;
    fn try_from(r: ConsentRow) -> Result<Self, StoreError> {
        Ok(ConsentRecord {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            contact_id: r.contact_id,
            channel_id: r.channel_id,
            template_id: r.template_id,
            api_key_id: r.api_key_id,
            context: r.context,
            purpose: r
                .purpose
                .parse::<ConsentPurpose>()
                .map_err(StoreError::Other)?,
            source: r
                .source
                .parse::<ConsentSource>()
                .map_err(StoreError::Other)?,
            reference: r.reference,
            captured_at: r.captured_at,
            recorded_at: r.recorded_at,
        })
    }
}

async fn fetch_template(conn: &mut Conn, id: i64) -> StoreResult<TemplateRecord> {
    let row: TemplateRow = sqlx::query_as(&format!("{SELECT_TEMPLATES} WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

/// Takes the row lock of the template matched by `condition` (a no-op update: PostgreSQL locks
/// the row until the transaction ends; SQLite's writer is exclusive anyway) and returns its id.
async fn lock_template_by_uuid(conn: &mut Conn, uuid: Uuid) -> StoreResult<Option<i64>> {
    Ok(sqlx::query_scalar(
        "UPDATE templates SET updated_at = updated_at WHERE uuid = $1 RETURNING id",
    )
    .bind(uuid)
    .fetch_optional(&mut *conn)
    .await?)
}

/// Writes every changeable field of a template.
async fn write_template(conn: &mut Conn, t: &TemplateRecord) -> StoreResult<()> {
    sqlx::query(
        "UPDATE templates SET category = $1, status = $2, active = $3, components = $4,
                body_parameters = $5, provider_template_id = $6, updated_at = $7
         WHERE id = $8",
    )
    .bind(t.category.as_str())
    .bind(t.status.as_str())
    .bind(t.active)
    .bind(Json(&t.components))
    .bind(t.body_parameters)
    .bind(&t.provider_template_id)
    .bind(t.updated_at)
    .bind(t.id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Stores the consent evidence of an outbound message to `contact_id` (append-only).
pub(super) async fn insert_consent(
    conn: &mut Conn,
    new: &NewOutbound,
    contact_id: i64,
    consent: &NewConsent,
) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO consents (uuid, org_id, contact_id, channel_id, template_id, api_key_id, context,
                               purpose, source, reference, captured_at, recorded_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
    )
    .bind(consent.uuid)
    .bind(new.org_id)
    .bind(contact_id)
    .bind(new.channel.id)
    .bind(consent.template_id)
    .bind(consent.api_key_id)
    .bind(consent.context.as_str())
    .bind(consent.purpose.as_str())
    .bind(consent.source.as_str())
    .bind(&consent.reference)
    .bind(consent.captured_at)
    .bind(new.now)
    .fetch_one(&mut *conn)
    .await?)
}

#[async_trait]
impl TemplateStore for Backend {
    async fn list_templates_page(
        &self,
        org_id: i64,
        channel_id: Option<i64>,
        status: Option<TemplateStatus>,
        name: Option<&str>,
        page: PageQuery,
    ) -> StoreResult<Vec<TemplateRecord>> {
        let mut qb = QueryBuilder::<Db>::new(SELECT_TEMPLATES);
        qb.push(" WHERE org_id = ").push_bind(org_id);
        if let Some(n) = name {
            qb.push(" AND name = ").push_bind(n.to_owned());
        }
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

    async fn create_template(
        &self,
        new: NewTemplate,
        effects: EffectsFn<'_, TemplateRecord>,
    ) -> StoreResult<TemplateRecord> {
        let mut tx = self.write().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO templates (uuid, org_id, channel_id, name, language, category, status, active,
                                    components, body_parameters, provider_template_id, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) RETURNING id",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(new.channel_id)
        .bind(&new.name)
        .bind(&new.language)
        .bind(new.category.as_str())
        .bind(new.status.as_str())
        .bind(new.active)
        .bind(Json(&new.components))
        .bind(new.body_parameters)
        .bind(&new.provider_template_id)
        .bind(new.now)
        .fetch_one(&mut *tx)
        .await?;
        let template = fetch_template(&mut tx, id).await?;
        tx.commit(effects(&template)).await?;
        Ok(template)
    }

    async fn update_template(
        &self,
        uuid: Uuid,
        patch: TemplatePatch,
        now: Timestamp,
        effects: EffectsFn<'_, TemplateChange>,
    ) -> StoreResult<TemplateChange> {
        let mut tx = self.write().await?;
        let id = lock_template_by_uuid(&mut tx, uuid)
            .await?
            .ok_or(StoreError::NotFound)?;
        let before = fetch_template(&mut tx, id).await?;
        let mut after = before.clone();
        if let Some(c) = patch.category {
            after.category = c;
        }
        if let Some(s) = patch.status {
            after.status = s;
        }
        if let Some(a) = patch.active {
            after.active = a;
        }
        if let Some((components, body)) = patch.components {
            after.components = components;
            after.body_parameters = body;
        }
        if let Some(p) = patch.provider_template_id {
            after.provider_template_id = Some(p);
        }
        after.updated_at = now;
        write_template(&mut tx, &after).await?;
        let after = fetch_template(&mut tx, id).await?;
        let change = TemplateChange { before, after };
        tx.commit(effects(&change)).await?;
        Ok(change)
    }

    async fn get_template(&self, uuid: Uuid) -> StoreResult<TemplateRecord> {
        let row: TemplateRow = sqlx::query_as(&format!("{SELECT_TEMPLATES} WHERE uuid = $1"))
            .bind(uuid)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }

    async fn find_template(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<TemplateRecord>> {
        let row: Option<TemplateRow> = sqlx::query_as(&format!(
            "{SELECT_TEMPLATES} WHERE uuid = $1 AND org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn list_channel_templates(&self, channel_id: i64) -> StoreResult<Vec<TemplateRecord>> {
        let rows: Vec<TemplateRow> = sqlx::query_as(&format!(
            "{SELECT_TEMPLATES} WHERE channel_id = $1 ORDER BY id"
        ))
        .bind(channel_id)
        .fetch_all(self.reader())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn list_org_templates(&self, org_id: i64) -> StoreResult<Vec<TemplateRecord>> {
        let rows: Vec<TemplateRow> =
            sqlx::query_as(&format!("{SELECT_TEMPLATES} WHERE org_id = $1 ORDER BY id"))
                .bind(org_id)
                .fetch_all(self.reader())
                .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn apply_template_status(
        &self,
        channel_id: i64,
        update: ProviderTemplateStatus,
        now: Timestamp,
        effects: EffectsFn<'_, TemplateChange>,
    ) -> StoreResult<Option<TemplateChange>> {
        let mut tx = self.write().await?;
        let mut id: Option<i64> = None;
        if let Some(pid) = &update.provider_template_id {
            id = sqlx::query_scalar(
                "UPDATE templates SET updated_at = updated_at
                 WHERE channel_id = $1 AND provider_template_id = $2 RETURNING id",
            )
            .bind(channel_id)
            .bind(pid)
            .fetch_optional(&mut *tx)
            .await?;
        }
        if let (None, Some(name), Some(language)) = (id, &update.name, &update.language) {
            id = sqlx::query_scalar(
                "UPDATE templates SET updated_at = updated_at
                 WHERE channel_id = $1 AND name = $2 AND language = $3 RETURNING id",
            )
            .bind(channel_id)
            .bind(name)
            .bind(language)
            .fetch_optional(&mut *tx)
            .await?;
        }
        let Some(id) = id else {
            return Ok(None);
        };
        let before = fetch_template(&mut tx, id).await?;
        let mut after = before.clone();
        after.status = update.status;
        if let Some(pid) = update.provider_template_id {
            after.provider_template_id = Some(pid);
        }
        if after.status == before.status
            && after.provider_template_id == before.provider_template_id
        {
            return Ok(None);
        }
        after.updated_at = now;
        write_template(&mut tx, &after).await?;
        let change = TemplateChange {
            before,
            after: fetch_template(&mut tx, id).await?,
        };
        tx.commit(effects(&change)).await?;
        Ok(Some(change))
    }

    async fn record_consented_outbound(
        &self,
        new: NewOutbound,
        contact_name: Option<String>,
        consent: NewConsent,
        completion: Option<crate::ClaimCompletion>,
        effects: EffectsFn<'_, RecordedOutbound>,
    ) -> StoreResult<RecordedOutbound> {
        self.write_outbound(new, contact_name, Some(consent), completion, effects)
            .await
    }

    async fn find_consent(&self, org_id: i64, uuid: Uuid) -> StoreResult<Option<ConsentRecord>> {
        let row: Option<ConsentRow> = sqlx::query_as(&format!(
            "{SELECT_CONSENTS} WHERE uuid = $1 AND org_id = $2"
        ))
        .bind(uuid)
        .bind(org_id)
        .fetch_optional(self.reader())
        .await?;
        row.map(TryInto::try_into).transpose()
    }
}
