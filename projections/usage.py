"""GPU use per user and hour: what the ``fairshare`` policy decays into a user's usage.

Kept from the task fold: when an attempt ends, the GPUs of its gang times the seconds it
ran (from when Ray reported it running, else accepted it, to its end) are added to the
hours they fell in. Attempts still running are added by their readers, up to now.
Decay is applied when read (``UsageLedger``), so changing the half-life needs no rebuild.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence

from projections.base import Change, EntityProjection
from projections.tasks import TASK_FOLD, AttemptView, TaskView

__all__ = ["UsageLedger", "UsageProjection", "attempt_usage", "ended_usage", "live_usage", "read_usage"]

HOUR = 3600.0
_ADD = ("INSERT INTO gpu_usage VALUES (?, ?, ?) ON CONFLICT (user, hour) "
        "DO UPDATE SET gpu_s = gpu_s + excluded.gpu_s")


def _began(a: AttemptView) -> float | None:
    return a.started_at or a.submitted_at


def attempt_usage(task: TaskView, a: AttemptView, until: float | None = None) -> list[tuple[int, float]]:
    """(hour, GPU-seconds) of one attempt, up to its end (or ``until``, while it runs)."""
    began, end = _began(a), a.ended_at if a.ended_at is not None else until
    if began is None or end is None or end <= began:
        return []
    gpus = task.demand.total_gpus
    out: list[tuple[int, float]] = []
    t = began
    while t < end:
        hour = int(t // HOUR)
        upto = min(end, (hour + 1) * HOUR)
        out.append((hour, gpus * (upto - t)))
        t = upto
    return out


def live_usage(tasks: Iterable[TaskView], now: float) -> Iterable[tuple[str, int, float]]:
    """(user, hour, GPU-seconds) of the attempts running now, up to ``now``."""
    for task in tasks:
        a = task.latest_attempt
        if a is not None and not a.ended:
            for hour, seconds in attempt_usage(task, a, now):
                yield task.user, hour, seconds


class UsageLedger:
    """Each user's GPU-seconds decayed by half every ``half_life_s``: one running sum per
    user, kept at a reference time (decay is a factor, so it need not be summed again)."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = max(1.0, half_life_s)
        self._sums: dict[str, tuple[float, float]] = {}  # user -> (sum at ref, ref)
        self._past: dict[tuple[float, int], float] = {}  # (began, hour) -> _hours_before

    def _factor(self, dt: float) -> float:
        return math.exp2(-dt / self.half_life_s)

    def add(self, user: str, hour: int, gpu_s: float) -> None:
        at = (hour + 0.5) * HOUR  # an hour's seconds count as used at its middle
        total, ref = self._sums.get(user, (0.0, at))
        if at >= ref:
            self._sums[user] = (total * self._factor(at - ref) + gpu_s, at)
        else:
            self._sums[user] = (total + gpu_s * self._factor(ref - at), ref)

    def with_running(self, now: float, tasks: Iterable[TaskView]) -> dict[str, float]:
        """``at(now, live_usage(tasks, now))`` in closed form: a running attempt's full
        hours weigh a geometric series, so a task that ran for weeks costs what one that
        ran an hour does (a reactor or a simulation asks this every plan)."""
        out = self.at(now)
        for task in tasks:
            a = task.latest_attempt
            began = _began(a) if a is not None and not a.ended else None
            if began is not None and now > began:
                out[task.user] = out.get(task.user, 0.0) + task.demand.total_gpus * self._decayed_span(began, now)
        return out

    def _decayed_span(self, began: float, now: float) -> float:
        """GPU-seconds per GPU of [began, now), each hour's part weighed at its middle (or
        now, for the hour under way), as ``at`` weighs ``live_usage``'s rows."""
        first, last = int(began // HOUR), int(now // HOUR)
        start = last * HOUR
        if first == last:
            return (now - began) * self._factor(now - min(now, (first + 0.5) * HOUR))
        # The whole hours before this one weigh as they did at its start, decayed since:
        # worked out once per task and hour (a plan asks for every running task's).
        key = (began, last)
        past = self._past.get(key)
        if past is None:
            if len(self._past) > 4096:
                self._past = {}
            past = self._past[key] = self._hours_before(began, first, last)
        total = past * self._factor(now - start)
        if now > start:
            total += (now - start) * self._factor(now - min(now, (last + 0.5) * HOUR))
        return total

    def _hours_before(self, began: float, first: int, last: int) -> float:
        """[began, last * HOUR) per GPU, each hour weighed at its middle as seen at its end."""
        start = last * HOUR
        total = ((first + 1) * HOUR - began) * self._factor(start - (first + 0.5) * HOUR)
        full = last - first - 1  # whole hours between, the newest weighing most
        if full > 0:
            ratio = self._factor(HOUR)
            newest = HOUR * self._factor(start - (last - 0.5) * HOUR)
            total += newest * (full if ratio == 1.0 else (1.0 - ratio**full) / (1.0 - ratio))
        return total

    def at(self, now: float, live: Iterable[tuple[str, int, float]] = ()) -> dict[str, float]:
        """Every user's decayed usage at ``now``, with ``live`` (running attempts) added."""
        out = {user: total * self._factor(now - ref) if now >= ref else total
               for user, (total, ref) in self._sums.items()}
        for user, hour, gpu_s in live:
            at = min(now, (hour + 0.5) * HOUR)
            out[user] = out.get(user, 0.0) + gpu_s * self._factor(now - at)
        return out


class UsageProjection(EntityProjection[TaskView]):
    name = "gpu_usage"
    version = 2  # v2: an ended attempt moved by a late event counts its final span
    tables = ("gpu_usage",)
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        rows = [row for _, before, after in changes if after is not None
                for row in ended_usage(before, after)]
        if rows:
            db.executemany(_ADD, rows)
            if any(gpu_s < 0 for _, _, gpu_s in rows):  # a correction may empty an hour: as a rebuild, no row
                db.executemany("DELETE FROM gpu_usage WHERE user = ? AND hour = ? AND abs(gpu_s) < 1e-6",
                               [(user, hour) for user, hour, gpu_s in rows if gpu_s < 0])

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        db.executemany(_ADD, (row for v in entities.values() for a in v.attempts if a.ended
                              for row in _rows(v, a)))


def _rows(task: TaskView, a: AttemptView) -> list[tuple[str, int, float]]:
    return [(task.user, hour, seconds) for hour, seconds in attempt_usage(task, a)]


def ended_usage(before: TaskView | None, after: TaskView) -> list[tuple[str, int, float]]:
    """(user, hour, GPU-seconds) to add for the attempts that ended between ``before`` and
    ``after``, and for ended attempts whose span changed: a late event (Ray's running
    report after its end, a second end) moves it, and a rebuild counts only the final span,
    so the earlier one is taken back (negative GPU-seconds)."""
    was = {a.attempt_no: a for a in before.attempts} if before is not None else {}
    rows: list[tuple[str, int, float]] = []
    for a in after.attempts:
        if not a.ended:
            continue
        old = was.get(a.attempt_no)
        if old is not None and old.ended:
            if (_began(old), old.ended_at) == (_began(a), a.ended_at):
                continue
            rows += [(user, hour, -gpu_s) for user, hour, gpu_s in _rows(after, old)]
        rows += _rows(after, a)
    return rows


def read_usage(db: sqlite3.Connection, half_life_s: float, *, now: float | None = None) -> UsageLedger:
    """The ledger of every ended attempt (with ``now``: hours more than 20 half-lives
    before it left out, as they weigh less than a millionth)."""
    ledger = UsageLedger(half_life_s)
    first = -1 if now is None else int((now - 20 * half_life_s) // HOUR)
    for user, hour, gpu_s in db.execute("SELECT user, hour, gpu_s FROM gpu_usage WHERE hour >= ?", (first,)):
        ledger.add(user, hour, gpu_s)
    return ledger
