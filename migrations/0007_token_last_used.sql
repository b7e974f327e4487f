-- When each token was last used (seed 001 §6.1 api_tokens.last_used_at), from TokenUsed
-- events: recorded coarsely (once per v2.auth.token_use_resolution_s per token), never a
-- write per request. The users projection's version moved to 2: it is rebuilt on open.
ALTER TABLE tokens ADD COLUMN last_used_at REAL;
