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
        self._running = _Running()

    def _factor(self, dt: float) -> float:
        return math.exp2(-dt / self.half_life_s)

    def add(self, user: str, hour: int, gpu_s: float) -> None:
        at = (hour + 0.5) * HOUR  # an hour's seconds count as used at its middle
        total, ref = self._sums.get(user, (0.0, at))
        if at >= ref:
            self._sums[user] = (total * self._factor(at - ref) + gpu_s, at)
        else:
            self._sums[user] = (total + gpu_s * self._factor(ref - at), ref)

    def with_running(self, now: float, tasks: Sequence[TaskView]) -> dict[str, float]:
        """``at(now, live_usage(tasks, now))`` in closed form. A running attempt's GPU-seconds
        before this hour weigh a fixed amount decayed since the hour began, and those of this
        hour weigh its middle's factor; summed per user, the running tasks are a few sums
        (``_Running``), kept up to date as tasks come, change and go, so a plan over
        hundreds of running tasks (a reactor or a simulation asks every plan) costs a few
        operations per user."""
        out = self.at(now)
        self._running.update(tasks)
        hour = int(now // HOUR)
        start = hour * HOUR
        weight = self._factor(now - min(now, (hour + 0.5) * HOUR))  # this hour's seconds
        decayed = self._factor(now - start)  # the earlier hours', since this hour began
        for user, (before, gpus_before, gpus_now, began_now, n) in self._running.sums(hour, now, self).items():
            if n:
                out[user] = out.get(user, 0.0) + (before * decayed + (now - start) * weight * gpus_before
                                                  + weight * (now * gpus_now - began_now))
        return out

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


class _Running:
    """The running attempts' part of ``UsageLedger.with_running``, per user, for one hour:
    [GPU-seconds before the hour (weighed as at its start), GPUs of attempts begun before
    it, GPUs of attempts begun in it, the sum of those GPUs times their start, how many].
    Views are diffed by identity (immutable: a new one is a change); an attempt that has
    not begun by ``now`` waits in ``_pending`` (it adds nothing until it has). Made again
    each hour: the weights change, and no rounding is carried over."""

    def __init__(self) -> None:
        self._views: dict[int, TaskView] = {}  # id -> view (kept, so that ids stay theirs)
        self._live: dict[str, tuple[str, float, float]] = {}  # task id -> (user, GPUs, began)
        self._pending: set[str] = set()  # task ids in ``_live`` not counted yet
        self._before: dict[str, float] = {}  # task id -> its GPU-seconds before the hour, as counted
        self._hour: int | None = None
        self._sums: dict[str, list[float]] = {}

    def update(self, tasks: Sequence[TaskView]) -> None:
        """The running attempts are those of ``tasks`` now."""
        views = dict(zip(map(id, tasks), tasks))
        for gone in self._views.keys() - views.keys():
            self._drop(self._views[gone].task_id)
        for new in views.keys() - self._views.keys():
            task = views[new]
            self._drop(task.task_id)
            a = task.latest_attempt
            began = _began(a) if a is not None and not a.ended else None
            if began is not None:
                self._live[task.task_id] = (task.user, float(task.demand.total_gpus), began)
                self._pending.add(task.task_id)
        self._views = views

    def sums(self, hour: int, now: float, ledger: UsageLedger) -> dict[str, list[float]]:
        """The sums for ``hour``, of every attempt begun before ``now``."""
        if hour != self._hour:
            self._hour, self._sums, self._before = hour, {}, {}
            self._pending = set(self._live)
        for task_id in [t for t in self._pending if self._live[t][2] < now]:
            self._pending.discard(task_id)
            self._count(task_id, 1.0, ledger)
        return self._sums

    def _drop(self, task_id: str) -> None:
        if task_id not in self._live:
            return
        if task_id in self._pending:
            self._pending.discard(task_id)
        else:
            self._count(task_id, -1.0, None)
        del self._live[task_id]

    def _count(self, task_id: str, sign: float, ledger: UsageLedger | None) -> None:
        user, gpus, began = self._live[task_id]
        assert self._hour is not None
        sums = self._sums.setdefault(user, [0.0, 0.0, 0.0, 0.0, 0.0])
        first = int(began // HOUR)
        if first < self._hour:
            if ledger is not None:
                before = self._before[task_id] = ledger._hours_before(began, first, self._hour)
            else:
                before = self._before.pop(task_id)
            sums[0] += sign * gpus * before
            sums[1] += sign * gpus
        else:
            sums[2] += sign * gpus
            sums[3] += sign * gpus * began
        sums[4] += sign
        if sums[4] == 0:  # none of the user's left: exactly nothing
            sums[:] = [0.0, 0.0, 0.0, 0.0, 0.0]


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
