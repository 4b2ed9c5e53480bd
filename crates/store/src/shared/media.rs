//! Media uploads.

use async_trait::async_trait;

use super::Backend;
use crate::StoreResult;
use crate::media::{MediaUpload, MediaUploadStore};
use switchboard_domain::Timestamp;
use switchboard_domain::event::Effects;

#[derive(sqlx::FromRow)]
struct UploadRow {
    channel_id: i64,
    sha256: String,
    media_id: String,
    mime_type: String,
    size: i64,
    uploaded_at: Timestamp,
}

impl From<UploadRow> for MediaUpload {
    fn from(r: UploadRow) -> Self {
        MediaUpload {
            channel_id: r.channel_id,
            sha256: r.sha256,
            media_id: r.media_id,
            mime_type: r.mime_type,
            size: r.size,
            uploaded_at: r.uploaded_at,
        }
    }
}

#[async_trait]
impl MediaUploadStore for Backend {
    async fn find_media_upload(
        &self,
        channel_id: i64,
        sha256: &str,
        uploaded_since: Timestamp,
    ) -> StoreResult<Option<MediaUpload>> {
        let row: Option<UploadRow> = sqlx::query_as(
            "SELECT channel_id, sha256, media_id, mime_type, size, uploaded_at
             FROM media_uploads
             WHERE channel_id = $1 AND sha256 = $2 AND uploaded_at >= $3",
        )
        .bind(channel_id)
        .bind(sha256)
        .bind(uploaded_since)
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(Into::into))
    }

    async fn save_media_upload(&self, upload: &MediaUpload) -> StoreResult<()> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO media_uploads (channel_id, sha256, media_id, mime_type, size, uploaded_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (channel_id, sha256) DO UPDATE SET
                 media_id = excluded.media_id, mime_type = excluded.mime_type,
                 size = excluded.size, uploaded_at = excluded.uploaded_at",
        )
        .bind(upload.channel_id)
        .bind(&upload.sha256)
        .bind(&upload.media_id)
        .bind(&upload.mime_type)
        .bind(upload.size)
        .bind(upload.uploaded_at)
        .execute(&mut *tx)
        .await?;
        tx.commit(Effects::none()).await?;
        Ok(())
    }
}
