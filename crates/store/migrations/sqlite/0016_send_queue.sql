-- Batch sends and the durable send queue. Keep this file in lockstep with
-- migrations/postgres/0016_send_queue.sql.

-- A batch of sends (POST /messages/batch): its items are messages with batch_id set.
CREATE TABLE message_batches (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid         BLOB NOT NULL UNIQUE,
    org_id       INTEGER NOT NULL REFERENCES organizations (id),
    api_key_id   INTEGER REFERENCES api_keys (id),
    total        INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER
) STRICT;
ALTER TABLE messages ADD COLUMN batch_id INTEGER REFERENCES message_batches (id);
CREATE INDEX messages_batch ON messages (batch_id, status) WHERE batch_id IS NOT NULL;

-- Messages recorded `queued` that a worker still has to send (a batch's items, a send that
-- pacing or the provider's throttling put off): one row each, gone once the message is sent or
-- failed. `not_before` is when it may be tried; a claim holds a lease; `in_flight_at` is set,
-- committed, before the provider call, so that a worker taking over an expired lease knows the
-- provider may have the message.
CREATE TABLE send_queue (
    message_id   INTEGER PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    org_id       INTEGER NOT NULL,
    channel_id   INTEGER NOT NULL,
    batch_id     INTEGER REFERENCES message_batches (id),
    not_before   INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_token  BLOB,
    lease_until  INTEGER,
    in_flight_at INTEGER
) STRICT;
CREATE INDEX send_queue_due ON send_queue (not_before, message_id);
CREATE INDEX send_queue_batch ON send_queue (batch_id) WHERE batch_id IS NOT NULL;
