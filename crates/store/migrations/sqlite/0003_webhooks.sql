-- Webhooks: endpoints, deliveries (one per event and target) and their attempt log.
-- Times are Unix milliseconds; UUIDs 16-byte BLOBs; JSON TEXT. Keep this file in lockstep with
-- migrations/postgres/0003_webhooks.sql.

CREATE TABLE webhook_endpoints (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                 BLOB NOT NULL UNIQUE,
    org_id               INTEGER NOT NULL REFERENCES organizations (id),
    name                 TEXT NOT NULL,
    url                  TEXT NOT NULL,
    -- subscription patterns: a JSON array of exact names, "*" and "namespace.*"
    events               TEXT NOT NULL,
    -- custom request headers: a JSON object of name -> value
    headers              TEXT NOT NULL,
    -- the signing secret, sealed under the master key (emptied when the endpoint is deleted)
    signing_secret       BLOB NOT NULL,
    status               TEXT NOT NULL,
    disabled_reason      TEXT,
    disabled_at          INTEGER,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    -- deleted endpoints are kept (without their secret) so that the ledger keeps its history
    deleted_at           INTEGER
) STRICT;
CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org_id, created_at, id) WHERE deleted_at IS NULL;
CREATE INDEX webhook_endpoints_active ON webhook_endpoints (org_id, id) WHERE status = 'active' AND deleted_at IS NULL;

CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- the public delivery_id, stable across attempts
    uuid            BLOB NOT NULL UNIQUE,
    org_id          INTEGER NOT NULL REFERENCES organizations (id),
    event_id        INTEGER NOT NULL REFERENCES events (id),
    -- the target; nullable so that other kinds of target (legacy webhook records) can be added
    endpoint_id     INTEGER REFERENCES webhook_endpoints (id),
    event_name      TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- when the dispatcher may claim it: the scheduled attempt, or the expiry of the lease of an
    -- attempt in flight; NULL when there is nothing to do (finished, or held while the endpoint
    -- is disabled)
    due_at          INTEGER,
    -- the claim of the attempt in flight (NULL when none)
    lease_token     BLOB,
    next_attempt_at INTEGER,
    response_status INTEGER,
    error_code      TEXT,
    error_message   TEXT,
    last_attempt_at INTEGER,
    delivered_at    INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX webhook_deliveries_org ON webhook_deliveries (org_id, created_at, id);
CREATE INDEX webhook_deliveries_org_status ON webhook_deliveries (org_id, status, created_at, id);
CREATE INDEX webhook_deliveries_org_event ON webhook_deliveries (org_id, event_name, created_at, id);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, status);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

CREATE TABLE webhook_attempts (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id           INTEGER NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    number                INTEGER NOT NULL,
    url                   TEXT,
    started_at            INTEGER NOT NULL,
    duration_ms           INTEGER,
    response_status       INTEGER,
    error_code            TEXT,
    error_message         TEXT,
    response_body_excerpt TEXT
) STRICT;
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, number);
