-- How many GPUs each user's admitted tasks may hold at once (issue 36, governance), from
-- UserLimitsSet events; 0: no cap. The users projection's version moved to 4: it is
-- rebuilt on open.
ALTER TABLE users ADD COLUMN max_gpus REAL NOT NULL DEFAULT 0;
