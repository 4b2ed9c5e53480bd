use async_trait::async_trait;

use super::{Backend, Db};
use crate::{ApiKeyRecord, EffectsFn, KeyStore, NewApiKey, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::api_key::KeyHash;
use switchboard_domain::event::Effects;
use switchboard_domain::scope::ScopeSet;

macro_rules! select_keys {
    ($rest:literal) => {
        concat!(
            "SELECT id, org_id, name, prefix, key_hash, scopes, legacy, default_channel_id, expires_at, revoked_at,
                    revoked_reason, created_at, last_used_at
             FROM api_keys ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    id: i64,
    org_id: i64,
    name: String,
    prefix: String,
    key_hash: Vec<u8>,
    scopes: Option<String>,
    legacy: bool,
    default_channel_id: Option<i64>,
    expires_at: Option<Timestamp>,
    revoked_at: Option<Timestamp>,
    revoked_reason: Option<String>,
    created_at: Timestamp,
    last_used_at: Option<Timestamp>,
}

impl TryFrom<KeyRow> for ApiKeyRecord {
    type Error = StoreError;
    fn try_from(r: KeyRow) -> Result<Self, StoreError> {
        Ok(ApiKeyRecord {
            id: r.id,
            org_id: r.org_id,
            name: r.name,
            prefix: r.prefix,
            key_hash: KeyHash::from_slice(&r.key_hash)
                .ok_or_else(|| StoreError::Other("malformed key hash".into()))?,
            scopes: r
                .scopes
                .map(|s| {
                    ScopeSet::parse_list(&s)
                        .map_err(|e| StoreError::Other(format!("stored scopes: {e}")))
                })
                .transpose()?,
            legacy: r.legacy,
            default_channel_id: r.default_channel_id,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
            revoked_reason: r.revoked_reason,
            created_at: r.created_at,
            last_used_at: r.last_used_at,
        })
    }
}

async fn fetch_key(
    conn: &mut <Db as sqlx::Database>::Connection,
    id: i64,
) -> StoreResult<ApiKeyRecord> {
    let row: KeyRow = sqlx::query_as(select_keys!("WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

async fn insert_key(
    conn: &mut <Db as sqlx::Database>::Connection,
    new: &NewApiKey,
) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO api_keys (org_id, name, key_hash, prefix, scopes, legacy, default_channel_id, expires_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         RETURNING id",
    )
    .bind(new.org_id)
    .bind(&new.name)
    .bind(new.key_hash.as_bytes())
    .bind(&new.prefix)
    .bind(new.scopes.as_ref().map(ScopeSet::to_storage))
    .bind(new.legacy)
    .bind(new.default_channel_id)
    .bind(new.expires_at)
    .bind(new.created_at)
    .fetch_one(&mut *conn)
    .await?)
}

/// Revokes `id` if it is not revoked yet; `Conflict` if it is.
async fn revoke(
    conn: &mut <Db as sqlx::Database>::Connection,
    id: i64,
    reason: &str,
    replaced_by: Option<i64>,
    now: Timestamp,
) -> StoreResult<()> {
    let done = sqlx::query(
        "UPDATE api_keys SET revoked_at = $1, revoked_reason = $2, replaced_by = $3 WHERE id = $4 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(reason)
    .bind(replaced_by)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        // Either it does not exist (NotFound) or it is revoked already.
        fetch_key(conn, id).await?;
        return Err(StoreError::Conflict(format!(
            "API key {id} is already revoked"
        )));
    }
    Ok(())
}

#[async_trait]
impl KeyStore for Backend {
    async fn create_api_key(
        &self,
        new: NewApiKey,
        effects: EffectsFn<'_, ApiKeyRecord>,
    ) -> StoreResult<ApiKeyRecord> {
        let mut tx = self.write().await?;
        let id = insert_key(&mut tx, &new).await?;
        let key = fetch_key(&mut tx, id).await?;
        super::bump_config_generation(&mut tx).await?;
        tx.commit(effects(&key)).await?;
        Ok(key)
    }

    async fn find_api_key_by_hash(&self, hash: &KeyHash) -> StoreResult<Option<ApiKeyRecord>> {
        let row: Option<KeyRow> = sqlx::query_as(select_keys!("WHERE key_hash = $1"))
            .bind(hash.as_bytes())
            .fetch_optional(self.reader())
            .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn get_api_key(&self, id: i64) -> StoreResult<ApiKeyRecord> {
        let row: KeyRow = sqlx::query_as(select_keys!("WHERE id = $1"))
            .bind(id)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }

    async fn list_api_keys(&self, org_id: i64) -> StoreResult<Vec<ApiKeyRecord>> {
        let rows: Vec<KeyRow> = sqlx::query_as(select_keys!("WHERE org_id = $1 ORDER BY id"))
            .bind(org_id)
            .fetch_all(self.reader())
            .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn revoke_api_key(
        &self,
        id: i64,
        reason: &str,
        now: Timestamp,
        effects: EffectsFn<'_, ApiKeyRecord>,
    ) -> StoreResult<ApiKeyRecord> {
        let mut tx = self.write().await?;
        revoke(&mut tx, id, reason, None, now).await?;
        let key = fetch_key(&mut tx, id).await?;
        super::bump_config_generation(&mut tx).await?;
        tx.commit(effects(&key)).await?;
        Ok(key)
    }

    async fn rotate_api_key(
        &self,
        id: i64,
        new_hash: KeyHash,
        new_prefix: String,
        now: Timestamp,
        effects: EffectsFn<'_, (ApiKeyRecord, ApiKeyRecord)>,
    ) -> StoreResult<(ApiKeyRecord, ApiKeyRecord)> {
        let mut tx = self.write().await?;
        let old = fetch_key(&mut tx, id).await?;
        if old.revoked_at.is_some() {
            return Err(StoreError::Conflict(format!(
                "API key {id} is revoked; a revoked key cannot be rotated"
            )));
        }
        let new_id = insert_key(
            &mut tx,
            &NewApiKey {
                org_id: old.org_id,
                name: old.name.clone(),
                prefix: new_prefix,
                key_hash: new_hash,
                // A rotated pre-scope key keeps acting as a wildcard key, now explicitly.
                scopes: Some(old.effective_scopes()),
                legacy: false,
                default_channel_id: old.default_channel_id,
                expires_at: old.expires_at,
                created_at: now,
            },
        )
        .await?;
        revoke(&mut tx, id, "rotated", Some(new_id), now).await?;
        let pair = (
            fetch_key(&mut tx, id).await?,
            fetch_key(&mut tx, new_id).await?,
        );
        super::bump_config_generation(&mut tx).await?;
        tx.commit(effects(&pair)).await?;
        Ok(pair)
    }

    async fn touch_api_key(&self, id: i64, now: Timestamp) -> StoreResult<()> {
        let mut tx = self.write().await?;
        sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit(Effects::none()).await?;
        Ok(())
    }
}
