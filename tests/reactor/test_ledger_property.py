"""The gang promise as a property: whatever the arrivals, Ray's placement lag and the node
losses, what Argus has admitted never exceeds a node's capacity, and nothing is admitted
onto a node that has not been observed since it (re)joined.

Real pieces: the SQLite log with its projections, ``Commands`` to submit, the real
``Reactor`` turned on a virtual clock; Ray is ``FakeRay`` with a placement lag (a RUNNING
job's gang is placed only ``lag`` seconds after it started, as verl's placement groups
are), nodes that die (their jobs fail) and come back under a new id.

Checked after every turn:
- per node, the GPUs and CPUs of the attempts Argus holds live (intent recorded, not yet
  ended) on that node never exceed the node's totals;
- in all, the GPUs of those attempts never exceed the alive nodes' GPUs, while no node has
  been lost (this also holds for attempts that name no nodes, as logs before the ledger);
- no gang ever failed to be placed when Ray got to it (``FakeRay.placement_failures``:
  what verl's fail-fast or its endless wait would be);
- every admission names nodes Ray had reported after they joined, before the decision.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.events import AttemptStarting, NodeCapacity
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs.fake import DoesNotFit
from argus.service.commands import CommandError
from projections import TaskView
from tests.reactor.test_turn_on_fake import World, make_world

Arrival = tuple[int, int, int]  # (nnodes, GPUs per node, run time in steps)
Step = tuple[list[Arrival], float, int]  # arrivals, seconds to the next step, node event


def _steps() -> st.SearchStrategy[list[Step]]:
    arrival = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 6))
    # node event: 0 none, 1 lose the first node, 2 a lost node returns (new id)
    event = st.sampled_from([0, 0, 0, 0, 1, 2])
    return st.lists(st.tuples(st.lists(arrival, max_size=3), st.sampled_from([1.0, 2.0, 5.0, 20.0]), event),
                    min_size=3, max_size=14)


def _live(views: list[TaskView]) -> list[TaskView]:
    """Tasks whose latest attempt Argus holds: intent recorded and not ended."""
    return [v for v in views if v.latest_attempt is not None and not v.latest_attempt.ended
            and v.state in (TaskState.SUBMITTING, TaskState.SUBMITTED, TaskState.RUNNING, TaskState.CANCELING)]


async def _check(w: World, task_ids: list[str], driver_cpus: float, nodes_lost: bool) -> None:
    views = [await w.view(t) for t in task_ids]
    nodes = {n.node_id: n for n in w.ray.nodes}
    live = _live(views)
    total = sum(v.demand.total_gpus for v in live)
    # (Once a node is lost, a job admitted before, still PENDING in Ray, outlives it.)
    assert nodes_lost or total <= sum(n.total_gpus for n in nodes.values()), (
        f"{total} GPUs admitted on {sum(n.total_gpus for n in nodes.values())}: "
        + ", ".join(f"{v.task_id} {v.demand.total_gpus}" for v in live))
    per_node: dict[str, list[float]] = {}
    for v in live:
        for node_id in getattr(v.latest_attempt, "node_ids", ()):
            used = per_node.setdefault(node_id, [0.0, 0.0])
            used[0] += v.demand.n_gpus_per_node
            used[1] += v.demand.cpus_per_node + driver_cpus
    for node_id, (gpus, cpus) in per_node.items():
        node = nodes.get(node_id)
        if node is not None:  # a lost node's attempts end in the next turn that follows them
            assert gpus <= node.total_gpus and cpus <= node.total_cpus, f"{node_id}: {gpus} GPUs, {cpus} CPUs"
    # (A gang whose node died between its admission and its placement cannot be placed
    # either; that is the node's fault, not the ledger's, and nodes return under new ids.)
    failed = [sid for sid in w.ray.placement_failures
              if set(w.ray.job(sid).payload.metadata.get("argus_nodes", "").split(",")) <= set(nodes)]
    assert not failed, f"gangs Ray could not place on the nodes Argus admitted them onto: {failed}"


async def _admitted_onto_observed_nodes(w: World, task_ids: list[str], joined: dict[str, float]) -> None:
    reads = w.ray.capacity_reads
    for task_id in task_ids:
        for event in await w.events(task_id):
            if isinstance(event, AttemptStarting):
                for node_id in getattr(event, "node_ids", ()):
                    since = joined.get(node_id, float("-inf"))
                    assert any(since <= r <= event.decided_at for r in reads), (
                        f"{task_id} admitted onto {node_id} (joined {since}) with no observation since")


async def _scenario(steps: list[Step], lag: float, cpus: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = await make_world(Path(tmp), nodes=2, gpus=4, policy="reserve-backfill")
        w.ray.placement_lag_s = lag
        joined = dict(w.ray.joined_at)
        w.ray.set_nodes([NodeCapacity(node_id=n.node_id, ip=n.ip, total_gpus=4, free_gpus=4, total_cpus=cpus,
                                      free_cpus=cpus) for n in w.ray.nodes])
        lost: list[NodeCapacity] = []
        run_steps: dict[str, int] = {}
        ran: dict[str, int] = {}
        task_ids: list[str] = []
        rejoins = 0
        try:
            await w.turn()
            for arrivals, dt, node_event in steps:
                for nnodes, gpus, steps_to_run in arrivals:
                    try:
                        task_id = await w.submit(nnodes=nnodes, gpus=gpus)
                    except CommandError:  # larger than the cluster as it stands: refused at submit
                        continue
                    task_ids.append(task_id)
                    run_steps[task_id] = steps_to_run
                if node_event == 1 and w.ray.nodes:
                    lost.append(w.ray.nodes[0])
                    w.ray.lose_node(w.ray.nodes[0].node_id)
                elif node_event == 2 and lost:
                    rejoins += 1
                    old = lost.pop()
                    back = NodeCapacity(node_id=f"{old.node_id}-r{rejoins}", ip=old.ip, total_gpus=old.total_gpus,
                                        free_gpus=old.total_gpus, total_cpus=old.total_cpus, free_cpus=old.total_cpus)
                    w.ray.return_node(back)
                    joined[back.node_id] = w.clock.now
                await w.turn()
                await _check(w, task_ids, w.config.entrypoint_num_cpus, rejoins > 0 or bool(lost))
                for sid, job in list(w.ray.jobs.items()):
                    task_id = sid.rsplit("--", 1)[0]
                    if job.status is AttemptStatus.PENDING:
                        try:
                            w.ray.start(sid)
                        except DoesNotFit:  # with no lag, Ray places at once: it could not
                            w.ray.placement_failures.append(sid)
                    elif job.status is AttemptStatus.RUNNING and job.held:
                        ran[sid] = ran.get(sid, 0) + 1
                        if ran[sid] >= run_steps[task_id]:
                            w.ray.succeed(sid)
                w.clock.advance(dt)
                await w.turn()
                await _check(w, task_ids, w.config.entrypoint_num_cpus, rejoins > 0 or bool(lost))
            await _admitted_onto_observed_nodes(w, task_ids, joined)
        finally:
            await w.commands.close()
            await w.store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps(), lag=st.sampled_from([0.0, 3.0, 15.0, 40.0, 120.0]), cpus=st.sampled_from([16.0, 64.0]))
def test_admitted_gangs_never_exceed_a_node_and_never_land_on_an_unobserved_node(
        steps: list[Step], lag: float, cpus: float) -> None:
    asyncio.run(_scenario(steps, lag, cpus))
