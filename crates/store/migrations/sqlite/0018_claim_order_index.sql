-- The dispatcher claims due deliveries ORDER BY due_at, id: with the id in the index, a claim
-- reads its batch straight from the index even when many deliveries share one due_at (an
-- endpoint re-enabled, a bulk retry), instead of sorting every tied row.
CREATE INDEX webhook_deliveries_due_id ON webhook_deliveries (due_at, id) WHERE due_at IS NOT NULL;
DROP INDEX webhook_deliveries_due;
