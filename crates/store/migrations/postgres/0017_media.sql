-- WhatsApp media uploads. Keep this file in lockstep with migrations/sqlite/0017_media.sql.

-- Which file (by the SHA-256 of its bytes, lowercase hex) a channel's provider already holds,
-- under which media id: a send of the same bytes on the same channel reuses an upload for up
-- to 29 days (WhatsApp keeps one for 30).
CREATE TABLE media_uploads (
    channel_id  BIGINT NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    sha256      TEXT NOT NULL,
    media_id    TEXT NOT NULL,
    mime_type   TEXT NOT NULL,
    size        BIGINT NOT NULL,
    uploaded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (channel_id, sha256)
);
