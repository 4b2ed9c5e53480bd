-- Organization data: users, memberships with roles, per-membership permission overrides, and
-- what reads of the organization log need (filter indexes; append-only enforcement).
-- Keep this file in lockstep with migrations/postgres/0004_org_data.sql.

-- People. No password, hash or other credential is stored: people do not log in to Switchboard.
-- The e-mail address is unique without regard to case (`email_normalized` is its lower-case form).
CREATE TABLE users (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid             BLOB NOT NULL UNIQUE,
    email            TEXT NOT NULL,
    email_normalized TEXT NOT NULL UNIQUE,
    name             TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT;

-- A user's membership of an organization. Roles and their permissions are defined in code
-- (src/domain/permission.rs); only the role name is stored.
CREATE TABLE memberships (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id     INTEGER NOT NULL REFERENCES organizations (id),
    user_id    INTEGER NOT NULL REFERENCES users (id),
    role       TEXT NOT NULL,
    status     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX memberships_org_user ON memberships (org_id, user_id);
CREATE INDEX memberships_org_time ON memberships (org_id, created_at, id);
CREATE INDEX memberships_user ON memberships (user_id);

-- Per-membership overrides: at most one per permission. Effective permissions are computed
-- (role permissions + grants - revocations), never stored.
CREATE TABLE membership_permissions (
    membership_id INTEGER NOT NULL REFERENCES memberships (id) ON DELETE CASCADE,
    permission    TEXT NOT NULL,
    effect        TEXT NOT NULL CHECK (effect IN ('grant', 'revoke')),
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (membership_id, permission)
) STRICT;

-- Filters of GET /events: each index serves one filter newest first, without a sort. A type
-- prefix (`team.*`) walks the distinct types under the prefix on org_events_org_type (a loose
-- index scan), then reads each type newest first.
CREATE INDEX org_events_org_category ON org_events (org_id, category, created_at, id);
CREATE INDEX org_events_org_type ON org_events (org_id, type, created_at, id);
CREATE INDEX org_events_org_actor ON org_events (org_id, actor_type, created_at, id);
CREATE INDEX org_events_org_actor_key ON org_events (org_id, actor_key_id, created_at, id)
    WHERE actor_key_id IS NOT NULL;

-- The organization log is append-only: no entry is ever changed or deleted.
CREATE TRIGGER org_events_no_update BEFORE UPDATE ON org_events
BEGIN
    SELECT RAISE(ABORT, 'org_events is append-only: entries cannot be updated');
END;
CREATE TRIGGER org_events_no_delete BEFORE DELETE ON org_events
BEGIN
    SELECT RAISE(ABORT, 'org_events is append-only: entries cannot be deleted');
END;
