"""GPU use per user (projections.usage): attempts' GPU-seconds by hour, decayed when read."""

from __future__ import annotations

import math

import pytest

from projections.tasks import AttemptView
from projections.usage import HOUR, UsageLedger, attempt_usage
from tests.events import factories as f

HALF_LIFE = 24 * 3600.0


def test_decay_halves_usage_every_half_life_and_adds_up_in_any_order() -> None:
    ledger = UsageLedger(HALF_LIFE)
    ledger.add("alice", 100, 3600.0)  # one GPU-hour in hour 100
    ledger.add("alice", 76, 3600.0)  # one, a day earlier, added after
    now = (100 + 0.5) * HOUR
    assert ledger.at(now)["alice"] == pytest.approx(3600.0 * (1 + 0.5))
    assert ledger.at(now + HALF_LIFE)["alice"] == pytest.approx(3600.0 * 1.5 / 2)
    live = ledger.at(now, [("bob", 100, 7200.0)])
    assert live["bob"] == pytest.approx(7200.0) and live["alice"] == pytest.approx(5400.0)


def test_an_attempt_is_split_over_the_hours_it_ran() -> None:
    start = 1000 * HOUR - 900  # 15 min before an hour boundary, for 30 min, on 4 GPUs
    view = f.folded_submission("t", 1, gpus=4)
    attempt = ran(start, start + 1800)
    assert attempt_usage(view, attempt) == [(999, 4 * 900.0), (1000, 4 * 900.0)]
    assert sum(s for _, s in attempt_usage(view, attempt)) == pytest.approx(4 * 1800.0)
    assert math.isclose(sum(s for _, s in attempt_usage(view, ran(start, None), start + 60)),
                        240.0)


def ran(started: float, ended: float | None) -> AttemptView:
    return AttemptView(attempt_no=1, submission_id="t--a01", ray_status="RUNNING", decided_at=started,
                       started_at=started, ended_at=ended)


def test_a_late_event_that_moves_an_ended_attempt_is_counted_as_a_rebuild_counts_it() -> None:
    """Found by the inline == rebuild property: an attempt ended before Ray's running report
    came (no start known: nothing to count), then the report and a second end moved it.
    The live rows must add up to what the final view gives."""
    from argus.events import EventMeta, Recorded
    from projections.tasks import evolve_task
    from projections.usage import ended_usage

    events = [f.submitted("t"), f.starting("t", 1, f.T0 + 1), f.ended("t", 1, "SUCCEEDED", at=f.T0 + 2),
              f.running("t", 1, f.T0 + 4), f.ended("t", 1, "SUCCEEDED", at=f.T0 + 21)]
    view, live = None, {}
    for version, event in enumerate(events, start=1):
        before = view
        view = evolve_task(view, Recorded(position=version, stream="task-t", version=version, type=type(event).__name__,
                                          event=event, meta=EventMeta(), owner="alice", recorded_at=f.T0 + version))
        for user, hour, gpu_s in ended_usage(before, view):
            live[(user, hour)] = live.get((user, hour), 0.0) + gpu_s
    assert view is not None
    final = {("alice", hour): gpu_s for a in view.attempts for hour, gpu_s in attempt_usage(view, a)}
    assert final and live == final


def test_running_usage_in_closed_form_is_the_hourly_sum() -> None:
    """``with_running`` (what a plan asks) weighs a running attempt's hours as ``at`` weighs
    ``live_usage``'s rows, one per hour: the same to 1e-9, for spans from seconds to weeks."""
    import random

    from argus.events import Demand
    from projections.tasks import AttemptView, TaskView
    from projections.usage import UsageLedger, live_usage

    rng = random.Random(3)
    for half_life in (3600.0, 7 * 24 * 3600.0):
        ledger = UsageLedger(half_life)
        ledger.add("bob", 10, 500.0)
        tasks = []
        for i in range(40):
            began = rng.uniform(0, 30 * 86400)
            attempt = AttemptView(attempt_no=1, submission_id=f"t{i}--a01", ray_status="RUNNING", decided_at=began,
                                  started_at=began)
            tasks.append(TaskView(task_id=f"t{i}", user=rng.choice(["alice", "bob"]), workload="ppo", kind="basic",
                                  state="RUNNING", priority=0, max_attempts=1, seq=i,
                                  demand=Demand(nnodes=1, n_gpus_per_node=rng.randint(1, 8), cpus_per_node=1),
                                  attempts=(attempt,), created_at=began, updated_at=began, stream_version=3))
        for now in (31 * 86400.0, 31 * 86400.0 + 600.0, 31 * 86400.0 + 1234.5, 45 * 86400.0):  # (a span reused)
            closed = ledger.with_running(now, tasks)
            summed = ledger.at(now, live_usage(tasks, now))
            assert closed.keys() == summed.keys()
            for user in closed:
                assert abs(closed[user] - summed[user]) <= 1e-9 * max(1.0, summed[user]), (user, closed, summed)


def test_running_usage_kept_as_tasks_come_and_go() -> None:
    """The running sums are kept up to date as tasks start, change and end, within an hour
    and across hours, with attempts that begin "now": each plan's answer is still the
    hourly sum (to 1e-9), and a user with nothing running is not there at all."""
    import random

    from argus.events import Demand
    from projections.tasks import AttemptView, TaskView
    from projections.usage import UsageLedger, live_usage

    def view(i: int, began: float, user: str, gpus: int) -> TaskView:
        attempt = AttemptView(attempt_no=1, submission_id=f"t{i}--a01", ray_status="RUNNING", decided_at=began,
                              started_at=began)
        return TaskView(task_id=f"t{i}", user=user, workload="ppo", kind="basic", state="RUNNING", priority=0,
                        max_attempts=1, seq=i, demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1),
                        attempts=(attempt,), created_at=began, updated_at=began, stream_version=3)

    for seed in range(5):
        rng = random.Random(seed)
        ledger = UsageLedger(rng.choice([1800.0, 86400.0]))
        now, running, made = 5 * 86400.0, {}, 0
        for _ in range(300):
            now += rng.choice([0.0, 1.0, 37.0, 900.0, 4000.0])
            for task_id in [t for t in running if rng.random() < 0.1]:
                del running[task_id]
            for _ in range(rng.randint(0, 3)):
                made += 1
                began = now if rng.random() < 0.5 else now - rng.uniform(0, 5 * 86400)
                running[f"t{made}"] = view(made, began, rng.choice(["alice", "bob", "carol"]), rng.randint(1, 8))
            if running and rng.random() < 0.2:  # a new view of the same attempt
                old = rng.choice(list(running.values()))
                running[old.task_id] = view(int(old.task_id[1:]), old.attempts[0].started_at or 0.0, old.user,
                                            old.demand.n_gpus_per_node)
            tasks = list(running.values())
            closed = ledger.with_running(now, tasks)
            summed = ledger.at(now, live_usage(tasks, now))
            assert closed.keys() == summed.keys(), (seed, now)
            for user in closed:
                assert abs(closed[user] - summed[user]) <= 1e-9 * max(1.0, summed[user]), (seed, user, closed, summed)
