"""``stats``: what happened in a time window, per user and overall.

Everything is counted by when it happened (the facts' own times, see ``waits.event_time``):
tasks submitted in the window, tasks that ended in it (by outcome), waits that ended in it
(TaskSubmitted or RetryScheduled → AttemptStarting; p50/p95, nearest rank), GPU-hours of
attempt run time inside the window ((end − start) × demand.total_gpus, clipped to it), and
retries decided in it by failure kind; and the goodput (``projections.goodput``) of the tasks
that ended in it, each over its whole life, with, when the log ends in the window, the tasks
unfinished there (up to its last event). One pass over the log; memory holds only
the tasks not yet finished (each folded with ``evolve_task``) and the wait samples.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from pathlib import Path

import msgspec

from argus.events import AttemptEnded, AttemptStarting, Recorded, RetryScheduled, TaskSubmitted
from argus.replay.source import open_log
from argus.replay.waits import event_time
from argus.store import iter_log
from projections.goodput import Goodput, task_goodput
from projections.tasks import TASK_EVENT_TYPES, AttemptView, TaskView, evolve_task

__all__ = ["Stats", "UserStats", "percentile", "stats"]

_OUTCOMES = {"TaskSucceeded": "SUCCEEDED", "TaskIncomplete": "INCOMPLETE", "TaskFailed": "FAILED",
             "TaskCanceled": "CANCELED"}


class UserStats(msgspec.Struct, kw_only=True):
    user: str  # "*" for everyone
    submitted: int = 0
    outcomes: dict[str, int] = {}
    waits: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    gpu_hours: float = 0.0
    retries: dict[str, int] = {}
    goodput_tasks: int = 0  # the tasks ``goodput`` sums
    goodput: Goodput = msgspec.field(default_factory=Goodput)


class Stats(msgspec.Struct, kw_only=True):
    since: float
    until: float
    overall: UserStats
    users: list[UserStats]


def percentile(samples: list[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..100) of ``samples``; None when empty.

    The rank ⌈p/100 × n⌉ is computed exactly: in floats 7 / 100 × 100 is 7.000000000000001,
    whose ceiling picks the 8th sample instead of the 7th."""
    if not samples:
        return None
    ordered = sorted(samples)
    # A float ``p`` stands for the decimal it prints as (99.9, not the binary fraction
    # 99.90000000000000568…); Fraction(str(p)) is that decimal exactly.
    exact_p = Fraction(str(p)) if isinstance(p, float) else Fraction(p)
    rank = max(1, math.ceil(exact_p * len(ordered) / 100))
    return ordered[rank - 1]


class _Acc:
    def __init__(self) -> None:
        self.submitted = 0
        self.outcomes: Counter[str] = Counter()
        self.waits: list[float] = []
        self.gpu_seconds = 0.0
        self.retries: Counter[str] = Counter()
        self.goodput_tasks = 0
        self.goodput = Goodput()

    def add_goodput(self, g: Goodput) -> None:
        self.goodput_tasks += 1
        self.goodput = self.goodput.plus(g)

    def result(self, user: str) -> UserStats:
        return UserStats(
            user=user, submitted=self.submitted, outcomes=dict(sorted(self.outcomes.items())),
            waits=len(self.waits), wait_p50_s=percentile(self.waits, 50),
            wait_p95_s=percentile(self.waits, 95), gpu_hours=self.gpu_seconds / 3600,
            retries=dict(sorted(self.retries.items())), goodput_tasks=self.goodput_tasks, goodput=self.goodput,
        )


def stats(db_path: str | Path, since: float, until: float) -> Stats:
    """Per-user and overall statistics of the window [since, until)."""
    window = _Window(since, until)
    with open_log(db_path) as source:
        for rec in iter_log(source.conn, types=TASK_EVENT_TYPES):
            window.take(rec)
    window.close()
    accs = window.accs
    overall = _Acc()
    for each in accs.values():
        overall.submitted += each.submitted
        overall.outcomes.update(each.outcomes)
        overall.waits.extend(each.waits)
        overall.gpu_seconds += each.gpu_seconds
        overall.retries.update(each.retries)
        overall.goodput_tasks += each.goodput_tasks
        overall.goodput = overall.goodput.plus(each.goodput)
    users = [accs[u].result(u) for u in sorted(accs)]
    users = [u for u in users if u.submitted or u.outcomes or u.waits or u.gpu_hours or u.retries or u.goodput_tasks]
    return Stats(since=since, until=until, overall=overall.result("*"), users=users)


class _Window:
    """``stats``' one pass: each user's counts of the window, and the tasks not yet finished."""

    def __init__(self, since: float, until: float) -> None:
        self.since, self.until = since, until
        self.accs: dict[str, _Acc] = {}
        self.tasks: dict[str, TaskView] = {}
        self.wait_start: dict[str, float] = {}
        self.last_time = since
        self.log_end: float | None = None  # the log's last event's time

    def inside(self, t: float) -> bool:
        return self.since <= t < self.until

    def acc(self, user: str) -> _Acc:
        return self.accs.setdefault(user, _Acc())

    def gpu_seconds(self, view: TaskView, a: AttemptView, end: float) -> float:
        if a.started_at is None:
            return 0.0  # never ran: verl held no GPUs
        overlap = min(end, self.until) - max(a.started_at, self.since)
        return max(0.0, overlap) * view.demand.total_gpus

    def take(self, rec: Recorded) -> None:
        """Count one of the log's task events."""
        e = rec.event
        task_id: str = e.task_id  # type: ignore[attr-defined]
        t = event_time(rec)
        self.last_time = max(self.last_time, t)
        self.log_end = t if self.log_end is None else max(self.log_end, t)
        view = evolve_task(self.tasks.get(task_id), rec)
        if view.state.is_terminal():
            self.tasks.pop(task_id, None)
        else:
            self.tasks[task_id] = view
        acc = self.acc(view.user)
        if isinstance(e, TaskSubmitted):
            self.wait_start[task_id] = t
            if self.inside(t):
                acc.submitted += 1
        elif isinstance(e, AttemptStarting):
            start = self.wait_start.pop(task_id, None)
            if start is not None and self.inside(t):
                acc.waits.append(t - start)
        elif isinstance(e, AttemptEnded):
            attempt = next(a for a in view.attempts if a.attempt_no == e.attempt_no)
            acc.gpu_seconds += self.gpu_seconds(view, attempt, e.ended_at)
        elif isinstance(e, RetryScheduled):
            self.wait_start[task_id] = t
            if self.inside(t):
                acc.retries[e.failure_kind.value] += 1
        outcome = _OUTCOMES.get(rec.type)
        if outcome is not None:
            self.wait_start.pop(task_id, None)
            if self.inside(t):
                acc.outcomes[outcome] += 1
                acc.add_goodput(task_goodput(view, t))

    def close(self) -> None:
        """Attempts still running at the end of the log count up to then (or to ``until``)."""
        for view in self.tasks.values():
            for a in view.attempts:
                if a.ended_at is None:
                    self.acc(view.user).gpu_seconds += self.gpu_seconds(view, a, self.last_time)
            if self.log_end is not None and self.inside(self.log_end):  # the log ends in the window
                self.acc(view.user).add_goodput(task_goodput(view, self.log_end))
