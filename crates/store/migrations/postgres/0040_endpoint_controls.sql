-- Endpoint controls (CONVENTIONS "Destinations, filters, throttles, endpoint authentication").
-- Keep this file in lockstep with migrations/sqlite/0040_endpoint_controls.sql.

-- The filter as JSON text, as given (NULL: every subscribed event). TEXT, not JSONB: it is
-- answered back as written.
ALTER TABLE webhook_endpoints ADD COLUMN filter TEXT;
-- Per-endpoint overrides of the deployment's attempt timeout and retry delays (NULL: the
-- deployment's), and the most deliveries per second (NULL: no limit).
ALTER TABLE webhook_endpoints ADD COLUMN timeout_ms BIGINT;
-- A JSON array of milliseconds.
ALTER TABLE webhook_endpoints ADD COLUMN retry_delays_ms TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN max_per_second BIGINT;

-- Where deliveries go: https (url) or a broker (redis_stream, ...). A broker endpoint's target
-- as answered, JSON text with the URL's credentials masked (url then holds the masked URL),
-- and its full URL sealed under the master key (NULL when it holds no credentials).
ALTER TABLE webhook_endpoints ADD COLUMN destination TEXT NOT NULL DEFAULT 'https';
ALTER TABLE webhook_endpoints ADD COLUMN target TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN target_secret BYTEA;

-- Authentication to an https endpoint: its public part as answered (JSON text: type, token_url,
-- client_id, scope) and its secret (the OAuth2 client secret) sealed under the master key.
ALTER TABLE webhook_endpoints ADD COLUMN auth TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN auth_secret BYTEA;
