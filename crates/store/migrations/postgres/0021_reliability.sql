-- Issue 30 (the same name in migrations/sqlite/).
--
-- A one-row table that /readyz rewrites while writes fail (a full disk): its commit says that
-- the storage takes writes again.
CREATE TABLE storage_probe (
    id        BIGINT PRIMARY KEY,
    payload   BYTEA NOT NULL,
    probed_at TIMESTAMPTZ NOT NULL
);

-- The provider message id a status callback reported for a queued message in flight (its
-- `biz_opaque_callback_data` echoed our message uuid): the send worker that takes the row over
-- after a crash records the message sent with it instead of failing it as unknown.
ALTER TABLE send_queue ADD COLUMN reported_provider_message_id TEXT;
