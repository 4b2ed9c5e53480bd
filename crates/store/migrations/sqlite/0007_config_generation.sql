-- A counter bumped by every change to API keys and channels, in the same transaction. Each
-- server polls it and drops its in-process caches of keys and channels when it moves.
CREATE TABLE config_generation (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO config_generation (id, value) VALUES (1, 0);
