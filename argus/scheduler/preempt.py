"""Preemption: which running tasks to stop so that a waiting one fits.

Only tasks submitted with ``preemptible: true`` are ever stopped, that have run for
``preempt_min_run_s`` and were stopped fewer than ``max_preemptions`` times, and only for
a task the policy's rule says outranks them (``priority``: a higher priority; ``fairshare``: a user
within their quota or fair share, against a user beyond theirs). Or, for a task that would
wait ``move_after_s`` or more, whatever the rule says, when they can run elsewhere now and
the waiting task has fewer nodes it fits on (``RoomPlanner._moves``): a task that fits only
the cluster's one 128-CPU node is not kept waiting for days by one that fits on any node
and took it while nothing waited for it (the openb trace's seed 1).

The choice: candidates in order of least loss (lowest priority, then the least work since
its last checkpoint, or since its start when none was seen: ``RunningTask.unsaved_since``,
fed by the reactor's ``CheckpointObserved``), taken one by one until the gang
fits, then every victim not needed after all given back (the fewest stops that make it
fit). Tasks already being stopped count as free first: while their stops are under way,
nothing more is stopped for the same task.

Ray does not say which nodes a job holds; a victim of unknown placement is assumed to
free the nodes with the most GPUs in use (as reservations assume). If that was wrong,
the task still does not fit when the victims are gone, and the next pass stops more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from argus.events.catalog import Demand

from argus.scheduler.gpumodel import allowed_nodes, except_nodes
from argus.scheduler.model import RunningTask
from argus.scheduler.placement import homes_of
from argus.scheduler.reserve import best_fit

__all__ = ["Room", "RoomPlanner"]


class Room(NamedTuple):
    """How a waiting task gets its gang: ``victims`` (with why each) to stop, or none when
    the stops already under way make it fit; ``nodes``: where it fits then (indices)."""

    victims: tuple[tuple[RunningTask, str], ...]
    nodes: tuple[int, ...]


class _Nodes(msgspec.Struct, kw_only=True):
    ids: Sequence[str]
    gpus: list[float]
    cpus: list[float]
    total_gpus: Sequence[float]
    total_cpus: Sequence[float]
    types: tuple[str, ...] = ()  # each node's GPU model (argus.scheduler.gpumodel)

    def freed(self, tasks: Sequence[RunningTask]) -> "_Nodes":
        """These nodes once ``tasks`` stopped."""
        return self.given_back([(r.node_ids, r.demand) for r in tasks])

    def given_back(self, gangs: Iterable[tuple[tuple[str, ...], Demand]]) -> "_Nodes":
        """These nodes once ``gangs`` (their nodes, their demand) gave back what they hold."""
        index = {nid: i for i, nid in enumerate(self.ids)}
        gpus, cpus = list(self.gpus), list(self.cpus)
        for node_ids, d in gangs:
            nodes = [index[n] for n in node_ids if n in index] or sorted(
                (i for i in range(len(gpus)) if self.total_gpus[i] - gpus[i] >= d.n_gpus_per_node),
                key=lambda i: (gpus[i] - self.total_gpus[i], self.ids[i]))[: d.nnodes]
            for i in nodes:
                gpus[i] = min(self.total_gpus[i], gpus[i] + d.n_gpus_per_node)
                cpus[i] = min(self.total_cpus[i], cpus[i] + d.cpus_per_node)
        return _Nodes(ids=self.ids, gpus=gpus, cpus=cpus, total_gpus=self.total_gpus, total_cpus=self.total_cpus,
                      types=self.types)

    def place(self, d: Demand, avoid: frozenset[int] = frozenset()) -> tuple[int, ...] | None:
        allowed = allowed_nodes(d.gpu_types, self.types) if d.gpu_types else None
        return best_fit(self.gpus, self.cpus, self.ids, d, except_nodes(allowed, len(self.ids), avoid))

    def take(self, nodes: Sequence[int], d: Demand) -> None:
        for i in nodes:
            self.gpus[i] -= d.n_gpus_per_node
            self.cpus[i] -= d.cpus_per_node


class RoomPlanner:
    """The cluster as it will be once the stops under way and the ones decided in this
    pass are done, and the tasks they make room for hold their gangs: several waiting
    tasks may each get room in one pass without counting the same GPUs twice."""

    def __init__(self, running: Sequence[RunningTask], *, ids: Sequence[str], free_gpus: Sequence[float],
                 free_cpus: Sequence[float], total_gpus: Sequence[float], total_cpus: Sequence[float],
                 max_preemptions: int = 0, types: Sequence[str] = (),
                 releasing: Sequence[tuple[tuple[str, ...], Demand]] = (),
                 caps: Mapping[str, int] | None = None) -> None:
        self.running = running
        self.max_preemptions = max_preemptions  # a task stopped this often is not stopped again (0: no cap)
        self.caps = caps or {}  # users whose cap is not max_preemptions (argus.scheduler.guards)
        now = _Nodes(ids=ids, gpus=list(free_gpus), cpus=list(free_cpus), total_gpus=total_gpus, total_cpus=total_cpus,
                     types=tuple(types) or ("",) * len(ids))
        # Ended gangs the ledger holds until the next observation are back then: counted
        # as stops under way (without them a victim's end was taken for no room, and a
        # second task stopped for the same one).
        self.view = now.freed([r for r in running if r.stopping]).given_back(releasing)
        self.chosen: set[str] = set()  # victims of this pass

    def admitted(self, nodes: Sequence[int], d: Demand) -> None:
        """A task admitted in this pass holds ``nodes`` in the future too."""
        self.view.take(nodes, d)

    def make_room(self, demand: Demand, outranks: Callable[[RunningTask], str | None], *,
                  long_wait: Callable[[], bool] = lambda: False, avoid: frozenset[int] = frozenset()) -> Room | None:
        """The fewest preemptible tasks ``outranks`` allows to stop for ``demand`` to fit
        (``outranks`` gives the reason, or None); else, when ``long_wait()`` says the task
        would wait long, tasks that can start again elsewhere at once (``_moves``); None
        when neither makes room. Never on the nodes ``avoid`` names (a task that may not
        be stopped keeps off the rare nodes: ``Pool.keeps_off``)."""
        base = self.view
        nodes = base.place(demand, avoid)
        chosen: list[tuple[RunningTask, str]] = []
        if nodes is None:
            found = (self._stops(base, demand, outranks, avoid)
                     or (self._moves(base, demand, avoid) if long_wait() else None))
            if found is None:
                return None
            chosen, nodes, self.view = found
            self.chosen.update(r.task_id for r, _ in chosen)
        self.view.take(nodes, demand)
        return Room(victims=tuple(chosen), nodes=nodes)

    def _may_stop(self, r: RunningTask) -> bool:
        cap = self.caps.get(r.user, self.max_preemptions) if self.caps else self.max_preemptions
        return (r.preemptible and r.settled and not r.stopping and r.task_id not in self.chosen
                and (cap <= 0 or r.preempted < cap))

    def _stops(self, base: _Nodes, demand: Demand, outranks: Callable[[RunningTask], str | None],
               avoid: frozenset[int]) -> tuple[list[tuple[RunningTask, str]], tuple[int, ...], _Nodes] | None:
        """Victims ``outranks`` allows, least loss first, until ``demand`` fits; then every
        victim it fits without given back."""
        candidates = sorted(
            ((r, why) for r in self.running if self._may_stop(r) and (why := outranks(r)) is not None),
            key=lambda c: (c[0].priority, -c[0].unsaved_since(), c[0].task_id))
        chosen: list[tuple[RunningTask, str]] = []
        nodes = None
        for candidate in candidates:
            chosen.append(candidate)
            nodes = base.freed([r for r, _ in chosen]).place(demand, avoid)
            if nodes is not None:
                break
        if nodes is None:
            return None
        for candidate in reversed(chosen[:-1]):  # give back the victims it fits without
            fewer = [c for c in chosen if c is not candidate]
            placed = base.freed([r for r, _ in fewer]).place(demand, avoid)
            if placed is not None:
                chosen, nodes = fewer, placed
        return chosen, nodes, base.freed([r for r, _ in chosen])

    def _moves(self, base: _Nodes, demand: Demand, avoid: frozenset[int]
               ) -> tuple[list[tuple[RunningTask, str]], tuple[int, ...], _Nodes] | None:
        """Room made by moving: on the nodes where the fewest stops let ``demand`` fit,
        stop the preemptible tasks of known placement in its way (those that lose the least
        work first), when each of them fits on what is free elsewhere now and more nodes
        could hold it than could hold ``demand``. They go back to their place in line and
        start again at once on what they fit (this view counts them there)."""
        index = {nid: i for i, nid in enumerate(base.ids)}
        on: dict[int, list[RunningTask]] = {}
        for r in self.running:
            if self._may_stop(r) and r.node_ids and all(n in index for n in r.node_ids):
                for n in r.node_ids:
                    on.setdefault(index[n], []).append(r)
        totals = tuple(zip(base.total_gpus, base.total_cpus))

        def homes(d: Demand) -> frozenset[int]:  # the nodes that could hold one member of ``d`` idle
            allowed = allowed_nodes(d.gpu_types, base.types) if d.gpu_types else None
            return homes_of(totals, d.n_gpus_per_node, d.cpus_per_node, allowed)

        mine = homes(demand)
        costs: list[tuple[int, float, int, list[RunningTask]]] = []
        for i in sorted(mine - avoid):
            gpus, cpus, movers = base.gpus[i], base.cpus[i], []
            for r in sorted(on.get(i, ()), key=lambda r: (-r.unsaved_since(), r.task_id)):
                if gpus >= demand.n_gpus_per_node and cpus >= demand.cpus_per_node:
                    break
                movers.append(r)
                gpus, cpus = gpus + r.demand.n_gpus_per_node, cpus + r.demand.cpus_per_node
            if any(len(homes(r.demand)) <= len(mine) for r in movers):
                continue  # a mover as hard to place as ``demand``: the node is as much its own
            if gpus >= demand.n_gpus_per_node and cpus >= demand.cpus_per_node:
                # the fewest stops, then the node whose oldest unsaved work is the newest
                costs.append((len(movers), -min((r.unsaved_since() for r in movers), default=0.0), i, movers))
        if len(costs) < demand.nnodes:
            return None
        costs.sort(key=lambda c: (c[0], c[1], base.ids[c[2]]))
        nodes = tuple(sorted(i for _, _, i, _ in costs[: demand.nnodes]))
        movers = list({r.task_id: r for _, _, _, rs in costs[: demand.nnodes] for r in rs}.values())
        after = _placed_elsewhere(base, movers, nodes) if movers else None
        return None if after is None else ([(r, "moves") for r in movers], nodes, after)


def _placed_elsewhere(base: _Nodes, movers: Sequence[RunningTask], held: Sequence[int]) -> _Nodes | None:
    """``base`` once ``movers`` left their nodes and started again on others, none of them
    ``held`` (kept for the task they make room for); None when one fits nowhere else."""
    after = base.freed(movers)
    elsewhere = after.given_back(())  # a copy, to mark ``held`` as full in
    for i in held:
        elsewhere.gpus[i] = elsewhere.cpus[i] = -1.0
    for r in movers:
        placed = elsewhere.place(r.demand)
        if placed is None:
            return None
        elsewhere.take(placed, r.demand)
        after.take(placed, r.demand)
    return after

