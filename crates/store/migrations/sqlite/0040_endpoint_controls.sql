-- Endpoint controls (CONVENTIONS "Destinations, filters, throttles, endpoint authentication").
-- Keep this file in lockstep with migrations/postgres/0040_endpoint_controls.sql.

-- The filter as JSON text, as given (NULL: every subscribed event).
ALTER TABLE webhook_endpoints ADD COLUMN filter TEXT;
-- Per-endpoint overrides of the deployment's attempt timeout and retry delays (NULL: the
-- deployment's), and the most deliveries per second (NULL: no limit).
ALTER TABLE webhook_endpoints ADD COLUMN timeout_ms INTEGER;
-- A JSON array of milliseconds.
ALTER TABLE webhook_endpoints ADD COLUMN retry_delays_ms TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN max_per_second INTEGER;
