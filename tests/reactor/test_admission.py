"""plan_admissions: in-flight attempts hold their GPUs until Ray's snapshot shows them.

Pure (no Ray): tasks are folded from events with the one task fold, the capacity is a
snapshot as the gateway would observe it."""

from __future__ import annotations

import msgspec

from argus.config import SchedulerConfig
from argus.events import EventMeta, NodeCapacity, Recorded
from argus.events.catalog import EventBase
from argus.reactor.admission import SETTLE_S, plan_admissions
from projections import TaskView
from projections.tasks import evolve_task
from tests.events import factories as f

NOW = f.T0 + 1_000


def fold(events: list[EventBase]) -> TaskView:
    view = None
    for version, event in enumerate(events, start=1):
        view = evolve_task(view, Recorded(position=version, stream="s", version=version, type=type(event).__name__,
                                          event=event, meta=EventMeta(), owner=None, recorded_at=f.T0))
    assert view is not None
    return view


def nodes(*free_gpus: float) -> list[NodeCapacity]:
    return [NodeCapacity(node_id=f"n{i}", ip="10.0.0.1", total_gpus=8, free_gpus=g, total_cpus=64, free_cpus=64)
            for i, g in enumerate(free_gpus)]


def plan(active: list[TaskView], free: list[NodeCapacity]) -> list[str]:
    waiting = [fold([f.submitted("w")])]  # needs 1 node × 4 GPUs
    result = plan_admissions(waiting=waiting, active=active, capacity=free, now=NOW, config=SchedulerConfig())
    return [t.task_id for t in result.admitted]


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
