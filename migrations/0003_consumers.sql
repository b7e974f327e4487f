-- Consumers of the log (the reactor, ...) keep their checkpoint here, written in the same
-- transaction as their outputs; and the reactor's leadership lease.
CREATE TABLE subscriber_checkpoints (
    name     TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);

CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    lease_until REAL NOT NULL
);
