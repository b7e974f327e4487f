"""Time limits and cancels are decided once (``argus.reactor.turn``), so the simulator
honours them as the reactor does: on a hand-made trace where one task runs into its time
limit, one is canceled while it runs, one while it waits, and one is preempted, the
simulator's own reactor (in-memory log) and the real ``Reactor`` (SQLite log, projections)
record the same events for every task, in the same order, with the same contents.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from argus.events import Demand, Recorded
from argus.rayjobs.fake import FakeRay
from argus.config import SchedulerConfig
from argus.sim.engine import Simulation
from argus.sim.settings import SimSettings, sim_config
from argus.sim.trace import SimNode, SimTask, Trace
from argus.sim.turns import SimReactor
from projections import open_store
from tests.sim.test_sim_core_vs_reactor import RealReactor

EIGHT = Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=8.0)
TRACE = Trace(nodes=[SimNode(node_id="node-a", gpus=8, cpus=64), SimNode(node_id="node-b", gpus=8, cpus=64)], tasks=[
    SimTask(task_id="limited", user="alice", arrival=0, runtime=1000, demand=EIGHT, time_limit=300),
    SimTask(task_id="canceled-running", user="bob", arrival=0, runtime=1000, demand=EIGHT, cancel_at=200),
    SimTask(task_id="canceled-waiting", user="carol", arrival=10, runtime=100, demand=EIGHT, cancel_at=50),
    SimTask(task_id="preempted", user="bob", arrival=20, runtime=500, demand=EIGHT, preemptible=True),
    SimTask(task_id="within-limit", user="carol", arrival=30, runtime=200, demand=EIGHT, time_limit=400),
    SimTask(task_id="urgent", user="alice", arrival=400, runtime=100, demand=EIGHT, priority=10),
])
# What differs by design: the payload (the real reactor builds a real Ray submission) and
# wait reasons (the simulator records only those that order the queue).
_SKIPPED_TYPES = {"TaskDeferred"}


def _per_task(records: list[Recorded]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for rec in records:
        if not rec.stream.startswith("task-") or rec.type in _SKIPPED_TYPES:
            continue
        fields = msgspec.to_builtins(rec.event)
        fields.pop("payload", None)
        fields.pop("node_ips", None)
        out.setdefault(rec.stream, []).append(fields)
    return out


async def _simulated(sched: SchedulerConfig) -> tuple[list[Recorded], SimReactor]:
    made: list[SimReactor] = []

    def make(ray: FakeRay, s: SchedulerConfig) -> SimReactor:
        made.append(SimReactor(ray, s))
        made[0].log = []
        return made[0]

    await Simulation(TRACE, sched, make_reactor=make).run("priority")
    assert made[0].log is not None
    return made[0].log, made[0]


async def _reacted(sched: SchedulerConfig, tmp_path: Path) -> list[Recorded]:
    (tmp_path / "shared").mkdir()
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    try:
        await Simulation(TRACE, sched, make_reactor=lambda ray, s: RealReactor(store, ray, s, tmp_path / "shared")
                         ).run("priority")
        return await store.read(0, 1_000_000)
    finally:
        await store.close()


async def test_the_simulator_honours_time_limits_and_cancels_as_the_reactor_does(tmp_path: Path) -> None:
    sched = sim_config("priority", SimSettings(preemption=True, preempt_grace_s=30.0))
    simulated, sim = await _simulated(sched)
    reacted = await _reacted(sched, tmp_path)
    sim_tasks, real_tasks = _per_task(simulated), _per_task(reacted)
    assert sim_tasks == real_tasks
    types = {stream: [e["type"] for e in events] for stream, events in sim_tasks.items()}
    assert "AttemptTimeLimitReached" in types["task-limited"] and types["task-limited"][-1] == "TaskFailed"
    assert sim_tasks["task-limited"][-1]["failure_kind"] == "TIME_LIMIT"
    assert types["task-canceled-running"][-2:] == ["AttemptEnded", "TaskCanceled"]
    assert types["task-canceled-waiting"] == ["TaskSubmitted", "TaskCancelRequested", "TaskCanceled"]
    assert "AttemptPreempted" in types["task-preempted"] and types["task-preempted"][-1] == "TaskSucceeded"
    assert types["task-within-limit"][-1] == "TaskSucceeded"
    assert "AttemptTimeLimitReached" not in types["task-within-limit"]
    assert not sim.state.tasks  # every task ended (the state keeps only unfinished ones)
