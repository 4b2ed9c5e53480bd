-- Issue 32, every kind of message (the same name in migrations/sqlite/).
--
-- An inbound message's context beside its type and member: `{"reply_to", "forwarded",
-- "frequently_forwarded", "referral"}` (null for outbound messages).
ALTER TABLE messages ADD COLUMN context JSONB;
-- When the customer edited or deleted the message (a deleted message's content is null JSON).
ALTER TABLE messages ADD COLUMN edited_at TIMESTAMPTZ;
ALTER TABLE messages ADD COLUMN deleted_at TIMESTAMPTZ;
-- What WhatsApp last reported of an outbound message's pricing and conversation.
ALTER TABLE messages ADD COLUMN pricing JSONB;
ALTER TABLE messages ADD COLUMN provider_conversation JSONB;
-- Replies and reactions name the message they refer to by its provider id, resolved to our
-- message in the organization (any channel).
CREATE INDEX messages_provider_id ON messages (provider_message_id, org_id) WHERE provider_message_id IS NOT NULL;
