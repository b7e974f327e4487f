"""``argus sim`` runs the very decisions the reactor runs: on a subset of the openb trace,
under 3 seeds, the simulator's own reactor (in-memory log) and the real ``Reactor`` (its
SQLite log with every projection, the same fake Ray, the same virtual clock, driven at the
same instants by the same ``Simulation``) make the same decisions, event for event: every
admission (task, attempt, nodes) and every preemption (task, for whom), in order, at the
same instant.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.config import ArgusConfig, SchedulerConfig, ServiceConfig
from argus.events import AttemptPreempted, AttemptStarting, EventMeta, TaskSubmitted, cancel_events, task_stream
from argus.rayjobs.fake import FakeRay
from argus.reactor import Reactor
from argus.reactor.state import ReactorState
from argus.sim import GangMix, load_openb
from argus.sim.engine import SimResult, Simulation
from argus.sim.settings import SimSettings, sim_config
from argus.sim.trace import Marks, Trace
from argus.store import EventStore
from projections import open_store

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"

Decision = tuple[float, str, str, tuple[str, ...]]


class RealReactor:
    """The real ``Reactor`` behind the simulation's calls; ``log`` its decisions as read
    back from its SQLite log."""

    def __init__(self, store: EventStore, ray: FakeRay, sched: SchedulerConfig, shared: Path) -> None:
        self.store, self.ray, self.now = store, ray, 0.0
        config = ArgusConfig(shared_root=str(shared), entrypoint_num_cpus=0.0, v2=ServiceConfig(scheduler=sched))
        self.reactor = Reactor(store, ray, config, reactor_id="sim-vs-reactor", clock=lambda: self.now)
        self.submitted: list[str] = []
        self.plans = 0

    @property
    def state(self) -> ReactorState:
        return self.reactor.state

    @property
    def plan_expires_at(self) -> float:
        return self.reactor.memory.plan_expires_at

    async def arrive(self, event: TaskSubmitted, now: float) -> None:
        await self.store.append(task_stream(event.task_id), 0, [event], owner=event.user,
                                meta=EventMeta(actor=f"user:{event.user}"))

    async def cancel(self, task_id: str, now: float) -> None:
        await self.reactor._catch_up()
        view = self.reactor.state.tasks.get(task_id)
        if view is not None:
            await self.store.append(task_stream(task_id), view.stream_version,
                                    cancel_events(task_id, view.state, view.user, now), owner=view.user,
                                    meta=EventMeta(actor=f"user:{view.user}"))

    async def turn(self, now: float) -> bool:
        self.now = now
        before = await self.store.head_position()
        known = set(self.ray.jobs)
        await self.reactor.turn()
        self.submitted += [sid for sid in self.ray.jobs if sid not in known]
        return await self.store.head_position() != before

    async def log(self) -> list[Decision]:
        out: list[tuple[int, Decision]] = []
        for rec in await self.store.read(0, 1_000_000):
            e = rec.event
            if isinstance(e, AttemptStarting):
                out.append((rec.position, (e.decided_at, e.task_id, "admitted", tuple(e.node_ids))))
            elif isinstance(e, AttemptPreempted):
                out.append((rec.position, (e.preempted_at, e.task_id, "preempted", (e.by_task_id,))))
        return [d for _, d in sorted(out)]


async def through_the_reactor(trace: Trace, sched: SchedulerConfig, policy: str,
                              tmp_path: Path) -> tuple[SimResult, list[Decision]]:
    """``trace`` simulated with the real ``Reactor`` turning (on a SQLite log under
    ``tmp_path``): the result, and the reactor's decisions as read back from its log."""
    (tmp_path / "shared").mkdir()
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    real: list[RealReactor] = []

    def make(ray: FakeRay, s: SchedulerConfig) -> RealReactor:
        real.append(RealReactor(store, ray, s, tmp_path / "shared"))
        return real[0]

    try:
        reacted = await Simulation(trace, sched, make_reactor=make).run(policy)
        return reacted, await real[0].log()
    finally:
        await store.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("policy", ["reserve-backfill", "priority"])
async def test_the_simulator_decides_as_the_reactor_does(tmp_path: Path, seed: int, policy: str) -> None:
    if not TRACE.is_dir():
        pytest.skip("the openb trace is not next to this checkout")
    trace = load_openb(TRACE / "openb_pod_list_default.csv", TRACE / "openb_node_list_gpu_node.csv",
                       nodes_subset=6, load=1.5, gang_mix=GangMix.parse("0.1:2x4"),
                       marks=Marks.parse("0.3:10", 0.5), seed=seed, limit=70)
    sched = sim_config(policy, SimSettings(preemption=True, preempt_grace_s=30.0))
    simulated = await Simulation(trace, sched).run(policy)
    reacted, log = await through_the_reactor(trace, sched, policy, tmp_path)
    assert len(simulated.decision_log) > 40  # the subset is contended: decisions to compare
    assert simulated.decision_log == log
    assert [o.start for o in simulated.outcomes] == [o.start for o in reacted.outcomes]
