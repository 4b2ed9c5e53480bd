-- 64 deliveries completed as plain successes, found by id range (the ids are known, as the
-- dispatcher knows them), one statement.
SELECT (nextval('floor_cursor') - 1) * 64 + 1 AS lo \gset
UPDATE webhook_deliveries SET status = 'delivered', due_at = NULL, next_attempt_at = NULL, lease_token = NULL, lease_until = NULL,
  response_status = 204, error_code = NULL, error_message = NULL, delivered_at = now(), updated_at = now(), first_attempt = (SELECT first FROM floor_payload)
WHERE id BETWEEN :lo AND :lo + 63 AND lease_token IS NOT NULL;
