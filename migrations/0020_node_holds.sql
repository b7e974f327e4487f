-- Nodes held from admitting (issue 52, node hygiene): drained by an admin, or quarantined
-- by the reactor while processes of ended attempts still run there. The cluster
-- projection's version moved to 3: it is rebuilt on open.
CREATE TABLE cluster_holds (
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    ip TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL,
    held_by TEXT NOT NULL,
    since REAL NOT NULL,
    PRIMARY KEY (node_id, kind)
);
