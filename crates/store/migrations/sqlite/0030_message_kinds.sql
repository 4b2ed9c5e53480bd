-- Issue 32, every kind of message (the same name in migrations/postgres/).
--
-- An inbound message's context beside its type and member: `{"reply_to", "forwarded",
-- "frequently_forwarded", "referral"}` (JSON; null for outbound messages).
ALTER TABLE messages ADD COLUMN context TEXT;
-- When the customer edited or deleted the message (a deleted message's content is null JSON).
ALTER TABLE messages ADD COLUMN edited_at INTEGER;
ALTER TABLE messages ADD COLUMN deleted_at INTEGER;
-- What WhatsApp last reported of an outbound message's pricing and conversation.
ALTER TABLE messages ADD COLUMN pricing TEXT;
ALTER TABLE messages ADD COLUMN provider_conversation TEXT;
-- Replies and reactions name the message they refer to by its provider id, resolved to our
-- message in the organization (any channel).
CREATE INDEX messages_provider_id ON messages (provider_message_id, org_id) WHERE provider_message_id IS NOT NULL;
