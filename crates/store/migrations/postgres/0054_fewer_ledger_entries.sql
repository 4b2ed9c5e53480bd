-- Fewer index entries for every delivery (docs/benchmarks.md, "Fewer ledger entries per delivery";
-- the same file in migrations/postgres/ and migrations/sqlite/). A delivery's row is written twice,
-- by its insert and by its outcome (which changes `status` and `due_at`, so it is never a
-- heap-only update on PostgreSQL): every index of the table takes an entry at each write.
--
-- * (created_at) served only the purge and, on partitioned tables, the age of a partition. Both
--   now read (org_id, created_at, id), organization by organization (an organization's oldest and
--   newest rows are at the ends of its range): two entries less a delivery.
-- * (org_id, status, created_at, id) no longer holds delivered rows, nearly every row of the
--   ledger: a listing of delivered deliveries reads (org_id, created_at, id) and skips the few
--   others, a listing of any other status (the ones an operator looks for among many delivered)
--   still reads only its own rows. The outcome of a delivery that succeeds writes one entry less.
--   Queries name the predicate (`status <> 'delivered'`) beside their status so that both
--   planners see that the index applies, with the status a parameter.
DROP INDEX webhook_deliveries_created;
CREATE INDEX webhook_deliveries_org_undelivered ON webhook_deliveries (org_id, status, created_at, id)
    WHERE status <> 'delivered';
DROP INDEX webhook_deliveries_org_status;
