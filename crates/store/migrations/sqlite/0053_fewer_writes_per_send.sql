-- Fewer writes per send (docs/benchmarks.md, "Fewer checks and entries per send (2026-12-07)";
-- the same name in migrations/postgres/).
--
-- One index finds a message by its provider's id instead of two. (channel_id,
-- provider_message_id) kept the id unique per channel and (provider_message_id, org_id) found a
-- quoted message by its id within an organization; (provider_message_id, channel_id) does both:
-- an index entry less for every message a provider numbers.
--
-- SQLite keeps its foreign keys (PostgreSQL drops some): its check is a look-up in the same file
-- and takes no lock, and dropping one means rebuilding the table.
CREATE UNIQUE INDEX messages_provider_id_channel ON messages (provider_message_id, channel_id)
    WHERE provider_message_id IS NOT NULL;
DROP INDEX messages_channel_provider_id;
DROP INDEX messages_provider_id;
