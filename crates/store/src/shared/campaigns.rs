//! Campaigns, their recipients, and the claims of the campaign worker.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Backend, Conn, dialect};
use crate::legacy::*;
use crate::{EffectsFn, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

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

/// The campaign worker's next recipients: pending, with no lease or an expired one, oldest
/// first. The partial index `campaign_recipients_pending (id) WHERE status = 'pending'`
/// (migration 0052) gives them in order; with the earlier `(lease_until, id)` index SQLite
/// walked the whole table by id, through every recipient already sent, inside the writer's
/// transaction (18 ms a claim at 300 000 sent recipients). Checked by
/// `sqlite::tests::statements_on_growing_tables_use_their_keys`.
pub(super) const PENDING_RECIPIENTS: &str = "SELECT id FROM campaign_recipients
     WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)
     ORDER BY id LIMIT $2";

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

#[async_trait]
impl CampaignStore for Backend {
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
        let ids: Vec<i64> =
            sqlx::query_scalar(&format!("{PENDING_RECIPIENTS}{}", dialect::SKIP_LOCKED))
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
}
