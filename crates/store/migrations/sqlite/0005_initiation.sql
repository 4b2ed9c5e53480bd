-- Conversation initiation: the template catalogue, consent evidence (append-only) and its links
-- from messages and conversations. Times are Unix milliseconds (INTEGER); UUIDs are 16-byte
-- BLOBs; JSON is TEXT. Keep this file in lockstep with migrations/postgres/0005_initiation.sql.

-- A channel's provider templates. `components` are the WhatsApp component definitions;
-- `body_parameters` is derived from the BODY text's {{n}} placeholders (NULL: components not
-- defined, parameters not checked).
CREATE TABLE templates (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                 BLOB NOT NULL UNIQUE,
    org_id               INTEGER NOT NULL REFERENCES organizations (id),
    channel_id           INTEGER NOT NULL REFERENCES channels (id),
    name                 TEXT NOT NULL,
    language             TEXT NOT NULL,
    category             TEXT NOT NULL CHECK (category IN ('utility', 'marketing', 'authentication')),
    status               TEXT NOT NULL CHECK (status IN ('approved', 'pending', 'rejected', 'paused', 'disabled')),
    active               INTEGER NOT NULL CHECK (active IN (0, 1)),
    components           TEXT NOT NULL,
    body_parameters      INTEGER,
    provider_template_id TEXT,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX templates_channel_name_language ON templates (channel_id, name, language);
-- Provider status callbacks find templates by the provider's id on the channel.
CREATE UNIQUE INDEX templates_channel_provider_id ON templates (channel_id, provider_template_id)
    WHERE provider_template_id IS NOT NULL;
CREATE INDEX templates_org ON templates (org_id, id);

-- Opt-in evidence presented with a catalog template send (a conversation initiation or a
-- campaign recipient message). Append-only: the evidence never changes.
CREATE TABLE consents (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid        BLOB NOT NULL UNIQUE,
    org_id      INTEGER NOT NULL REFERENCES organizations (id),
    contact_id  INTEGER NOT NULL REFERENCES contacts (id),
    channel_id  INTEGER NOT NULL REFERENCES channels (id),
    template_id INTEGER NOT NULL REFERENCES templates (id),
    api_key_id  INTEGER REFERENCES api_keys (id),
    context     TEXT NOT NULL CHECK (context IN ('initiation', 'campaign')),
    purpose     TEXT NOT NULL CHECK (purpose IN ('utility', 'marketing', 'authentication')),
    source      TEXT NOT NULL CHECK (source IN ('customer_request', 'website_form', 'checkout', 'in_person', 'phone_call', 'import')),
    reference   TEXT NOT NULL,
    captured_at INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL
) STRICT;
CREATE INDEX consents_contact ON consents (contact_id, id);
CREATE INDEX consents_org_time ON consents (org_id, recorded_at, id);
CREATE INDEX consents_template ON consents (template_id);

CREATE TRIGGER consents_no_update BEFORE UPDATE ON consents
BEGIN
    SELECT RAISE(ABORT, 'consents is append-only: evidence cannot be updated');
END;
CREATE TRIGGER consents_no_delete BEFORE DELETE ON consents
BEGIN
    SELECT RAISE(ABORT, 'consents is append-only: evidence cannot be deleted');
END;

-- The consent a message was sent under, and the consent under which the business first
-- initiated a conversation.
ALTER TABLE messages ADD COLUMN consent_id INTEGER REFERENCES consents (id);
ALTER TABLE conversations ADD COLUMN consent_id INTEGER REFERENCES consents (id);
CREATE INDEX messages_consent ON messages (consent_id) WHERE consent_id IS NOT NULL;
CREATE INDEX conversations_consent ON conversations (consent_id) WHERE consent_id IS NOT NULL;
