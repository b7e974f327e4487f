-- Every task list is a walk down an index in its own order (newest first, task id as the
-- tie-break), so a page costs the same at any depth: keyset pagination (a cursor of the
-- last row's (created_at, task_id)), never an offset. created_at never changes after the
-- insert, so these indexes are written once per task, not on every event.
CREATE INDEX tasks_created ON tasks (created_at DESC, task_id DESC);
DROP INDEX tasks_user_created;
CREATE INDEX tasks_user_created ON tasks (user, created_at DESC, task_id DESC);
DROP INDEX tasks_state;
CREATE INDEX tasks_state_created ON tasks (state, created_at DESC, task_id DESC);
