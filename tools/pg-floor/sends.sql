-- A group of 16 events, each to the 8 endpoints, leased as a hand-off writes them, in one statement.
BEGIN;
WITH e AS (
  INSERT INTO events (uuid, org_id, name, data, occurred_at, envelope)
  SELECT gen_random_uuid(), 1, 'message.sent', p.data, now(), p.envelope FROM floor_payload p, generate_series(1, 16)
  RETURNING id)
INSERT INTO webhook_deliveries (uuid, org_id, event_id, endpoint_id, event_name, status, due_at, lease_token, lease_until, created_at, updated_at)
SELECT gen_random_uuid(), 1, e.id, ep.id, 'message.sent', 'pending', now(), gen_random_uuid(), now() + interval '30 s', now(), now()
FROM e CROSS JOIN webhook_endpoints ep;
COMMIT;
