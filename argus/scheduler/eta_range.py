"""How sure an ETA is: an interval of start times, from forward runs with drawn run times.

A point ETA (``argus.scheduler.eta``) runs the policy forward once, every task taking its
expected run time. Run times are heavy-tailed and users do not repeat their work, so that
point was off by 50-110 % of the wait on the trace. An honest estimate says how sure it is:
the same forward run is made ``RUNS`` times, each with every task's run time drawn from the
history of like runs (a running task's given how long it has run, a limited task's at most
its limit; the caller's ``RunDraw``), and each waiting task's interval is the earliest and
the latest of its starts over the runs.

Nine runs and their extremes: if the draws are from the true run-time distributions, the
next start falls between the smallest and the largest of nine exchangeable samples with
probability 8/10 (order statistics), so [min, max] of 9 is an 80 % prediction interval, at
the cost of 9 forward runs (more runs and inner order statistics give the same 80 % with
more work). What the draws do not know (tasks yet to arrive that go ahead, preemptions,
wrong history) the simulator's coverage figure shows (``argus sim --eta``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import msgspec

from argus.scheduler.eta import DEFAULT_HORIZON, DEFAULT_LIMIT, estimate_starts
from argus.scheduler.model import Capacity, PolicyConfig, QueuedTask, RunningTask

__all__ = ["RUNS", "RunDraw", "StartRange", "start_ranges"]

RUNS = 9  # [min, max] of 9 draws: an 80 % interval (module docstring)

# (task id, seconds it has run so far, random source) -> its whole run time, drawn
RunDraw = Callable[[str, float, random.Random], float]


class StartRange(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """When a waiting task is expected to start, with 80 % confidence: between ``earliest``
    and ``latest`` (None: in at least one run it did not start within the forward run's
    reach, so no upper end is known)."""

    earliest: float
    latest: float | None


def start_ranges(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity, now: float,
                 config: PolicyConfig, draw: RunDraw, *, runs: int = RUNS, horizon: int = DEFAULT_HORIZON,
                 limit: int = DEFAULT_LIMIT, seed: int = 0) -> dict[str, StartRange]:
    """Each waiting task's interval (by task id; none for a task that started in no run).
    ``queue`` is in the order users are shown (as ``estimate_starts(in_line=True)``); each
    run draws from ``random.Random(seed, run)``, so the same inputs give the same answer."""
    starts: dict[str, list[float]] = {}
    for k in range(runs):
        rng = random.Random(f"{seed}:{k}")
        # What each task really takes in this run; the policy still decides on its estimates.
        actual = {r.task_id: _drawn_end(r, now, draw, rng) for r in running}
        actual.update((t.task_id, draw(t.task_id, 0.0, rng)) for t in queue[:limit])
        for task_id, at in estimate_starts(queue, running, capacity, now, config, horizon=horizon, limit=limit,
                                           in_line=True, actual=actual).items():
            starts.setdefault(task_id, []).append(at)
    return {task_id: StartRange(earliest=min(at), latest=max(at) if len(at) == runs else None)
            for task_id, at in starts.items()}


def _drawn_end(r: RunningTask, now: float, draw: RunDraw, rng: random.Random) -> float:
    """When running ``r`` ends in this run: its start plus a run time drawn given how long
    it has run (a task not seen running yet starts now)."""
    began = r.started_at if r.started_at is not None and r.started_at <= now else now
    return began + draw(r.task_id, now - began, rng)
