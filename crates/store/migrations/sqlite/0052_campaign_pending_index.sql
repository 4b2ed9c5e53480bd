-- The campaign worker's claim reads the pending recipients oldest first (ORDER BY id, a lease
-- expired or none). An index on (id) over the pending ones gives them in that order; the
-- earlier (lease_until, id) index did not, and SQLite walked the whole table by id through
-- every recipient already sent, inside the writer's transaction.
DROP INDEX campaign_recipients_pending;
CREATE INDEX campaign_recipients_pending ON campaign_recipients (id) WHERE status = 'pending';
