"""How long tasks ran, per user, workload and gang shape: the history behind run-time
estimates (issue: reservations and ETAs need an expected end for every task).

Kept from the task fold: a task that becomes SUCCEEDED adds its last attempt's run time
(from when Ray reported it running, or accepted it when the job ended before it was seen
running, to its end). Failed and canceled runs say nothing about how long the work takes.

Two tables: the count and total (``runtime_stats``: the mean), and the count per
logarithmic bucket (``runtime_buckets``: the median, to within a bucket's width). The
estimate is the median: run times are heavy-tailed, so the mean overestimates most runs.
On the openb trace (``argus sim … --eta``) estimates from the median made the ETAs given
at arrival off by a median 24 % of the actual wait, against 127 % from the mean.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Sequence

import msgspec

from argus.lifecycle import TaskState
from projections.base import Change, EntityProjection
from projections.tasks import TASK_FOLD, TaskView

__all__ = ["RunKey", "RuntimeHistory", "RuntimeStatsProjection", "bucket_of", "read_runtime_history", "run_key",
           "run_seconds"]

_ADD = ("INSERT INTO runtime_stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, workload, nnodes, n_gpus_per_node) "
        "DO UPDATE SET n = n + excluded.n, total_s = total_s + excluded.total_s")
_ADD_BUCKET = ("INSERT INTO runtime_buckets VALUES (?, ?, ?, ?, ?, 1) "
               "ON CONFLICT (user, workload, nnodes, n_gpus_per_node, bucket) DO UPDATE SET n = n + 1")
# What a rebuild writes: the totals it summed, and counts per bucket to add.
_SET = ("INSERT INTO runtime_stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, workload, nnodes, n_gpus_per_node) "
        "DO UPDATE SET n = excluded.n, total_s = excluded.total_s")
_ADD_BUCKETS = ("INSERT INTO runtime_buckets VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (user, workload, nnodes, n_gpus_per_node, bucket) DO UPDATE SET n = n + excluded.n")
_USERS_KEPT = 4096  # runs whose user ``RuntimeHistory.users_since`` can name
_LOG_RATIO = math.log(2) / 4  # buckets 2^(1/4) wide: the median is known to within ~19 %


def bucket_of(seconds: float) -> int:
    """The bucket of a run time: b such that r^b <= seconds < r^(b+1) (under 1 s: 0)."""
    return int(math.log(max(1.0, seconds)) / _LOG_RATIO)


def _bucket_middle(bucket: int) -> float:
    return math.exp((bucket + 0.5) * _LOG_RATIO)


class RunKey(msgspec.Struct, frozen=True, array_like=True):
    """What makes two tasks' run times comparable: the same user, workload and gang."""

    user: str
    workload: str
    nnodes: int
    n_gpus_per_node: int


def run_key(task: TaskView) -> RunKey:
    return RunKey(task.user, task.workload, task.demand.nnodes, task.demand.n_gpus_per_node)


def run_seconds(task: TaskView) -> float | None:
    """How long a finished task's last attempt ran; None if it never did."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ended_at is None:
        return None
    began = attempt.started_at or attempt.submitted_at
    return None if began is None else max(0.0, attempt.ended_at - began)


class RuntimeHistory:
    """Run times of succeeded tasks by ``RunKey`` (count and total; count per bucket), and
    the estimate they give: a task's ``time_limit`` if it has one (it cannot run longer),
    else the median of the same user's runs of the same workload and shape, else
    ``default_s``."""

    def __init__(self, sums: dict[RunKey, tuple[int, float]] | None = None,
                 buckets: dict[RunKey, dict[int, int]] | None = None) -> None:
        self.sums: dict[RunKey, tuple[int, float]] = dict(sums or {})
        self.buckets: dict[RunKey, dict[int, int]] = {k: dict(v) for k, v in (buckets or {}).items()}
        # Each key's estimate, until its next run is added: a turn (and each instant of
        # ``argus sim``) asks for every waiting task's, and the median sorts the buckets.
        self._expected: dict[tuple[RunKey, float], tuple[float, str]] = {}
        self.version = 0  # runs added so far: an estimate made at the same version still holds
        # The user of each run added since version ``_users_from`` (the latest few thousand):
        # a run changes only its user's estimates (``users_since``).
        self._users: list[str] = []
        self._users_from = 0

    def add(self, key: RunKey, seconds: float) -> None:
        self.version += 1
        self._users.append(key.user)
        if len(self._users) > 2 * _USERS_KEPT:
            self._users_from += len(self._users) - _USERS_KEPT
            self._users = self._users[-_USERS_KEPT:]
        if self._expected:
            self._expected = {k: v for k, v in self._expected.items() if k[0] != key}
        n, total = self.sums.get(key, (0, 0.0))
        self.sums[key] = (n + 1, total + seconds)
        counts = self.buckets.setdefault(key, {})
        b = bucket_of(seconds)
        counts[b] = counts.get(b, 0) + 1

    def users_since(self, version: int) -> set[str] | None:
        """The users whose estimates runs added after ``version`` may have changed; None
        when that was too long ago to say (then any may have)."""
        if version < self._users_from:
            return None
        return set(self._users[version - self._users_from:])

    def median(self, key: RunKey) -> tuple[float, int] | None:
        """The median run time of ``key``'s runs (the middle of its bucket) and how many
        runs there were; None without any."""
        counts = self.buckets.get(key)
        if not counts:
            return None
        n = sum(counts.values())
        seen = 0
        for b in sorted(counts):
            seen += counts[b]
            if 2 * seen >= n:
                return _bucket_middle(b), n
        raise AssertionError("unreachable: the counts sum to n")

    def estimate(self, task: TaskView, default_s: float) -> tuple[float, str]:
        """Expected run time of ``task`` and where it comes from (for messages)."""
        if task.time_limit_s is not None:
            return task.time_limit_s, "its time_limit"
        return self.expected(run_key(task), default_s)

    def expected(self, key: RunKey, default_s: float) -> tuple[float, str]:
        """The median of ``key``'s earlier runs, else ``default_s``; and which it is."""
        known = self._expected.get((key, default_s))
        if known is not None:
            return known
        found = self.median(key)
        answer = (found[0], f"the median of {found[1]} earlier run(s)") if found is not None else (
            default_s, "the configured default")
        self._expected[(key, default_s)] = answer
        return answer


class RuntimeStatsProjection(EntityProjection[TaskView]):
    name = "runtime_stats"
    version = 2
    tables = ("runtime_stats", "runtime_buckets")
    fold = TASK_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[TaskView]]) -> None:
        rows = [row for _, before, after in changes
                if after is not None and after.state is TaskState.SUCCEEDED
                and (before is None or before.state is not TaskState.SUCCEEDED)
                and (row := _row(after)) is not None]
        if rows:
            _write(db, rows)

    def write_all(self, db: sqlite3.Connection, entities: dict[str, TaskView]) -> None:
        # A rebuild adds ~100,000 runs to a few dozen keys: summed here, one statement per
        # key rather than two upserts per run. Each total goes on from what the table holds
        # (an earlier part's) and adds the runs in the same order the upserts did, so the
        # floats come out bit for bit the same.
        sums: dict[tuple[object, ...], tuple[int, float]] = {
            tuple(key): (n, total) for *key, n, total in db.execute("SELECT * FROM runtime_stats")
        }
        buckets: Counter[tuple[object, ...]] = Counter()
        for task in entities.values():
            if task.state is not TaskState.SUCCEEDED or (seconds := run_seconds(task)) is None:
                continue
            k = run_key(task)
            key = (k.user, k.workload, k.nnodes, k.n_gpus_per_node)
            found = sums.get(key)
            sums[key] = (1, seconds) if found is None else (found[0] + 1, found[1] + seconds)
            buckets[(*key, bucket_of(seconds))] += 1
        db.executemany(_SET, [(*key, n, total) for key, (n, total) in sums.items()])
        db.executemany(_ADD_BUCKETS, [(*key, n) for key, n in buckets.items()])


def _write(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.executemany(_ADD, rows)
    db.executemany(_ADD_BUCKET, [(*row[:4], bucket_of(row[5])) for row in rows])  # type: ignore[arg-type]


def _row(task: TaskView) -> tuple[object, ...] | None:
    seconds = run_seconds(task)
    if seconds is None:
        return None
    k = run_key(task)
    return (k.user, k.workload, k.nnodes, k.n_gpus_per_node, 1, seconds)


def read_runtime_history(db: sqlite3.Connection) -> RuntimeHistory:
    buckets: dict[RunKey, dict[int, int]] = {}
    for user, workload, nnodes, gpus, bucket, n in db.execute("SELECT * FROM runtime_buckets"):
        buckets.setdefault(RunKey(user, workload, nnodes, gpus), {})[bucket] = n
    return RuntimeHistory({
        RunKey(user, workload, nnodes, gpus): (n, total)
        for user, workload, nnodes, gpus, n, total in db.execute("SELECT * FROM runtime_stats")
    }, buckets)
