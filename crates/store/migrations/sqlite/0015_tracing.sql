-- Tracing and the message timeline. Keep this file in lockstep with
-- migrations/postgres/0015_tracing.sql.

-- The W3C traceparent of the work that caused an event (its deliveries join that trace), and
-- the message a message.* event is about (its deliveries' attempts join the message's
-- timeline).
ALTER TABLE events ADD COLUMN trace TEXT;
ALTER TABLE events ADD COLUMN message_id INTEGER;
CREATE INDEX events_message ON events (message_id) WHERE message_id IS NOT NULL;

-- The traceparent of the request that sent a message (a provider callback about it links to it),
-- and the first steps of its journey (accepted, the provider request and response, its first
-- status) as a JSON array, written with the message: no statement of its own on the send path.
ALTER TABLE messages ADD COLUMN trace TEXT;
ALTER TABLE messages ADD COLUMN journey TEXT;

-- The later steps of a message's journey: each status change a provider reports (webhook
-- attempts are read from the ledger).
CREATE TABLE message_steps (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    at         INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    detail     TEXT NOT NULL
) STRICT;
CREATE INDEX message_steps_message ON message_steps (message_id, at, id);
