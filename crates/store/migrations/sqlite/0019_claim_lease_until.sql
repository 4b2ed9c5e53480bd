-- A claim keeps its lease's expiry in lease_until and leaves due_at (the claim index's column)
-- alone, so the claim's update touches no index. Rows with a lease_token are claimed; their
-- lease_until says until when, and is cleared with the token. A claim made by an earlier
-- release (during a rolling upgrade) has no lease_until and its expiry in due_at.
ALTER TABLE webhook_deliveries ADD COLUMN lease_until INTEGER;
UPDATE webhook_deliveries SET lease_until = due_at WHERE lease_token IS NOT NULL;
