-- Teams (issue 56), from the teams stream's events (TeamCreated, TeamMemberMoved,
-- TeamShareSet, TeamQuotaSet): each team with its share, each user's team (one at most),
-- and each team's quota per GPU model ('' : GPUs of any model; NULL limits: no limit).
CREATE TABLE teams (
    team_id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL DEFAULT '',
    share REAL NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL
);
CREATE TABLE team_members (
    user_id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL,
    since REAL NOT NULL,
    moved_by TEXT NOT NULL
);
CREATE INDEX team_members_by_team ON team_members (team_id, user_id);
CREATE TABLE team_quotas (
    team_id TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    nominal_gpus REAL NOT NULL,
    borrowing_limit REAL,
    lending_limit REAL,
    set_at REAL NOT NULL,
    set_by TEXT NOT NULL,
    PRIMARY KEY (team_id, gpu_model)
) WITHOUT ROWID;
