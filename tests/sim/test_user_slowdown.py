"""Per-user slowdown in the simulator's metrics: each user's work as a whole (a task counts
by its run time), beside the mean of bounded slowdowns, which a few tasks of seconds that
waited hours decide."""

from __future__ import annotations

import pytest

from argus.sim.engine import SimResult, TaskOutcome
from argus.sim.metrics import measure


def _task(n: int, user: str, arrival: float, start: float, runtime: float) -> TaskOutcome:
    return TaskOutcome(task_id=f"t{n}", user=user, nnodes=1, gpus=1, arrival=arrival, runtime=runtime,
                       start=start, end=start + runtime)


def test_a_task_of_seconds_that_waited_hours_counts_by_its_run_time() -> None:
    # alice: two 10-hour runs, one waited an hour; bob: the same, and a 10 s task that waited a day.
    alice = [_task(0, "alice", 0, 3600, 36_000), _task(1, "alice", 0, 0, 36_000)]
    bob = [_task(2, "bob", 0, 3600, 36_000), _task(3, "bob", 0, 0, 36_000), _task(4, "bob", 0, 86_400, 10)]
    m = measure(SimResult(policy="p", outcomes=alice + bob, capacity_gpus=2, decisions=1))
    # bob's mean bounded slowdown is set by the 10 s task (8,641): the Jain index says one
    # user got everything
    assert m.jain_slowdown < 0.55
    # as a whole: alice (3,600 + 72,000) / 72,000 = 1.05; bob (90,000 + 72,010) / 72,010 = 2.25
    assert m.worst_user_slowdown == pytest.approx((90_000 + 72_010) / 72_010)
    assert m.jain_user_slowdown == pytest.approx((1.05 + 2.2498) ** 2 / (2 * (1.05 ** 2 + 2.2498 ** 2)), abs=1e-3)
    assert m.worst_user_mean_wait_s == pytest.approx(90_000 / 3)


def test_users_slowed_alike_score_one() -> None:
    tasks = [_task(k, user, 0, 600, 3600) for k, user in enumerate(["alice", "bob", "carol"])]
    m = measure(SimResult(policy="p", outcomes=tasks, capacity_gpus=3, decisions=1))
    assert m.jain_user_slowdown == pytest.approx(1.0) and m.worst_user_slowdown == pytest.approx(4200 / 3600)
