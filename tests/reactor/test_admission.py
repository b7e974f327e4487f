"""plan_admissions: the ledger holds every admitted gang on its nodes until it has ended
and Ray has been observed since; a node admits only once it has settled since it joined.

Pure (no Ray): tasks are folded from events with the one task fold, the capacity is a
snapshot as the gateway would observe it."""

from __future__ import annotations

import msgspec

from argus.config import SchedulerConfig
from argus.events import Demand, EventMeta, NodeCapacity, Recorded
from argus.events.catalog import EventBase
from argus.scheduler.core import Observed, plan_admissions
from argus.scheduler.inputs import policy_inputs
from argus.scheduler.ledger import Commitment
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


def test_an_admitted_gang_holds_its_node_whatever_ray_shows() -> None:
    """The repro of issue 34: Ray says all 8 GPUs free (r's placement group is not placed
    yet, a minute after it started): r's 4 still count, so only one more 4-GPU task fits."""
    for r in (fold([f.submitted("r"), f.starting("r", nodes=("n0",))]),
              fold([f.submitted("r"), f.starting("r", nodes=("n0",)), f.attempt_submitted("r"),
                    f.running("r", at=NOW - 600)])):
        waiting = [fold([f.submitted("w1")]), fold([f.submitted("w2")])]
        result = plan_admissions(waiting=waiting, active=[r], capacity=nodes(8), now=NOW, config=SchedulerConfig())
        assert [t.task_id for t in result.admitted] == ["w1"]
        assert result.placed == {"w1": ("n0",)}


def test_rays_count_only_lowers_what_is_free() -> None:
    assert plan([], nodes(2)) == []  # something Argus did not start holds 6 of the 8
    r = fold([f.submitted("r"), f.starting("r", nodes=("n0",))])
    assert plan([r], nodes(8)) == ["w"]  # 8 - 4 committed = 4: w fits
    assert plan([r], nodes(3)) == []  # and Ray's 3 is lower still


def test_a_gang_without_recorded_nodes_is_held_on_the_freest_nodes() -> None:
    """Attempts recorded before the ledger name no nodes: held where Ray would put them."""
    r = fold([f.submitted("r"), f.starting("r")])
    assert plan([r], nodes(8, 8)) == ["w"]
    two = fold([f.submitted("r2"), f.starting("r2")])
    assert plan([r, two], nodes(8, 8)) == ["w"]  # one on each node: 4 left on each
    assert plan([r, two, fold([f.submitted("r3"), f.starting("r3")])], nodes(8, 8)) == ["w"]


def test_an_ended_attempt_is_held_until_ray_is_observed_after_its_end() -> None:
    held = Commitment(task_id="r", demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=1), node_ids=("n0",),
                      ended_at=NOW - 1)
    waiting = [fold([f.submitted("w")])]
    kept = plan_admissions(waiting=waiting, active=[], capacity=nodes(8), now=NOW, config=SchedulerConfig(),
                           observed=Observed(releasing=[held]))
    assert kept.admitted == []
    freed = plan_admissions(waiting=waiting, active=[], capacity=nodes(8), now=NOW, config=SchedulerConfig(),
                            observed=Observed(releasing=[]))
    assert [t.task_id for t in freed.admitted] == ["w"]


def test_a_node_admits_nothing_until_it_has_settled_since_it_joined() -> None:
    config = SchedulerConfig(node_settle_s=2.0)
    waiting = [fold([f.submitted("w")])]

    def admitted(since: dict[str, float]) -> list[str]:
        result = plan_admissions(waiting=waiting, active=[], capacity=nodes(8, 8), now=NOW, config=config,
                                 observed=Observed(seen_since=since))
        return [node for t in result.admitted for node in result.placed[t.task_id]]

    assert admitted({}) == []  # just after an outage: no node seen since
    assert admitted({"n0": NOW, "n1": NOW - 1}) == []  # seen, not settled
    assert admitted({"n0": NOW, "n1": NOW - 2}) == ["n1"]  # only the settled one
    result = plan_admissions(waiting=waiting, active=[], capacity=nodes(8, 8), now=NOW, config=config,
                             observed=Observed(seen_since={"n0": NOW, "n1": NOW - 1}))
    assert result.expires_at == NOW + 1  # planned again when n1 settles


def test_the_drivers_cpu_is_counted_once() -> None:
    """The ledger holds a gang's CPUs with its driver's; Ray's count, once it has placed the
    job, holds the same: a node whose CPUs match two tasks exactly takes the second."""
    driver = 1.0
    running = fold([f.submitted("r"), f.starting("r", nodes=("n0",)), f.attempt_submitted("r"),
                    msgspec.structs.replace(f.running("r", at=NOW - 1), seen_at=NOW - 1)])
    need = running.demand.cpus_per_node + driver  # one task's CPUs with its driver
    free = [NodeCapacity(node_id="n0", ip="10.0.0.1", total_gpus=8, free_gpus=4,
                         total_cpus=2 * need, free_cpus=need)]
    result = plan_admissions(waiting=[fold([f.submitted("w")])], active=[running], capacity=free, now=NOW,
                             config=SchedulerConfig(), driver_cpus=driver)
    assert [t.task_id for t in result.admitted] == ["w"]
