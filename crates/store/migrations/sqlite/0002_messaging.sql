-- Messaging: contacts, conversations, messages and idempotency records. Times are Unix
-- milliseconds (INTEGER); UUIDs are 16-byte BLOBs; JSON is TEXT. Keep this file in lockstep
-- with migrations/postgres/0002_messaging.sql.

CREATE TABLE contacts (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid             BLOB NOT NULL UNIQUE,
    org_id           INTEGER NOT NULL REFERENCES organizations (id),
    phone            TEXT,
    name             TEXT,
    telegram_chat_id TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX contacts_org_phone ON contacts (org_id, phone) WHERE phone IS NOT NULL;
CREATE UNIQUE INDEX contacts_org_telegram ON contacts (org_id, telegram_chat_id) WHERE telegram_chat_id IS NOT NULL;

-- At most one open conversation per contact and channel: the partial unique index decides.
CREATE TABLE conversations (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid            BLOB NOT NULL UNIQUE,
    org_id          INTEGER NOT NULL REFERENCES organizations (id),
    contact_id      INTEGER NOT NULL REFERENCES contacts (id),
    channel_id      INTEGER NOT NULL REFERENCES channels (id),
    status          TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    last_inbound_at INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX conversations_one_open ON conversations (contact_id, channel_id) WHERE status = 'open';
CREATE INDEX conversations_contact_channel ON conversations (contact_id, channel_id, id);

CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                BLOB NOT NULL UNIQUE,
    org_id              INTEGER NOT NULL REFERENCES organizations (id),
    channel_id          INTEGER NOT NULL REFERENCES channels (id),
    contact_id          INTEGER NOT NULL REFERENCES contacts (id),
    conversation_id     INTEGER REFERENCES conversations (id),
    api_key_id          INTEGER REFERENCES api_keys (id),
    direction           TEXT NOT NULL,
    type                TEXT NOT NULL,
    status              TEXT NOT NULL,
    content             TEXT NOT NULL,
    provider_message_id TEXT,
    error               TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;
-- Inbound de-duplication and status updates find messages by the provider's id.
CREATE UNIQUE INDEX messages_channel_provider_id ON messages (channel_id, provider_message_id) WHERE provider_message_id IS NOT NULL;
-- History: newest first, by organization and by every filter.
CREATE INDEX messages_org_time ON messages (org_id, created_at, id);
CREATE INDEX messages_channel_time ON messages (channel_id, created_at, id);
CREATE INDEX messages_contact_time ON messages (contact_id, created_at, id);
CREATE INDEX messages_conversation_time ON messages (conversation_id, created_at, id);
CREATE INDEX messages_org_direction_time ON messages (org_id, direction, created_at, id);
CREATE INDEX messages_org_status_time ON messages (org_id, status, created_at, id);

-- One record per credential and Idempotency-Key.
CREATE TABLE idempotency_records (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    api_key_id      INTEGER NOT NULL REFERENCES api_keys (id),
    idempotency_key TEXT NOT NULL,
    method          TEXT NOT NULL,
    path            TEXT NOT NULL,
    fingerprint     BLOB NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    owner           BLOB,
    locked_until    INTEGER,
    response_status INTEGER,
    response_body   BLOB,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX idempotency_records_key ON idempotency_records (api_key_id, idempotency_key);
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);
