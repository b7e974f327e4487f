-- A projection kept inline is current with the log by construction: every append folds it
-- in the same transaction. Writing its checkpoint on every append cost a page per commit
-- (and an fsync'd page is most of an append's cost), so the checkpoint now stays where the
-- last rebuild left it and ``live`` says the projection has followed every append since.
--
-- A store that does not keep a projection clears ``live`` (and moves the checkpoint to the
-- head it was exact at) before its first append; the next store that keeps it rebuilds it.
ALTER TABLE projection_state ADD COLUMN live INTEGER NOT NULL DEFAULT 0;

-- A projection at the head now is live; one behind is rebuilt on the next open, as before.
UPDATE projection_state SET live = (checkpoint = (SELECT coalesce(max(position), 0) FROM events));
