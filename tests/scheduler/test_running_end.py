"""A running task's expected end (``argus.scheduler.running_end``): its own progress
first, then its time limit, then its history or the default; an end from progress that
has passed is "any moment" (now), never in the past and never "as long again"."""

from __future__ import annotations

import pytest

from argus.config import SchedulerConfig
from argus.events import Demand, NodeCapacity
from argus.lifecycle import TaskState
from argus.scheduler import Capacity, PolicyConfig, QueuedTask, RunningTask, decide
from argus.scheduler.eta import estimate_starts
from argus.scheduler.fairshare import _committed
from argus.scheduler.inputs import policy_inputs
from argus.scheduler.model import Defer
from argus.scheduler.reserve import expected_end
from argus.scheduler.running_end import BY_PROGRESS, progress_end, running_end
from projections import TaskView
from argus.scheduler.history import RunKey, RuntimeHistory
from projections.task_view import AttemptView

NOW = 1_000_000.0
HOUR = 3600.0
DEMAND = Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=8)


def running(*, began: float = NOW - 600, step: int | None = None, step_at: float | None = None,
            total: int | None = None, step_time_s: float | None = None, time_limit_s: float | None = None,
            spec_total: int | None = None) -> TaskView:
    """A task running since ``began``, with the progress its driver reported (if any)."""
    attempt = AttemptView(attempt_no=1, submission_id="alice-run-a1", ray_status="RUNNING", decided_at=began,
                          started_at=began, step=step, step_at=step_at, first_step=1 if step else None,
                          total_steps=total, step_time_s=step_time_s)
    return TaskView(task_id="alice-run", user="alice", workload="ppo", kind="advanced", state=TaskState.RUNNING,
                    priority=0, max_attempts=1, demand=DEMAND, seq=1, created_at=began, updated_at=began,
                    stream_version=4, attempts=(attempt,), time_limit_s=time_limit_s, total_steps=spec_total)


def with_history(seconds: float) -> RuntimeHistory:
    history = RuntimeHistory()
    history.add(RunKey("alice", "ppo", 1, 8), seconds)
    return history


def test_known_progress_beats_history_and_the_default() -> None:
    # step 40 of 100 seen 30 s ago, 20 s a step: 60 steps x 20 s = 1,200 s after the step
    task = running(step=40, step_at=NOW - 30, total=100, step_time_s=20.0)
    for history in (RuntimeHistory(), with_history(5 * HOUR)):
        end = running_end(task, history, HOUR, began=NOW - 600)
        assert end.at == pytest.approx(NOW - 30 + 1200)
        assert end.by_progress and not end.limited
        assert end.source == BY_PROGRESS


def test_unknown_progress_falls_back_to_history_then_the_default() -> None:
    history = with_history(2 * HOUR)
    median = history.expected(RunKey("alice", "ppo", 1, 8), HOUR)[0]
    for partial in (running(), running(step=3, step_at=NOW, step_time_s=20.0),  # no total announced
                    running(total=100, step_time_s=20.0),  # no step printed yet
                    running(step=3, step_at=NOW, total=100)):  # no step time yet
        assert progress_end(partial) is None
        end = running_end(partial, history, HOUR, began=NOW - 600)
        assert end.at == pytest.approx(NOW - 600 + median) and not end.by_progress
        assert running_end(partial, RuntimeHistory(), HOUR, began=NOW - 600).at == NOW - 600 + HOUR


def test_the_specs_total_counts_when_the_trainer_announced_none() -> None:
    task = running(step=90, step_at=NOW, step_time_s=10.0, spec_total=100)
    assert progress_end(task) == NOW + 100


def test_a_time_limit_bounds_progress_and_stays_enforced() -> None:
    slow = running(began=NOW - 600, step=1, step_at=NOW, total=1000, step_time_s=60.0, time_limit_s=HOUR)
    end = running_end(slow, RuntimeHistory(), HOUR, began=NOW - 600)
    assert end.at == NOW - 600 + HOUR and end.limited and not end.by_progress  # its limit stops it first
    fast = running(began=NOW - 600, step=90, step_at=NOW, total=100, step_time_s=6.0, time_limit_s=HOUR)
    end = running_end(fast, RuntimeHistory(), HOUR, began=NOW - 600)
    assert end.at == NOW + 60 and end.by_progress and not end.limited  # ends well before its limit


def test_past_due_progress_is_any_moment_not_the_past() -> None:
    done = running(step=120, step_at=NOW - 300, total=100, step_time_s=20.0)  # past its total
    assert progress_end(done) == NOW - 300  # no steps left: never a negative remainder
    late = running(step=99, step_at=NOW - 300, total=100, step_time_s=20.0)  # due 280 s ago
    end = running_end(late, RuntimeHistory(), HOUR, began=NOW - 2 * HOUR)
    assert end.at < NOW
    assert expected_end(end.at, NOW - 2 * HOUR, NOW, HOUR, by_progress=True) == NOW  # any moment
    # an estimate from history, once past, is "as long again as it ran" (unchanged)
    assert expected_end(end.at, NOW - 2 * HOUR, NOW, HOUR) == NOW + 2 * HOUR


def test_an_ended_attempts_progress_is_not_used() -> None:
    task = running(step=40, step_at=NOW, total=100, step_time_s=20.0)
    ended = TaskView(**{**{f: getattr(task, f) for f in task.__struct_fields__},
                        "attempts": (AttemptView(**{**{f: getattr(task.attempts[0], f)
                                                       for f in AttemptView.__struct_fields__}, "ended_at": NOW}),)})
    assert progress_end(ended) is None


def _one_node(free: float) -> list[NodeCapacity]:
    return [NodeCapacity(node_id="n0", ip="10.0.0.1", total_gpus=8, free_gpus=free, total_cpus=64, free_cpus=64)]


def test_the_plan_and_the_eta_use_progress_and_any_moment() -> None:
    """The policy's entries carry the rule's end; the forward run starts the task behind it
    when that end comes (or at once, when it has passed)."""
    config = SchedulerConfig()
    waiting = QueuedTask(task_id="bob-wait", demand=DEMAND, seq=2, user="bob", estimate_s=HOUR)
    for step_at, expected in ((NOW - 30, NOW - 30 + 1200), (NOW - 3000, NOW)):
        task = running(step=40, step_at=step_at, total=100, step_time_s=20.0)
        _, entries, capacity = policy_inputs(waiting=[], active=[task], capacity=_one_node(0.0), now=NOW,
                                             config=config, runtimes=with_history(5 * HOUR))
        assert entries[0].by_progress and entries[0].expected_end == pytest.approx(step_at + 1200)
        assert capacity is not None
        starts = estimate_starts([waiting], entries, Capacity(nodes=capacity.nodes), NOW,
                                 PolicyConfig.from_scheduler(config))
        assert starts["bob-wait"] == pytest.approx(expected)


def test_a_reservation_waits_for_progress_and_not_past_it() -> None:
    """reserve-backfill's head reserves the node from the running task's progress end; once
    that has passed, from now (its steps are done), not from "as long again"."""
    config = PolicyConfig(policy="reserve-backfill", waits=True)
    head = QueuedTask(task_id="bob-wait", demand=DEMAND, seq=2, user="bob", estimate_s=HOUR)
    for end, reserved in ((NOW + 1200, NOW + 1200), (NOW - 300, NOW)):
        busy = RunningTask(task_id="alice-run", demand=DEMAND, user="alice", node_ids=("n0",), expected_end=end,
                           started_at=NOW - 5 * HOUR, by_progress=True)
        (defer,) = decide([head], [busy], Capacity(nodes=tuple(_one_node(0.0))), NOW, config)
        assert isinstance(defer, Defer) and defer.reserved_from == reserved


def test_fair_share_counts_no_time_left_past_a_progress_end() -> None:
    def left(by_progress: bool) -> float:
        r = RunningTask(task_id="alice-run", demand=DEMAND, user="alice", expected_end=NOW - 60,
                        started_at=NOW - HOUR, by_progress=by_progress)
        return _committed({}, [r], NOW, HOUR)["alice"]

    assert left(True) == 0.0
    assert left(False) == 8 * HOUR  # an estimate overrun: as long again as it ran
