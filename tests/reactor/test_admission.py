"""plan_admissions: in-flight attempts hold their GPUs until Ray's snapshot shows them.

Pure (no Ray): tasks are folded from events with the one task fold, the capacity is a
snapshot as the gateway would observe it."""

from __future__ import annotations

import msgspec

from argus.config import SchedulerConfig
from argus.events import EventMeta, NodeCapacity, Recorded
from argus.events.catalog import EventBase
from argus.reactor.admission import SETTLE_S, plan_admissions, policy_inputs
from projections import TaskView
from projections.tasks import evolve_task
from tests.events import factories as f

NOW = f.T0 + 1_000


def fold(events: list[EventBase], times: list[float] | None = None) -> TaskView:
    view = None
    for version, event in enumerate(events, start=1):
        at = times[version - 1] if times else f.T0
        view = evolve_task(view, Recorded(position=version, stream="s", version=version, type=type(event).__name__,
                                          event=event, meta=EventMeta(), owner=None, recorded_at=at))
    assert view is not None
    return view


def nodes(*free_gpus: float) -> list[NodeCapacity]:
    return [NodeCapacity(node_id=f"n{i}", ip="10.0.0.1", total_gpus=8, free_gpus=g, total_cpus=64, free_cpus=64)
            for i, g in enumerate(free_gpus)]


def plan(active: list[TaskView], free: list[NodeCapacity]) -> list[str]:
    waiting = [fold([f.submitted("w")])]  # needs 1 node × 4 GPUs
    result = plan_admissions(waiting=waiting, active=active, capacity=free, now=NOW, config=SchedulerConfig())
    return [t.task_id for t in result.admitted]


def test_room_is_made_for_a_task_since_its_first_preempting_deferral_of_a_wait() -> None:
    """The policy hands out rooms in the order they were made: the log says since when."""
    events = [f.submitted("w"), f.deferred("w"), f.deferred("w", "preempting"), f.deferred("w", "preempting")]
    times = [f.T0, f.T0 + 1, f.T0 + 2, f.T0 + 5]
    assert fold(events, times).preempting_since == f.T0 + 2
    assert fold(events + [f.deferred("w")], times + [f.T0 + 6]).preempting_since is None
    again = fold(events + [f.deferred("w"), f.deferred("w", "preempting")], times + [f.T0 + 6, f.T0 + 9])
    assert again.preempting_since == f.T0 + 9
    queue, _, _ = policy_inputs(waiting=[again], active=[], capacity=None, now=NOW, config=SchedulerConfig())
    assert queue[0].preempting_since == f.T0 + 9


def test_a_submitted_attempt_holds_its_gpus_before_ray_shows_them() -> None:
    in_flight = fold([f.submitted("r"), f.starting("r"), f.attempt_submitted("r")])
    assert plan([in_flight], nodes(4)) == []  # Ray still shows 4 free: they are r's
    assert plan([in_flight], nodes(8)) == ["w"]


def test_a_settled_attempt_is_counted_by_ray_alone() -> None:
    just_started = fold([f.submitted("r"), f.starting("r"), f.attempt_submitted("r"), f.running("r", at=NOW - 1)])
    settled = fold([f.submitted("r"), f.starting("r"), f.attempt_submitted("r"), f.running("r", at=NOW - SETTLE_S - 1)])
    assert plan([just_started], nodes(4)) == []
    assert plan([settled], nodes(4)) == ["w"]


def test_settling_counts_from_when_the_reactor_saw_it_running_not_from_rays_start_time() -> None:
    """Ray's start_time is when it accepted the job; the job may take many seconds to run
    and reserve its GPUs: it stays in flight for SETTLE_S after it was seen running."""
    accepted_long_ago = f.running("r", at=NOW - SETTLE_S - 30)
    seen_just_now = msgspec.structs.replace(accepted_long_ago, seen_at=NOW - 1)
    view = fold([f.submitted("r"), f.starting("r"), f.attempt_submitted("r"), seen_just_now])
    assert plan([view], nodes(4)) == []  # still r's 4 GPUs, though Ray shows them free


def test_a_running_in_flight_attempt_does_not_take_its_drivers_cpu_twice() -> None:
    """Once Ray runs the job, its driver's CPU is in Ray's counts: the reactor must take
    off only the rest, or a node whose CPUs match its GPUs exactly idles a GPU."""
    driver = 1.0
    running = fold([f.submitted("r"), f.starting("r"), f.attempt_submitted("r"),
                    msgspec.structs.replace(f.running("r", at=NOW - 1), seen_at=NOW - 1)])
    need = running.demand.cpus_per_node + driver  # one task's CPUs with its driver
    # One node, two tasks' worth of GPUs and CPUs; Ray already counts r's driver.
    free = [NodeCapacity(node_id="n0", ip="10.0.0.1", total_gpus=8, free_gpus=8,
                         total_cpus=2 * need, free_cpus=2 * need - driver)]
    result = plan_admissions(waiting=[fold([f.submitted("w")])], active=[running], capacity=free, now=NOW,
                             config=SchedulerConfig(), driver_cpus=driver)
    assert [t.task_id for t in result.admitted] == ["w"]
