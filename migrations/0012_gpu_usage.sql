-- GPU-seconds each user's attempts used, per hour in which they ran: the history behind the
-- fairshare policy's decayed usage. Raw seconds, so the configured half-life may change.
CREATE TABLE gpu_usage (
    user   TEXT NOT NULL,
    hour   INTEGER NOT NULL,  -- unix time // 3600
    gpu_s  REAL NOT NULL,
    PRIMARY KEY (user, hour)
) WITHOUT ROWID;
