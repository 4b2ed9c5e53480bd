-- Legacy data routes under /api: contact deletion (soft), contact groups, canned replies,
-- campaigns with their recipients, and flows. Times are Unix milliseconds (INTEGER); UUIDs are
-- 16-byte BLOBs; JSON is TEXT. Keep this file in lockstep with
-- migrations/postgres/0008_legacy_data.sql.

-- A deleted contact stays as a tombstone (its messages keep their contact_uuid); deletion
-- clears its phone, name and Telegram chat, so lookups never find it and a new contact can take
-- the phone.
ALTER TABLE contacts ADD COLUMN deleted_at INTEGER;
CREATE INDEX contacts_org_live ON contacts (org_id, created_at, id) WHERE deleted_at IS NULL;

CREATE TABLE contact_groups (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       BLOB NOT NULL UNIQUE,
    org_id     INTEGER NOT NULL REFERENCES organizations (id),
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX contact_groups_org ON contact_groups (org_id, created_at, id);

CREATE TABLE contact_group_members (
    group_id   INTEGER NOT NULL REFERENCES contact_groups (id) ON DELETE CASCADE,
    contact_id INTEGER NOT NULL REFERENCES contacts (id),
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (group_id, contact_id)
) STRICT;
CREATE INDEX contact_group_members_contact ON contact_group_members (contact_id);
CREATE INDEX contact_group_members_page ON contact_group_members (group_id, added_at, contact_id);

CREATE TABLE canned_replies (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       BLOB NOT NULL UNIQUE,
    org_id     INTEGER NOT NULL REFERENCES organizations (id),
    shortcut   TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX canned_replies_org_shortcut ON canned_replies (org_id, shortcut);
CREATE INDEX canned_replies_org ON canned_replies (org_id, created_at, id);

-- A campaign: one catalog template sent to a fixed list of recipients by a background worker.
-- `request` keeps template_uuid and the template object as given; the API key is the actor of
-- every recipient's send and audit entry.
CREATE TABLE campaigns (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid           BLOB NOT NULL UNIQUE,
    org_id         INTEGER NOT NULL REFERENCES organizations (id),
    api_key_id     INTEGER NOT NULL REFERENCES api_keys (id),
    api_key_prefix TEXT NOT NULL,
    name           TEXT NOT NULL,
    channel_id     INTEGER NOT NULL REFERENCES channels (id),
    group_uuid     BLOB,
    request        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    completed_at   INTEGER
) STRICT;
CREATE INDEX campaigns_org ON campaigns (org_id, created_at, id);

-- One recipient of a campaign. A worker claims pending recipients with a lease (token and
-- expiry); a claim whose lease expired (its instance stopped) is taken over.
CREATE TABLE campaign_recipients (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id   INTEGER NOT NULL REFERENCES campaigns (id),
    contact_id    INTEGER NOT NULL REFERENCES contacts (id),
    consent       TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'refused', 'failed')),
    lease_token   BLOB,
    lease_until   INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    message_id    INTEGER REFERENCES messages (id),
    error_code    TEXT,
    error_message TEXT,
    updated_at    INTEGER NOT NULL,
    UNIQUE (campaign_id, contact_id)
) STRICT;
CREATE INDEX campaign_recipients_pending ON campaign_recipients (lease_until, id) WHERE status = 'pending';
CREATE INDEX campaign_recipients_campaign ON campaign_recipients (campaign_id, id);

-- A flow: a named action on a channel (a text, or a catalog template with parameters),
-- triggered for one contact through the API.
CREATE TABLE flows (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid          BLOB NOT NULL UNIQUE,
    org_id        INTEGER NOT NULL REFERENCES organizations (id),
    name          TEXT NOT NULL,
    channel_id    INTEGER NOT NULL REFERENCES channels (id),
    action        TEXT NOT NULL,
    active        INTEGER NOT NULL CHECK (active IN (0, 1)),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX flows_org ON flows (org_id, created_at, id);
