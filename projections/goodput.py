"""Goodput: how much of the GPU time a task held went into training, and where the rest went.

Pure functions of a ``TaskView`` (and ``now``, for an attempt still running). Every figure
but ``waiting_s`` is in GPU-seconds: the gang's GPUs (``demand.total_gpus``) times seconds.

An attempt holds its gang from the scheduler's decision (``AttemptStarting``: from then on
the ledger keeps its GPUs from everyone else) until it ends (or ``now``). That span is cut
at four points, each clamped into it and never before the one before:

    decided ─ placement ─ running ─ start-up ─ first step ─ stepping ─ last step ─ tail ─ end

- placement: decided until Ray reported it running (the reactor saw it RUNNING);
- start-up: running until its first reported step (so the first step's own time, with its
  warm-up, counts as start-up);
- stepping: first until last reported step. Where the attempt ended past its last report
  (reports are rate-bounded), the last step is moved on by ``step_time_s`` per step;
- tail: last step until the end: ``stalled`` when the stall watchdog stopped it, else
  ``other`` (a final save, shutting down, a preemption's grace period, or the step in
  progress of a running attempt).

Stepping is ``productive``, except the steps an attempt trained after its last checkpoint
when it ended without finishing and the task goes on: the next attempt resumes from that
checkpoint and trains them again, so they are ``lost`` (from the checkpoint's save time,
``checkpointed_at``, to the last step; all of its stepping when it saved none). An attempt
that ended the task as FAILED is ``failed`` whole: nothing it did is kept.

So for each task ``held = productive + placement + startup + stalled + lost + failed +
other``, and ``ratio = productive / held``. ``waiting_s`` is wall time, not GPU time: from
submission (or the previous attempt's end) until each attempt was decided, and while the
task waits now.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from argus.events import FailureKind
from argus.lifecycle import TaskState
from projections.task_view import AttemptView, TaskView

__all__ = ["CATEGORIES", "Goodput", "UserGoodput", "attempt_goodput", "by_user", "task_goodput", "total"]

# The parts of ``held``, in the order they are shown.
CATEGORIES = ("productive", "placement", "startup", "stalled", "lost", "failed", "other")


class Goodput(msgspec.Struct, frozen=True, kw_only=True):
    """GPU-seconds held and where they went (``waiting_s``: wall seconds, not GPU time)."""

    held: float = 0.0
    productive: float = 0.0
    placement: float = 0.0
    startup: float = 0.0
    stalled: float = 0.0
    lost: float = 0.0
    failed: float = 0.0
    other: float = 0.0
    waiting_s: float = 0.0
    lost_steps: int = 0  # steps trained again after restarts and preemptions
    ratio: float | None = None  # productive / held (None: nothing held)

    def plus(self, other: Goodput) -> Goodput:
        """The sum of two breakdowns, with its ratio."""
        fields = {name: getattr(self, name) + getattr(other, name)
                  for name in ("held", *CATEGORIES, "waiting_s", "lost_steps")}
        return _with_ratio(Goodput(**fields))


class UserGoodput(msgspec.Struct, frozen=True, kw_only=True):
    """One user's tasks' goodput, summed (``user`` "*": the whole cluster)."""

    user: str
    tasks: int
    goodput: Goodput


def _with_ratio(g: Goodput) -> Goodput:
    return msgspec.structs.replace(g, ratio=g.productive / g.held if g.held > 0 else None)


def _clamp(t: float | None, low: float, high: float) -> float | None:
    return None if t is None else min(max(t, low), high)


def _last_step_at(a: AttemptView) -> float | None:
    """When its last step came: its last report's, moved on by ``step_time_s`` per step
    when its end says it got further than it last reported."""
    if a.step_at is None:
        return None
    if a.ended_at_step is not None and a.step is not None and a.step_time_s and a.ended_at_step > a.step:
        return a.step_at + (a.ended_at_step - a.step) * a.step_time_s
    return a.step_at


def _first_step_at(a: AttemptView) -> float | None:
    """When its first step came. Reports are rate-bounded, so the first one recorded may
    name a step well past the first (steps of 0.3 s, one report a second): where its step
    time is known, it is also estimated back from its last report by ``step_time_s`` per
    step, and the earlier of the two is taken."""
    if a.step_at is None:
        return a.first_step_at
    seen = a.first_step_at if a.first_step_at is not None else a.step_at
    if a.first_step is not None and a.step is not None and a.step_time_s:
        return min(seen, a.step_at - (a.step - a.first_step) * a.step_time_s)
    return seen


def _lost_from(a: AttemptView, first: float, last: float) -> tuple[float, int]:
    """Seconds and steps of stepping its resume trains again: those after its checkpoint."""
    last_step = a.ended_at_step if a.ended_at_step is not None else a.step
    if a.checkpoint_step is not None and a.checkpointed_at is not None:
        saved = min(max(a.checkpointed_at, first), last)
        steps = max(0, (last_step or 0) - a.checkpoint_step)
        return last - saved, steps
    begun = (a.first_step or 1) - 1  # no checkpoint of its own: every step it trained goes again
    return last - first, max(0, (last_step or 0) - begun)


def attempt_goodput(a: AttemptView, gpus: int, now: float, *, restarted: bool, failed: bool) -> Goodput:
    """One attempt's held time and where it went. ``restarted``: it ended unfinished and
    the task goes on (its steps past its checkpoint are trained again); ``failed``: it
    ended the task as FAILED."""
    start = a.decided_at
    end = max(start, a.ended_at if a.ended_at is not None else now)
    held = end - start
    if failed:
        return _with_ratio(Goodput(held=gpus * held, failed=gpus * held))
    running = _clamp(a.running_seen_at or a.started_at, start, end)
    first = _clamp(_first_step_at(a), running if running is not None else start, end)
    last = _clamp(_last_step_at(a), first if first is not None else start, end)
    if running is None:  # never ran: all of it waiting for Ray to place it
        return _with_ratio(Goodput(held=gpus * held, placement=gpus * held))
    if first is None or last is None:  # ran, never stepped
        return _with_ratio(Goodput(held=gpus * held, placement=gpus * (running - start),
                                   startup=gpus * (end - running)))
    lost, lost_steps = _lost_from(a, first, last) if restarted else (0.0, 0)
    stalled = a.stalled_at is not None or a.failure_kind is FailureKind.STALLED
    tail = end - last
    return _with_ratio(Goodput(
        held=gpus * held, placement=gpus * (running - start), startup=gpus * (first - running),
        productive=gpus * (last - first - lost), lost=gpus * lost, lost_steps=lost_steps,
        stalled=gpus * tail if stalled else 0.0, other=0.0 if stalled else gpus * tail,
    ))


def _waiting(view: TaskView, now: float) -> float:
    """Wall seconds it waited: before each attempt was decided, and since its last attempt
    while it waits now (or until it was canceled waiting)."""
    waited, since = 0.0, view.created_at
    for a in view.attempts:
        waited += max(0.0, a.decided_at - since)
        since = a.ended_at if a.ended_at is not None else a.decided_at
    latest = view.latest_attempt
    if latest is not None and not latest.ended:
        return waited
    if not view.state.is_terminal():  # waits now: for room, or for its retry
        waited += max(0.0, now - since)
    elif view.state is TaskState.CANCELED:  # it waited until it was canceled
        waited += max(0.0, view.updated_at - since)
    return waited


def task_goodput(view: TaskView, now: float) -> Goodput:
    """The task's goodput: its attempts' summed, and its waiting. A finished task's does
    not depend on ``now`` (an attempt left without an end counts to the task's last event)."""
    if view.state.is_terminal():
        now = view.updated_at
    gpus = view.demand.total_gpus
    goes_on = not view.state.is_terminal()
    out = Goodput()
    for i, a in enumerate(view.attempts):
        newest = i == len(view.attempts) - 1
        unfinished = a.ended and a.ray_status != "SUCCEEDED"
        restarted = unfinished and (not newest or goes_on)
        failed = newest and view.state is TaskState.FAILED
        out = out.plus(attempt_goodput(a, gpus, now, restarted=restarted, failed=failed))
    return out.plus(Goodput(waiting_s=_waiting(view, now)))


def total(goodputs: Iterable[Goodput]) -> Goodput:
    """The sum of many breakdowns."""
    out = Goodput()
    for g in goodputs:
        out = out.plus(g)
    return out


def by_user(tasks: Iterable[tuple[str, Goodput]]) -> list[UserGoodput]:
    """(user, task goodput) pairs summed per user, by user id, then the cluster's ("*")."""
    sums: dict[str, tuple[int, Goodput]] = {}
    for user, g in tasks:
        n, acc = sums.get(user, (0, Goodput()))
        sums[user] = (n + 1, acc.plus(g))
    rows = [UserGoodput(user=u, tasks=n, goodput=g) for u, (n, g) in sorted(sums.items())]
    cluster = UserGoodput(user="*", tasks=sum(r.tasks for r in rows), goodput=total(r.goodput for r in rows))
    return [*rows, cluster]
