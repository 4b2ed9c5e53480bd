-- A claim keeps its lease's expiry in lease_until and leaves due_at (the claim index's column)
-- alone: the claim's update then changes no indexed column, and PostgreSQL can make it a
-- heap-only (HOT) update that writes no index entry, when the row's page has room for the new
-- version. fillfactor 70 keeps that room on the table's new pages. Rows with a lease_token are
-- claimed; their lease_until says until when, and is cleared with the token. A claim made by
-- an earlier release (during a rolling upgrade) has no lease_until and its expiry in due_at.
ALTER TABLE webhook_deliveries ADD COLUMN lease_until TIMESTAMPTZ;
UPDATE webhook_deliveries SET lease_until = due_at WHERE lease_token IS NOT NULL;
ALTER TABLE webhook_deliveries SET (fillfactor = 70);
