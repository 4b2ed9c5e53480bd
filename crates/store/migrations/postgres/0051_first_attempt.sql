-- The first attempt of a delivery that succeeded at once, as JSON text, kept in the delivery row
-- instead of a row of webhook_attempts (one row written per such delivery, not two). Read as
-- the attempt numbered 1 by every reader of the attempt log; NULL for every other delivery.
ALTER TABLE webhook_deliveries ADD COLUMN first_attempt TEXT;
