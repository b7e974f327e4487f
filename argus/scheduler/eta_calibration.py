"""How sure an ETA is: an interval around the point estimate, from how earlier ETAs turned
out (online split-conformal prediction).

The point ETA (``argus.scheduler.eta``) assumes nothing else arrives and every task runs
its expected time. Neither holds, and no model of them was good enough: forward runs with
run times drawn from each user's history (p10-p90 of the drawn starts) held the real start
for only 40 % of the sampled tasks on the trace (seed 0, reserve-backfill; docs/
scheduling.md), the draws far narrower than what arrivals and the policy's own choices do.
So the interval is built from the errors themselves: for each ETA given when a task began
to wait, once the task starts, the score

    s = log((actual wait + 60 s) / (predicted wait + 60 s))

is kept (the last ``window``, in all and by the size of the predicted wait: under 5
minutes, under an hour, longer). A new ETA's interval scales its predicted wait by the
scores' lower and upper quantiles at ``alpha / 2`` and ``1 - alpha / 2``: if the errors to
come are like the recent ones (exchangeable), the start falls inside with probability
1 - alpha, whatever the policy, the load or the trace (conformal prediction's guarantee).
They are not like them: as a queue grows, ETAs get worse, and the recent errors understate
the next ones (on the trace a fixed 80 % held 58-72 %). So ``alpha`` itself is adjusted as
each interval comes true or not (adaptive conformal inference, Gibbs & Candes 2021):
``alpha += gamma * (target - missed)``. Missing more often than 1 in 5 widens the intervals
until the misses are 1 in 5 again, over time, whatever the drift. A miss is counted as
soon as it is certain: when an interval's latest start passes with its task still waiting
(``overdue``), not hours later when the task starts. Hits are known at their start, which
comes before that time: counted only at the start, misses reached the adjustment later than
hits did, and the intervals widened too late. Until ``warmup`` scores
are known there is no interval. The 60 s keep the scores of waits near zero finite; a wait
below a minute is as good as none.

The coarse ETAs (past the forward run's horizon: GPUs alone, each task the first span free
for its whole run) are a different estimator with errors of their own: they are mostly an
upper bound, and the tasks start well before them. They are scored apart from the forward
run's, and until ``warmup`` of them have come true a coarse ETA's interval has no lower end
(it starts from now): borrowing the forward run's errors for them put the earliest start
after the real one for most of a long queue, all at once, since a long queue is when they
are given (docs/scheduling.md has the figures).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Container, Mapping
from typing import NamedTuple

import msgspec

__all__ = ["EtaCalibration", "StartRange"]


class StartRange(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """When a waiting task should start, ``coverage`` (80 %) sure: between ``earliest`` and
    ``latest``."""

    earliest: float
    latest: float


class _Scores:
    """The last ``window`` scores, the same in order (for quantiles), and the miss rate
    ``alpha`` their quantiles are taken at (adjusted as their intervals come true or not)."""

    def __init__(self, window: int, alpha: float) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.ordered: list[float] = []
        self.alpha = alpha

    def adjust(self, missed: bool, target: float, gamma: float) -> None:
        """Adaptive conformal inference's step: widen after a miss, narrow after a hit,
        so that over time the misses come at the ``target`` rate."""
        self.alpha = min(0.99, max(0.001, self.alpha + gamma * (target - missed)))

    def add(self, score: float) -> None:
        if len(self.recent) == self.recent.maxlen:
            self.ordered.pop(bisect.bisect_left(self.ordered, self.recent[0]))
        self.recent.append(score)
        bisect.insort(self.ordered, score)

    def bounds(self) -> tuple[float, float]:
        """The scores at ``alpha / 2`` and ``1 - alpha / 2``: finite-sample conformal ranks
        (the ceil((n+1)(1-alpha/2))-th smallest, and its mirror), so that they hold at least
        1 - alpha of exchangeable scores."""
        n, tail = len(self.ordered), self.alpha / 2
        return (self.ordered[max(0, math.floor((n + 1) * tail) - 1)],
                self.ordered[min(n - 1, math.ceil((n + 1) * (1 - tail)) - 1)])


# Predicted waits are scored apart by size (Mondrian conformal): an ETA of "in two minutes"
# and one of "in five hours" are not wrong alike (on the trace the log-errors' middle 80 %
# ran -0.6..0.6, -0.6..0.0 and -1.0..1.0 for these three). Coarse ETAs have classes of
# their own, after these.
_WAIT_EDGES = (300.0, 3600.0)


def _kind(predicted_wait: float, coarse: bool) -> int:
    """The class an ETA is scored in: its size, and whether it is coarse."""
    return bisect.bisect_right(_WAIT_EDGES, predicted_wait) + (len(_WAIT_EDGES) + 1) * coarse


class _Pending(NamedTuple):
    """An ETA given and not yet resolved."""

    given_at: float
    eta: float
    shown: StartRange | None  # the interval shown with it, if any
    coarse: bool  # past the forward run's horizon


class EtaCalibration:
    """Scores of resolved ETAs (in all, and by class: the size of the predicted wait, and
    whether the ETA is coarse) and the ETAs still pending (by task id). Not thread-safe: one
    owner (the API's ETA board, the simulator's sampler) drives it.

    The defaults were chosen on the trace (seeds 0-3, reserve-backfill and fairshare, every
    waiting task's first ETA fed in as the API does): ``window`` 1500 and ``gamma`` 0.01
    against 300 and 0.02, since the API scores every waiting task, five times as many as
    the simulator used to sample."""

    def __init__(self, coverage: float = 0.8, window: int = 1500, warmup: int = 30, gamma: float = 0.01) -> None:
        if not 0 < coverage < 1:
            raise ValueError("coverage: a fraction between 0 and 1")
        self.coverage, self.window, self.warmup, self.gamma = coverage, window, warmup, gamma
        self.pending: dict[str, _Pending] = {}  # by task id
        self._all = _Scores(window, 1 - coverage)
        self._by_kind: dict[int, _Scores] = {}
        self._deadlines: list[tuple[float, str]] = []  # (latest start shown, task id): a heap
        self._missed: set[str] = set()  # pending tasks whose interval's miss is already counted

    def given(self, task_id: str, now: float, eta: float, shown: StartRange | None = None,
              coarse: bool = False) -> None:
        """``task_id`` was told ``eta`` at ``now`` (``coarse``: past the forward run's
        horizon), with the interval ``shown``; only the first ETA of a wait counts."""
        if task_id not in self.pending:
            self.pending[task_id] = _Pending(now, eta, shown, coarse)
            if shown is not None:
                heapq.heappush(self._deadlines, (shown.latest, task_id))

    def give_line(self, now: float, starts: Mapping[str, float], ahead: Container[str]) -> dict[str, StartRange]:
        """The intervals of a line's ETAs (``starts``, by task id), each given as shown
        now (``ahead``: the tasks the forward run placed; the others' ETAs are coarse):
        what the API's board shows, and what the simulator's sampler judges."""
        ranges: dict[str, StartRange] = {}
        for task_id, at in starts.items():
            coarse = task_id not in ahead
            span = self.range(now, at, coarse)
            if span is not None:
                ranges[task_id] = span
            self.given(task_id, now, at, span, coarse)
        return ranges

    def overdue(self, now: float) -> None:
        """Count as missed, now, the intervals whose latest start has passed while their
        task still waits (it can only start later than shown)."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] < now:
            _, task_id = heapq.heappop(deadlines)
            found = self.pending.get(task_id)
            if found is not None and task_id not in self._missed:
                self._missed.add(task_id)
                self._scores_for(max(0.0, found.eta - found.given_at), found.coarse).adjust(
                    True, 1 - self.coverage, self.gamma)

    def started(self, task_id: str, at: float) -> None:
        """``task_id`` started at ``at``: its ETA's score is kept."""
        found = self.pending.pop(task_id, None)
        if found is None:
            return
        asked, eta, shown, coarse = found
        predicted = max(0.0, eta - asked)
        kind = self._by_kind.setdefault(_kind(predicted, coarse), _Scores(self.window, 1 - self.coverage))
        if shown is not None and task_id not in self._missed:  # did the interval hold?
            missed = not shown.earliest <= at <= shown.latest
            self._scores_for(predicted, coarse).adjust(missed, 1 - self.coverage, self.gamma)
        self._missed.discard(task_id)
        score = math.log((max(0.0, at - asked) + 60.0) / (predicted + 60.0))
        self._all.add(score)
        kind.add(score)

    def forget(self, task_id: str) -> None:
        """``task_id`` stopped waiting without starting (canceled): its ETA says nothing."""
        self.pending.pop(task_id, None)
        self._missed.discard(task_id)

    def _scores_for(self, predicted: float, coarse: bool) -> _Scores:
        """The scores an interval for a predicted wait this long is taken from, and whose
        miss rate its outcome adjusts: its class's once they are ``warmup`` (each class keeps
        its own miss rate), else all of them."""
        kind = self._by_kind.get(_kind(predicted, coarse))
        return kind if kind is not None and len(kind.ordered) >= self.warmup else self._all

    @property
    def scores(self) -> int:
        return len(self._all.ordered)

    def range(self, now: float, eta: float, coarse: bool = False) -> StartRange | None:
        """The interval around ``eta`` (given at ``now``; ``coarse``: past the forward
        run's horizon), from the scores of its class (of all, while those are fewer than
        ``warmup``; a coarse ETA then gets no lower end); None while fewer than ``warmup``
        ETAs have been resolved in all."""
        predicted = max(0.0, eta - now)
        scores = self._scores_for(predicted, coarse)
        if len(scores.ordered) < self.warmup:
            return None
        low, high = scores.bounds()
        wait = predicted + 60.0
        earliest = now if coarse and scores is self._all else max(now, now + wait * math.exp(low) - 60.0)
        return StartRange(earliest=earliest, latest=max(now, now + wait * math.exp(high) - 60.0))
