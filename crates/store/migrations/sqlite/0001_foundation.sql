-- Foundation: settings, organizations, channels, API keys, the event outbox and the
-- organization event log. Times are Unix milliseconds (INTEGER); UUIDs are 16-byte BLOBs;
-- JSON is TEXT. Keep this file in lockstep with migrations/postgres/0001_foundation.sql.

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;

CREATE TABLE organizations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       BLOB NOT NULL UNIQUE,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE channels (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid            BLOB NOT NULL UNIQUE,
    org_id          INTEGER NOT NULL REFERENCES organizations (id),
    slug            TEXT NOT NULL,
    type            TEXT NOT NULL,
    name            TEXT NOT NULL,
    name_normalized TEXT NOT NULL,
    identifier      TEXT NOT NULL,
    status          TEXT NOT NULL,
    is_default      INTEGER NOT NULL DEFAULT 0,
    provider_config BLOB,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX channels_org_slug ON channels (org_id, slug);
CREATE UNIQUE INDEX channels_org_default ON channels (org_id) WHERE is_default;
CREATE INDEX channels_org_identifier ON channels (org_id, identifier);
CREATE INDEX channels_org_name ON channels (org_id, name_normalized);

CREATE TABLE api_keys (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id             INTEGER NOT NULL REFERENCES organizations (id),
    name               TEXT NOT NULL,
    key_hash           BLOB NOT NULL UNIQUE,
    prefix             TEXT NOT NULL,
    scopes             TEXT,
    legacy             INTEGER NOT NULL DEFAULT 0,
    default_channel_id INTEGER REFERENCES channels (id),
    expires_at         INTEGER,
    revoked_at         INTEGER,
    revoked_reason     TEXT,
    replaced_by        INTEGER REFERENCES api_keys (id),
    created_at         INTEGER NOT NULL,
    last_used_at       INTEGER
) STRICT;
CREATE INDEX api_keys_org ON api_keys (org_id, id);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid        BLOB NOT NULL UNIQUE,
    org_id      INTEGER NOT NULL REFERENCES organizations (id),
    name        TEXT NOT NULL,
    data        TEXT NOT NULL,
    channel     TEXT,
    occurred_at INTEGER NOT NULL
) STRICT;
CREATE INDEX events_org_time ON events (org_id, occurred_at);
CREATE INDEX events_time ON events (occurred_at);

CREATE TABLE org_events (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid             BLOB NOT NULL UNIQUE,
    org_id           INTEGER NOT NULL REFERENCES organizations (id),
    type             TEXT NOT NULL,
    category         TEXT NOT NULL,
    actor_type       TEXT NOT NULL,
    actor_key_id     INTEGER,
    actor_key_prefix TEXT,
    subject_type     TEXT,
    subject_id       TEXT,
    details          TEXT NOT NULL,
    created_at       INTEGER NOT NULL
) STRICT;
CREATE INDEX org_events_org_time ON org_events (org_id, created_at, id);
