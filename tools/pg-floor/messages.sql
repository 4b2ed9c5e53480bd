-- :group outbound messages to consecutive contacts, with a provider's id each, written as a
-- send's record writes them (one multi-row INSERT), in one transaction.
\set c random(1, 100 - :group + 1)
INSERT INTO messages (uuid, org_id, channel_id, contact_id, conversation_id, api_key_id, direction, type, status,
                      content, provider_message_id, created_at, updated_at)
SELECT gen_random_uuid(), 1, 1, :c + i, :c + i, 1, 'outbound', 'text', 'sent', f.content, 'sb_' || gen_random_uuid(), now(), now()
FROM floor_content f, generate_series(0, :group - 1) i;
