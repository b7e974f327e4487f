-- Named leases (the reactor's leadership), timed by the database's clock: every claimer,
-- on every host, compares against the same clock.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    lease_until DOUBLE PRECISION NOT NULL  -- UNIX seconds, the database's clock
);
