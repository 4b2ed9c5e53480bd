-- What a completed idempotency claim keeps: NULL, the response's bytes; `send` or `batch`, the
-- record of a send or a batch as JSON, from which the API renders its answer on every replay.
ALTER TABLE idempotency_records ADD COLUMN response_format TEXT;
