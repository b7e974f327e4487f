"""plan_admissions: in-flight attempts hold their GPUs until Ray's snapshot shows them.

Pure (no Ray): tasks are folded from events with the one task fold, the capacity is a
snapshot as the gateway would observe it."""

from __future__ import annotations

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
