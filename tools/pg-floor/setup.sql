-- The organization, 8 endpoints and the payloads the floor writes (see run).
INSERT INTO organizations (id, uuid, name, created_at) VALUES (1, gen_random_uuid(), 'floor', now());
INSERT INTO webhook_endpoints (uuid, org_id, name, url, events, headers, signing_secret, status, created_at, updated_at)
SELECT gen_random_uuid(), 1, 'ep' || i, 'http://127.0.0.1:9/' || i, '["*"]'::jsonb, '{}'::jsonb, '\x00'::bytea, 'enabled', now(), now()
FROM generate_series(1, 8) i;
CREATE TABLE floor_payload AS SELECT
  (SELECT jsonb_object_agg('k' || i, repeat('x', 20)) FROM generate_series(1, 20) i) AS data,
  repeat('y', 900) AS envelope,
  '{"url":"http://127.0.0.1:9/1","started_at_ms":1764000000000,"duration_ms":1,"response_status":204,"excerpt":"","signed_with":"whsec"}'::text AS first;
CREATE SEQUENCE floor_cursor;
