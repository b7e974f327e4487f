-- The SSH public keys users registered for the SFTP door (issue 53, argus.sftp), from
-- SshKeyAdded / SshKeyRevoked events: one row per fingerprint (unique among the keys in
-- use), revoked rows kept for the key list's history.
CREATE TABLE ssh_keys (
    fingerprint TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    public_key TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    revoked INTEGER NOT NULL DEFAULT 0,
    added_at REAL NOT NULL
);
CREATE INDEX ssh_keys_by_user ON ssh_keys (user_id, added_at);
