use async_trait::async_trait;
use uuid::Uuid;

use super::{Backend, Db};
use crate::{ChannelPatch, ChannelStore, EffectsFn, NewChannel, StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::channel::{Channel, ChannelStatus, ChannelType, normalize_name, slugify};

macro_rules! select_channels {
    ($($rest:literal)?) => {
        concat!(
            "SELECT id, uuid, org_id, slug, type, name, identifier, status, is_default, created_at, updated_at FROM channels ",
            $($rest)?
        )
    };
}

#[derive(sqlx::FromRow)]
struct ChannelRow {
    id: i64,
    uuid: Uuid,
    org_id: i64,
    slug: String,
    #[sqlx(rename = "type")]
    channel_type: String,
    name: String,
    identifier: String,
    status: String,
    is_default: bool,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl TryFrom<ChannelRow> for Channel {
    type Error = StoreError;
    fn try_from(r: ChannelRow) -> Result<Self, StoreError> {
        Ok(Channel {
            id: r.id,
            uuid: r.uuid,
            org_id: r.org_id,
            slug: r.slug,
            channel_type: r
                .channel_type
                .parse::<ChannelType>()
                .map_err(StoreError::Other)?,
            name: r.name,
            identifier: r.identifier,
            status: r
                .status
                .parse::<ChannelStatus>()
                .map_err(StoreError::Other)?,
            is_default: r.is_default,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

async fn fetch_channel(
    conn: &mut <Db as sqlx::Database>::Connection,
    id: i64,
) -> StoreResult<Channel> {
    let row: ChannelRow = sqlx::query_as(select_channels!("WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    row.try_into()
}

/// A slug derived from the name that no channel of the organization uses yet.
async fn free_slug(
    conn: &mut <Db as sqlx::Database>::Connection,
    org_id: i64,
    name: &str,
) -> StoreResult<String> {
    let base = slugify(name);
    let taken: Vec<String> =
        sqlx::query_scalar("SELECT slug FROM channels WHERE org_id = $1 AND slug LIKE $2")
            .bind(org_id)
            .bind(format!("{base}%"))
            .fetch_all(&mut *conn)
            .await?;
    if !taken.contains(&base) {
        return Ok(base);
    }
    Ok((2..)
        .map(|n| format!("{base}-{n}"))
        .find(|s| !taken.contains(s))
        .expect("an unbounded range always has a free suffix"))
}

async fn clear_default(
    conn: &mut <Db as sqlx::Database>::Connection,
    org_id: i64,
    now: Timestamp,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE channels SET is_default = $1, updated_at = $2 WHERE org_id = $3 AND is_default",
    )
    .bind(false)
    .bind(now)
    .bind(org_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[async_trait]
impl ChannelStore for Backend {
    async fn create_channel(
        &self,
        new: NewChannel,
        effects: EffectsFn<'_, Channel>,
    ) -> StoreResult<Channel> {
        let mut tx = self.write_org(new.org_id).await?;
        let slug = match new.slug {
            Some(s) => s,
            None => free_slug(&mut tx, new.org_id, &new.name).await?,
        };
        if new.is_default {
            clear_default(&mut tx, new.org_id, new.now).await?;
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO channels (uuid, org_id, slug, type, name, name_normalized, identifier, status,
                                   is_default, provider_config, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
             RETURNING id",
        )
        .bind(new.uuid)
        .bind(new.org_id)
        .bind(&slug)
        .bind(new.channel_type.as_str())
        .bind(&new.name)
        .bind(normalize_name(&new.name))
        .bind(&new.identifier)
        .bind(new.status.as_str())
        .bind(new.is_default)
        .bind(&new.provider_config)
        .bind(new.now)
        .fetch_one(&mut *tx)
        .await?;
        let channel = fetch_channel(&mut tx, id).await?;
        super::bump_config_generation(&mut tx).await?;
        tx.commit(effects(&channel)).await?;
        Ok(channel)
    }

    async fn update_channel(
        &self,
        id: i64,
        patch: ChannelPatch,
        now: Timestamp,
        effects: EffectsFn<'_, Channel>,
    ) -> StoreResult<Channel> {
        let mut tx = self.write().await?;
        let current = fetch_channel(&mut tx, id).await?;
        tx.lock_org(current.org_id).await?;
        if patch.make_default && !current.is_default {
            clear_default(&mut tx, current.org_id, now).await?;
        }
        let name = patch.name.unwrap_or(current.name);
        sqlx::query(
            "UPDATE channels SET name = $1, name_normalized = $2, slug = $3, identifier = $4, status = $5,
                    is_default = $6, provider_config = COALESCE($7, provider_config), updated_at = $8
             WHERE id = $9",
        )
        .bind(&name)
        .bind(normalize_name(&name))
        .bind(patch.slug.unwrap_or(current.slug))
        .bind(patch.identifier.unwrap_or(current.identifier))
        .bind(patch.status.unwrap_or(current.status).as_str())
        .bind(current.is_default || patch.make_default)
        .bind(&patch.provider_config)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let channel = fetch_channel(&mut tx, id).await?;
        super::bump_config_generation(&mut tx).await?;
        tx.commit(effects(&channel)).await?;
        Ok(channel)
    }

    async fn get_channel(&self, id: i64) -> StoreResult<Channel> {
        let row: ChannelRow = sqlx::query_as(select_channels!("WHERE id = $1"))
            .bind(id)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }

    async fn get_channel_by_uuid(&self, uuid: Uuid) -> StoreResult<Channel> {
        let row: ChannelRow = sqlx::query_as(select_channels!("WHERE uuid = $1"))
            .bind(uuid)
            .fetch_one(self.reader())
            .await?;
        row.try_into()
    }

    async fn list_channels(&self, org_id: i64) -> StoreResult<Vec<Channel>> {
        let rows: Vec<ChannelRow> =
            sqlx::query_as(select_channels!("WHERE org_id = $1 ORDER BY id"))
                .bind(org_id)
                .fetch_all(self.reader())
                .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn get_channel_provider_config(&self, id: i64) -> StoreResult<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("SELECT provider_config FROM channels WHERE id = $1")
                .bind(id)
                .fetch_one(self.reader())
                .await?,
        )
    }
}
