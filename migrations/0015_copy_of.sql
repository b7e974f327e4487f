-- A file that is a host's copy of a log shared through PostgreSQL (argus.store.mirror)
-- says so, and of which log (the URL, password left out). Written alone, as a SQLite log,
-- it would stop being a copy, and the next start on the shared log would refuse it: so
-- the store refuses to open it alone in the first place (argus.store.sqlite).
CREATE TABLE copy_of (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    url       TEXT NOT NULL,
    marked_at REAL NOT NULL
);
