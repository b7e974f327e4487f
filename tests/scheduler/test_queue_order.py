"""One queue order: what users are shown (``/queue`` a page at a time, ``queue_position``,
the WebUI and ``replay at`` all read ``argus.views.queue``) is the order the reactor's
admission considers tasks in, for every policy, on random queues.

The shown order is read page by page (random page sizes, cursors passed back as a client
would) from a real, migrated SQLite queue table written by the queue projection; the
admission order is the reactor's own ``plan_admissions`` over the same tasks, handed to
it shuffled.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.config import SchedulerConfig
from argus.events import NodeCapacity
from argus.scheduler.core import plan_admissions
from argus.scheduler import POLICIES
from argus.store import migrate
from argus.views.queue import FairView, QueueCursor, queue_page, queue_position, read_queue
from projections import QueueProjection, TaskView, TasksProjection
from projections.cluster import ClusterProjection, ClusterView
from tests.events import factories as f

NOW = 1_000.0
# Policies that let a task pass a head that does not fit (priority too: it runs
# reserve-backfill's pass, in priority order).
BACKFILLING = {"fifo-backfill", "reserve-backfill", "fairshare", "priority"}


def _views(items: list[tuple[int, int, int]]) -> list[TaskView]:
    """Tasks from (priority, GPUs, arrival) triples, folded from real TaskSubmitted events."""
    return [f.folded_submission(f"t{i:02d}", seq, user=f"u{i % 3}", priority=priority, gpus=gpus, at=NOW)
            for i, (priority, gpus, seq) in enumerate(items)]


def _nodes(free_gpus: list[int]) -> list[NodeCapacity]:
    return [NodeCapacity(node_id=f"n{i}", ip="10.0.0.1", total_gpus=8, free_gpus=g, total_cpus=64, free_cpus=64)
            for i, g in enumerate(free_gpus)]


def _shown(views: list[TaskView], policy: str, page_size: int = 3, *, preemption: bool = False,
           free_gpus: list[int] | None = None) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.sqlite3"
        migrate(str(path))
        db = sqlite3.connect(path)
        try:
            QueueProjection().write_all(db, {v.task_id: v for v in views})
            TasksProjection().write_all(db, {v.task_id: v for v in views})  # fairshare reads the tasks
            if free_gpus is not None:  # fairshare with preemption reads the cluster's size
                cluster = ClusterView(reachable=True, nodes=tuple(_nodes(free_gpus)), observed_at=NOW)
                ClusterProjection().write_all(db, {"cluster": cluster})
            fair = FairView(SchedulerConfig(policy=policy, max_running_tasks=1000, preemption=preemption), NOW)
            queue, cursor = [], None
            while True:
                page = queue_page(db, policy, limit=page_size, after=cursor, fair=fair)
                assert page.total == len(views)
                queue += page.items
                if page.next_cursor is None:
                    break
                cursor = QueueCursor.decode(page.next_cursor)
            assert queue == read_queue(db, policy, fair)
            positions = {e.task_id: queue_position(db, policy, e.task_id or "", fair) for e in queue}
        finally:
            db.close()
    assert [e.position for e in queue] == list(range(1, len(queue) + 1))
    assert all(positions[e.task_id] == e.position for e in queue)
    return [e.task_id for e in queue if e.task_id]


def _admitted(views: list[TaskView], policy: str, free_gpus: list[int], seed: int, *,
              preemption: bool = False) -> list[str]:
    shuffled = list(views)
    random.Random(seed).shuffle(shuffled)
    plan = plan_admissions(waiting=shuffled, active=[], capacity=_nodes(free_gpus), now=NOW,
                           config=SchedulerConfig(policy=policy, max_running_tasks=1000, preemption=preemption))
    return [v.task_id for v in plan.admitted]


tasks = st.lists(st.tuples(st.integers(-2, 2), st.integers(1, 4)), max_size=20).flatmap(
    lambda items: st.permutations(range(1, len(items) + 1)).map(
        lambda seqs: [(p, g, s) for (p, g), s in zip(items, seqs)]))


@settings(max_examples=60, deadline=None)
@given(tasks, st.sampled_from(sorted(POLICIES)), st.integers(0, 2**16), st.integers(1, 7))
def test_everyone_admitted_in_the_order_shown(items, policy, seed, page_size):
    """With room for all, the reactor admits every task, in exactly the order shown."""
    views = _views(items)
    assert _admitted(views, policy, [8] * 20, seed) == _shown(views, policy, page_size)


@settings(max_examples=60, deadline=None)
@given(tasks, st.sampled_from(sorted(POLICIES)), st.lists(st.integers(0, 8), max_size=4), st.integers(0, 2**16))
def test_admissions_are_the_head_of_the_queue_shown(items, policy, free_gpus, seed):
    """With little room, who starts is the head of the queue as shown, never a task shown
    behind one that waits; a backfilling policy may pass a head that does not fit, but
    still admits in the order shown."""
    views = _views(items)
    shown = _shown(views, policy)
    admitted = _admitted(views, policy, free_gpus, seed)
    if policy in BACKFILLING:
        assert admitted == [t for t in shown if t in set(admitted)]
    else:
        assert admitted == shown[: len(admitted)]


@settings(max_examples=60, deadline=None)
@given(tasks, st.lists(st.integers(0, 8), min_size=1, max_size=4), st.integers(0, 2**16))
def test_fairshare_with_preemption_admits_in_the_order_shown(items, free_gpus, seed):
    """With preemption, fair share puts work within its user's fair share of the cluster
    first: the queue shown reads the cluster's size to say so too."""
    views = _views(items)
    shown = _shown(views, "fairshare", preemption=True, free_gpus=free_gpus)
    admitted = _admitted(views, "fairshare", free_gpus, seed, preemption=True)
    assert admitted == [t for t in shown if t in set(admitted)]
    everyone = _admitted(views, "fairshare", [8] * 20, seed, preemption=True)
    assert everyone == _shown(views, "fairshare", preemption=True, free_gpus=[8] * 20)


def test_priority_shown_first_only_where_the_policy_says_so():
    """The bug this order fixed: under ``fifo`` a priority-10 task that came last is shown
    last (it is admitted last), not first."""
    views = _views([(0, 1, 1), (10, 1, 2)])
    assert _shown(views, "fifo") == ["t00", "t01"] == _admitted(views, "fifo", [8], 0)
    assert _shown(views, "priority") == ["t01", "t00"] == _admitted(views, "priority", [8], 0)


def test_the_configuration_accepts_exactly_the_registered_policies():
    """``v2.scheduler.policy`` is checked when the configuration loads (a Literal): it must
    name exactly the policies the scheduler registers, each with its queue order."""
    import typing

    from argus.scheduler import ORDERS

    configurable = set(typing.get_args(typing.get_type_hints(SchedulerConfig)["policy"]))
    assert configurable == set(POLICIES) and set(POLICIES) <= set(ORDERS)
