-- Secret rotation with overlap: the secrets an endpoint retired, each valid until its grace
-- period ends (deliveries are signed with them too until then), and which secrets signed each
-- attempt (by their non-secret id). Times are Unix milliseconds. Keep this file in lockstep
-- with migrations/postgres/0014_secret_overlap.sql.

CREATE TABLE webhook_endpoint_secrets (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id    INTEGER NOT NULL REFERENCES webhook_endpoints (id),
    -- sealed under the master key, like webhook_endpoints.signing_secret
    signing_secret BLOB NOT NULL,
    expires_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_endpoint_secrets_endpoint ON webhook_endpoint_secrets (endpoint_id, expires_at);
CREATE INDEX webhook_endpoint_secrets_expiry ON webhook_endpoint_secrets (expires_at);

-- A JSON array of secret ids (`sec_...`); NULL for an unsigned attempt (legacy records).
ALTER TABLE webhook_attempts ADD COLUMN signed_with TEXT;
