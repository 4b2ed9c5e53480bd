-- Legacy webhook records (`/api/webhooks`) are rows of webhook_endpoints with legacy = 1: a URL
-- and a list of events, no name of their own (the URL's host), no custom headers and no signing
-- secret (an empty signing_secret, as for deleted endpoints: their deliveries are unsigned,
-- specification 6.3.3). Sharing the table keeps one fan-out (one delivery per distinct URL,
-- the modern endpoint preferred), one dispatcher, one ledger, health and purge for both kinds.
-- Keep this file in lockstep with migrations/postgres/0009_legacy_webhooks.sql.
ALTER TABLE webhook_endpoints ADD COLUMN legacy INTEGER NOT NULL DEFAULT 0 CHECK (legacy IN (0, 1));
