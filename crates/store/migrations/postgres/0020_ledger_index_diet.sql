-- Fewer index entries per delivery. Every insert of a delivery, and every update that is not
-- heap-only (an outcome changes status and due_at), writes an entry in each index of the row;
-- these changes keep every query served and cut those entries:
--
-- * (event_id) and (endpoint_id, event_id) become one index, (event_id, endpoint_id): the
--   event's deliveries (message trace, event purge, the events foreign key) and recovery's
--   "which of these events has this endpoint already had" both start from event ids.
-- * (endpoint_id, status) becomes partial on the open statuses: every per-endpoint operation
--   (disable, re-enable, hold, fail the held deliveries of a deleted endpoint) asks only for
--   pending and retrying deliveries, and an outcome that ends a delivery writes no entry.
-- * events (org_id, occurred_at) is served by no query: recovery reads the partial
--   events_org_window (org_id, occurred_at, id) WHERE NOT test, the purge events_time.
CREATE INDEX webhook_deliveries_event_endpoint ON webhook_deliveries (event_id, endpoint_id);
DROP INDEX webhook_deliveries_event;
DROP INDEX webhook_deliveries_endpoint_event;
CREATE INDEX webhook_deliveries_endpoint_open ON webhook_deliveries (endpoint_id)
    WHERE status IN ('pending', 'retrying');
DROP INDEX webhook_deliveries_endpoint;
DROP INDEX events_org_time;
-- A claim's update is heap-only only when the row's page has room for the new version: with
-- fillfactor 70 about a third of a drain's claims found it, with 50 nearly all do (measured with
-- pg_stat_user_tables in docs/benchmarks.md). Applies to pages written from now on.
ALTER TABLE webhook_deliveries SET (fillfactor = 50);
