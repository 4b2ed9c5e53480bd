-- The organization, a sandbox channel, an API key, 100 contacts with an open conversation each
-- and the content the message floor writes (see messages).
INSERT INTO organizations (id, uuid, name, created_at) VALUES (1, gen_random_uuid(), 'floor', now());
INSERT INTO channels (id, uuid, org_id, slug, type, name, name_normalized, identifier, status, created_at, updated_at)
VALUES (1, gen_random_uuid(), 1, 'sandbox', 'sandbox', 'sandbox', 'sandbox', 'sandbox', 'active', now(), now());
INSERT INTO api_keys (id, org_id, name, key_hash, prefix, created_at) VALUES (1, 1, 'floor', '\x00', 'sb_floor', now());
INSERT INTO contacts (id, uuid, org_id, created_at, updated_at)
SELECT i, gen_random_uuid(), 1, now(), now() FROM generate_series(1, 100) i;
INSERT INTO conversations (id, uuid, org_id, contact_id, channel_id, status, created_at, updated_at)
SELECT i, gen_random_uuid(), 1, i, 1, 'open', now(), now() FROM generate_series(1, 100) i;
CREATE TABLE floor_content AS
SELECT '{"type":"text","text":{"body":"Your order 10482 has shipped and will arrive on Thursday."}}'::jsonb AS content;
