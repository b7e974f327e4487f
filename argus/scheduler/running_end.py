"""When a running task is expected to end: the one rule behind every expected end and
expected start. The reactor's plan (reservations, backfill, fair share's committed use),
the API's ETAs (the task page, the task list, the queue, ``argus show``/``ls``/``queue``)
and the simulator all build their running entries in ``argus.scheduler.inputs``, which
asks this module, so none of them can disagree.

The sources, best first:

1. Its progress, where its driver reported it (``AttemptProgressed``): the steps left times
   the median of its recent step times, from when its last step was seen. This comes first
   because it is this run's own measure, taken while it runs; the history is other runs'
   (another config, dataset or node count) and the default is a guess. A resumed attempt
   counts only the steps it still has to go.
2. Its time limit (it cannot run longer): also the end when its progress says later.
3. The median of the same user's earlier runs of the workload and shape, else
   ``default_runtime_s`` (``RuntimeHistory.estimate``).

An end from progress that has passed means "any moment" (its steps are done, or nearly:
it is saving, shutting down, or a step ran slow); the clock turns that into now
(``argus.scheduler.reserve.expected_end``), not into "as long again as it has run" as an
estimate from history is treated.
"""

from __future__ import annotations

import msgspec

from argus.scheduler.task import TaskFacts
from argus.scheduler.history import RuntimeHistory

__all__ = ["RunningEnd", "progress_end", "running_end"]

BY_PROGRESS = "its progress (steps left x its recent step time)"


class RunningEnd(msgspec.Struct, frozen=True, kw_only=True):
    """When a running task is expected to end (``at``, possibly already past) and why.
    ``limited``: ``at`` is its enforced time limit (it ends by then at the latest);
    ``by_progress``: ``at`` comes from its own progress (once past: any moment)."""

    at: float
    source: str
    limited: bool = False
    by_progress: bool = False


def progress_end(task: TaskFacts) -> float | None:
    """When the running attempt's steps are done, by its own progress: the time its last
    step was seen plus (total steps - that step) x its recent step time; None where any
    of them is unknown (no step printed yet, no total announced, no step time)."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ended:
        return None
    total = attempt.total_steps or task.total_steps  # the trainer's own word first
    step, seen, each = attempt.step, attempt.step_at, attempt.step_time_s
    if total is None or step is None or seen is None or each is None or each <= 0.0:
        return None
    return seen + max(0, total - step) * each  # (past its total: no steps left, never negative)


def running_end(task: TaskFacts, history: RuntimeHistory, default_s: float, began: float) -> RunningEnd:
    """``task``'s expected end (module docstring): its progress, else its time limit, else
    its history or ``default_s``, counted from ``began`` (its attempt's start)."""
    by_progress = progress_end(task)
    limit = None if task.time_limit_s is None else began + task.time_limit_s
    if by_progress is not None and (limit is None or by_progress < limit):
        return RunningEnd(at=by_progress, source=BY_PROGRESS, by_progress=True)
    if limit is not None:
        return RunningEnd(at=limit, source="its time_limit", limited=True)
    estimate, source = history.estimate(task, default_s)
    return RunningEnd(at=began + estimate, source=source)
