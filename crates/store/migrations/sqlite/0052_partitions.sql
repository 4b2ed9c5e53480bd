-- Retention by partition is PostgreSQL's (see postgres/0052_partitions.sql): SQLite's tables
-- are not partitioned, and its purge deletes old rows in batches. Nothing changes here; the
-- file keeps both backends' migration lists the same.
SELECT 1;
