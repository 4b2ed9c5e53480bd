-- Fewer index entries per delivery (see the PostgreSQL migration of the same name): every
-- insert of a delivery writes an entry in each index of the row, and an update each index whose
-- columns it changes. Every query stays served by an index:
--
-- * (event_id) and (endpoint_id, event_id) become one index, (event_id, endpoint_id): the
--   event's deliveries (message trace, event purge, the events foreign key) and recovery's
--   "which of these events has this endpoint already had" both start from event ids.
-- * (endpoint_id, status) becomes partial on the open statuses: every per-endpoint operation
--   asks for `status IN ('pending', 'retrying')`, written exactly so, which is how SQLite
--   matches a query to a partial index; an outcome that ends a delivery removes its entry.
-- * events (org_id, occurred_at) is served by no query: recovery reads the partial
--   events_org_window (org_id, occurred_at, id) WHERE NOT test, the purge events_time.
CREATE INDEX webhook_deliveries_event_endpoint ON webhook_deliveries (event_id, endpoint_id);
DROP INDEX webhook_deliveries_event;
DROP INDEX webhook_deliveries_endpoint_event;
CREATE INDEX webhook_deliveries_endpoint_open ON webhook_deliveries (endpoint_id)
    WHERE status IN ('pending', 'retrying');
DROP INDEX webhook_deliveries_endpoint;
DROP INDEX events_org_time;
