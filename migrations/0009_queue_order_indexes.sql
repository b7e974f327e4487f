-- The queue is read a page at a time in the order a policy considers it, each order an
-- index walk: arrival (fifo) and priority-then-arrival. Partial indexes hold only the
-- waiting rows, so a task that starts running leaves them and the running ones cost
-- nothing to skip.
DROP INDEX queue_order;
CREATE INDEX queue_by_arrival ON queue (seq) WHERE waiting = 1;
CREATE INDEX queue_by_priority ON queue (priority DESC, seq) WHERE waiting = 1;
