//! Records and the storage interface of media uploads: which file (by the SHA-256 of its
//! bytes) a channel's provider already holds, under which media id (WhatsApp Cloud keeps an
//! upload for 30 days; the service reuses one for 29).

use async_trait::async_trait;

use crate::StoreResult;
use switchboard_domain::Timestamp;

/// An upload of a file to a channel's provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaUpload {
    pub channel_id: i64,
    /// SHA-256 of the file's bytes, lowercase hex.
    pub sha256: String,
    /// The provider's media id.
    pub media_id: String,
    /// The MIME type it was uploaded as.
    pub mime_type: String,
    /// Its size in bytes.
    pub size: i64,
    pub uploaded_at: Timestamp,
}

/// Media uploads, one per channel and file.
#[async_trait]
pub trait MediaUploadStore: Send + Sync {
    /// The channel's upload of the file with this hash, if it was made at `uploaded_since` or
    /// later (older ones may be gone at the provider).
    async fn find_media_upload(
        &self,
        channel_id: i64,
        sha256: &str,
        uploaded_since: Timestamp,
    ) -> StoreResult<Option<MediaUpload>>;

    /// Records an upload, replacing an older one of the same file on the channel.
    async fn save_media_upload(&self, upload: &MediaUpload) -> StoreResult<()>;
}
