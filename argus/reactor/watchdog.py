"""The placement watchdog: a running attempt whose placement groups Ray cannot place.

verl >= 0.6 creates its placement groups and waits for them with no timeout (verl PR
#6663): when the gang fits in total but not as Ray places it (another job took a node's
GPUs between admission and placement, a bundle asks for more CPUs than a node has), the
job runs for ever and holds what it got. Ray's state API shows those groups PENDING. An
attempt whose groups stay PENDING for ``placement_timeout_s`` is stopped and its end
classified INSUFFICIENT_RESOURCES (retried), with the groups as evidence.

How long a group has been pending is measured from the first check that saw it pending
(kept in memory: a new leader starts counting again, which only delays a stop).
"""

from __future__ import annotations

from collections.abc import Sequence

from argus.config import SchedulerConfig
from argus.events import AttemptPlacementTimedOut
from argus.rayjobs import RayPort
from projections import TaskView

__all__ = ["PlacementWatchdog"]


class PlacementWatchdog:
    """Asks Ray about the running attempts' placement groups at most every
    ``placement_check_s``; returns the attempts to stop."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.timeout_s = config.placement_timeout_s
        self.every_s = config.placement_check_s
        self._checked_at = -float("inf")
        self._pending_since: dict[str, float] = {}  # submission id -> first seen pending

    async def overdue(self, running: Sequence[TaskView], gateway: RayPort, now: float) -> list[AttemptPlacementTimedOut]:
        """The running attempts whose placement groups have been PENDING too long (each
        once: an attempt already marked is left alone). RayUnavailable passes through."""
        if self.timeout_s <= 0 or not running or now - self._checked_at < self.every_s:
            return []
        self._checked_at = now
        attempts = {t.attempts[-1].submission_id: t for t in running if t.attempts}
        pending = await gateway.pending_placements(list(attempts))
        out = []
        for sid, task in attempts.items():
            groups = pending.get(sid) or []
            if not groups:
                self._pending_since.pop(sid, None)
                continue
            since = self._pending_since.setdefault(sid, now)
            attempt = task.attempts[-1]
            if now - since >= self.timeout_s and attempt.placement_timed_out_at is None:
                out.append(AttemptPlacementTimedOut(
                    task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=sid,
                    placement_groups=sorted(groups)[:20], pending_s=now - since, timeout_s=self.timeout_s,
                    reached_at=now))
        for sid in self._pending_since.keys() - attempts.keys():  # ended meanwhile
            del self._pending_since[sid]
        return out
