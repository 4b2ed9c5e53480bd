-- Fewer writes per send and per delivery (docs/benchmarks.md, "Fewer checks and entries per
-- send (2026-12-07)").
--
-- 1. One index finds a message by its provider's id instead of two. (channel_id,
--    provider_message_id) kept the id unique per channel and (provider_message_id, org_id) found
--    a quoted message by its id within an organization; (provider_message_id, channel_id) does
--    both (the same uniqueness; a look-up by id within an organization reads the few rows with
--    that id): an index entry less for every message a provider numbers.
CREATE UNIQUE INDEX messages_provider_id_channel ON messages (provider_message_id, channel_id)
    WHERE provider_message_id IS NOT NULL;
DROP INDEX messages_channel_provider_id;
DROP INDEX messages_provider_id;

-- 2. No foreign keys from the rows every send and delivery writes (messages, events,
--    webhook_deliveries, idempotency_records) to rows the store never deletes (organizations,
--    channels, contacts, conversations, api_keys, webhook_endpoints: they are disabled, revoked
--    or closed, never deleted; tests/architecture.rs holds the store to it). Each such key made
--    PostgreSQL run a check for every row written (a query and a lock of the referenced row,
--    written to the WAL, and shared with every concurrent writer of the same organization):
--    seven checks a sandbox send and two a delivery. The store writes these references from
--    rows it has just read in the same transaction. The keys that guard a deletion stay (an
--    event purged while a delivery refers to it, attempts deleted with their delivery), and so
--    do those of columns most rows leave empty (consents, batches). On partitioned tables
--    (SWITCHBOARD_RETENTION_PARTITIONS) the parent's key is dropped with its partitions'.
DO $$
DECLARE c record;
BEGIN
    FOR c IN
        SELECT con.conrelid::regclass AS tbl, con.conname
        FROM pg_constraint con
        WHERE con.contype = 'f' AND con.conparentid = 0
          AND con.confrelid IN ('organizations'::regclass, 'channels'::regclass, 'contacts'::regclass,
                                'conversations'::regclass, 'api_keys'::regclass,
                                'webhook_endpoints'::regclass)
          AND (con.conrelid IN ('messages'::regclass, 'events'::regclass,
                                'webhook_deliveries'::regclass, 'idempotency_records'::regclass)
               OR con.conrelid IN (SELECT inhrelid FROM pg_inherits
                                   WHERE inhparent IN ('events'::regclass, 'webhook_deliveries'::regclass)))
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tbl, c.conname);
    END LOOP;
END $$;
