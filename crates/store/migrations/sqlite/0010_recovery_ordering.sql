-- Recovery, the event feed and ordered delivery (docs/webhooks.md). Times are Unix
-- milliseconds; UUIDs 16-byte BLOBs. Keep this file in lockstep with
-- migrations/postgres/0010_recovery_ordering.sql.

-- Events keep the exact bytes of their envelope (what every delivery sends and the feed
-- serves) and whether they were test events (delivered to one endpoint only, never in the
-- feed). SQLite has one writer, so ids are in commit order and the id alone is the feed cursor.
ALTER TABLE events ADD COLUMN envelope TEXT;
ALTER TABLE events ADD COLUMN test INTEGER NOT NULL DEFAULT 0;
CREATE INDEX events_feed ON events (org_id, id) WHERE NOT test;
CREATE INDEX events_org_window ON events (org_id, occurred_at, id) WHERE NOT test;

-- How a delivery came to be: event (the fan-out), manual (retried by hand), test, recovery.
ALTER TABLE webhook_deliveries ADD COLUMN trigger TEXT NOT NULL DEFAULT 'event';
-- Ordered endpoints: the contact the delivery's chain belongs to, and its sequence number.
ALTER TABLE webhook_deliveries ADD COLUMN order_key BLOB;
ALTER TABLE webhook_deliveries ADD COLUMN sequence INTEGER;
CREATE INDEX webhook_deliveries_chain ON webhook_deliveries (endpoint_id, order_key, sequence)
    WHERE order_key IS NOT NULL;
CREATE INDEX webhook_deliveries_endpoint_event ON webhook_deliveries (endpoint_id, event_id);

ALTER TABLE webhook_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none';

-- One row per (endpoint, contact) chain: the next sequence number (and, on PostgreSQL, the
-- lock that makes "is an earlier delivery unfinished?" race-free; SQLite has one writer).
CREATE TABLE delivery_chains (
    endpoint_id   INTEGER NOT NULL REFERENCES webhook_endpoints (id),
    order_key     BLOB NOT NULL,
    next_sequence INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, order_key)
) STRICT;

-- Recoveries: durable background jobs that walk a window of events in pages.
CREATE TABLE webhook_recoveries (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid               BLOB NOT NULL UNIQUE,
    org_id             INTEGER NOT NULL REFERENCES organizations (id),
    endpoint_id        INTEGER NOT NULL REFERENCES webhook_endpoints (id),
    since              INTEGER NOT NULL,
    until              INTEGER NOT NULL,
    status             TEXT NOT NULL,
    events_matched     INTEGER NOT NULL DEFAULT 0,
    deliveries_queued  INTEGER NOT NULL DEFAULT 0,
    cursor_at          INTEGER,
    cursor_id          INTEGER,
    lease_token        BLOB,
    lease_until        INTEGER,
    error              TEXT,
    created_at         INTEGER NOT NULL,
    completed_at       INTEGER
) STRICT;
CREATE INDEX webhook_recoveries_running ON webhook_recoveries (lease_until) WHERE status = 'running';
CREATE INDEX webhook_recoveries_org ON webhook_recoveries (org_id, created_at);
