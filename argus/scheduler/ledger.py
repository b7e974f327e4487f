"""The ledger of committed demand: what Argus has promised, per node, and so what is free.

Ray's free count lags behind admission: a job handed to Ray holds nothing until its driver
runs, and verl creates its placement groups later still (on ``argus up`` a 3-GPU task ran
for a minute with its learners' group unplaced while Ray said 4 of 4 GPUs free). So every
admitted gang counts against the nodes it was admitted onto from the moment it is admitted
until its attempt has ended *and* Ray has been observed after that end (then Ray's own
count shows whether the resources came back). Free per node is then

    min(Ray's free count, the node's total - committed demand)

Ray's count can only lower what is free (foreign jobs, lost nodes), never raise it above
what Argus has not promised. A node that (re)joined, or that the cluster's last outage hid,
admits nothing until it has been observed for ``node_settle_s``.

Pure: no database, no clock. The reactor folds the log into the inputs
(``argus.reactor.state``), ``argus sim`` its own events; both call ``admissible``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from argus.events import Demand, NodeCapacity

__all__ = ["Commitment", "CommittedSums", "NodeLedger", "admissible", "committed_per_node", "node_ledgers",
           "ready_nodes"]


class Commitment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One admitted gang as the ledger holds it. ``demand``: per node, with the driver's CPUs
    (it lands on one of the gang's nodes, Ray's choice: counted on each); ``node_ids``: where
    the scheduler placed it (none for attempts recorded before the ledger: placed here on the
    freest nodes); ``ended_at``: its attempt ended, and it is held until an observation of
    Ray is recorded after that end."""

    task_id: str
    demand: Demand
    node_ids: tuple[str, ...] = ()
    ended_at: float | None = None


class NodeLedger(msgspec.Struct, frozen=True, kw_only=True):
    """One node as the scheduler may use it: Ray's numbers, what Argus committed there, and
    whether it admits at all (observed long enough since it joined)."""

    node: NodeCapacity
    committed_gpus: float
    committed_cpus: float
    ready: bool

    @property
    def free_gpus(self) -> float:
        if not self.ready:
            return 0.0
        return max(0.0, min(self.node.free_gpus, self.node.total_gpus - self.committed_gpus))

    @property
    def free_cpus(self) -> float:
        if not self.ready:
            return 0.0
        return max(0.0, min(self.node.free_cpus, self.node.total_cpus - self.committed_cpus))


def committed_per_node(nodes: Sequence[NodeCapacity], commitments: Iterable[Commitment]
                       ) -> dict[str, tuple[float, float]]:
    """GPUs and CPUs committed on each node (by id). A commitment without
    nodes, or naming nodes that are gone, is put on the nodes with the most uncommitted
    GPUs (sorted, so the same inputs give the same answer). Each node's CPUs are summed
    exactly (``math.fsum``): the same in whatever order its commitments come, so a ledger
    kept up to date one commitment at a time (``argus.scheduler.inputs``) agrees with it."""
    gpus: dict[str, float] = {n.node_id: 0.0 for n in nodes}
    cpus: dict[str, list[float]] = {n.node_id: [] for n in nodes}
    totals = {n.node_id: n.total_gpus for n in nodes}
    # Members with no node of their own: not placed yet when their node died (Ray will
    # place them elsewhere, so they are held elsewhere), or recorded before the ledger.
    unplaced: list[tuple[Commitment, list[str]]] = []
    for c in commitments:
        d = c.demand
        known = [nid for nid in c.node_ids if nid in gpus]
        for nid in known:
            gpus[nid] += d.n_gpus_per_node
            cpus[nid].append(d.cpus_per_node)
        if len(known) < d.nnodes:
            unplaced.append((c, known))
    for c, known in sorted(unplaced, key=lambda item: item[0].task_id):
        others = [nid for nid in gpus if nid not in known]
        freest = sorted(others, key=lambda nid: (gpus[nid] - totals[nid], nid))[: c.demand.nnodes - len(known)]
        for nid in freest:
            gpus[nid] += c.demand.n_gpus_per_node
            cpus[nid].append(c.demand.cpus_per_node)
    return {nid: (g, math.fsum(cpus[nid])) for nid, g in gpus.items()}


def ready_nodes(seen_since: Mapping[str, float], nodes: Sequence[NodeCapacity], now: float,
                settle_s: float) -> frozenset[str]:
    """The nodes of this observation that may admit: seen without a break (no absence, no
    outage of the cluster) for at least ``settle_s``. ``seen_since``: when each node's
    current unbroken run of observations began (a node missing from it is new)."""
    return frozenset(n.node_id for n in nodes
                     if (since := seen_since.get(n.node_id)) is not None and now - since >= settle_s)


def admissible(nodes: Sequence[NodeCapacity], commitments: Iterable[Commitment], ready: frozenset[str] | None
               ) -> list[NodeLedger]:
    """Every observed node with its committed demand and what it may still admit
    (``ready`` None: every node is ready). ``commitments``: the live gangs, and the ended
    ones no observation has been recorded after yet (the caller knows the order)."""
    return node_ledgers(nodes, committed_per_node(nodes, commitments), ready)


def node_ledgers(nodes: Sequence[NodeCapacity], used: Mapping[str, tuple[float, float]],
                 ready: frozenset[str] | None) -> list[NodeLedger]:
    """``admissible`` from GPUs and CPUs committed per node (``committed_per_node``)."""
    return [NodeLedger(node=n, committed_gpus=used[n.node_id][0], committed_cpus=used[n.node_id][1],
                       ready=ready is None or n.node_id in ready) for n in nodes]


class CommittedSums:
    """``committed_per_node`` kept up to date one commitment at a time, for a reactor (or a
    simulation) that plans after every event with hundreds of gangs running: adding or
    removing one sums again only the nodes it is on. Commitments are keyed by task."""

    def __init__(self, node_ids: frozenset[str]) -> None:
        self.node_ids = node_ids
        self._on: dict[str, dict[str, tuple[float, float]]] = {nid: {} for nid in node_ids}  # node -> task -> use
        self._sums: dict[str, tuple[float, float]] = {nid: (0.0, 0.0) for nid in node_ids}
        self._counted: dict[str, Commitment] = {}
        self._unplaced: set[str] = set()  # tasks whose gang names no node, or one not among ``node_ids``
        self._dirty: set[str] = set()

    def placed(self, c: Commitment) -> bool:
        """Its gang names its nodes, all of them here (else ``committed_per_node`` must place it)."""
        return len(c.node_ids) == c.demand.nnodes and all(nid in self.node_ids for nid in c.node_ids)

    def add(self, c: Commitment) -> None:
        """Count ``c`` (instead of what its task had counted)."""
        self.remove(c.task_id)
        self._counted[c.task_id] = c
        if not self.placed(c):
            self._unplaced.add(c.task_id)
            return
        use = (float(c.demand.n_gpus_per_node), c.demand.cpus_per_node)
        for nid in c.node_ids:
            self._on[nid][c.task_id] = use
        self._dirty.update(c.node_ids)

    def remove(self, task_id: str) -> None:
        c = self._counted.pop(task_id, None)
        if c is None:
            return
        if task_id in self._unplaced:
            self._unplaced.discard(task_id)
            return
        for nid in c.node_ids:
            del self._on[nid][task_id]
        self._dirty.update(c.node_ids)

    def per_node(self, releasing: Sequence[Commitment] = ()) -> dict[str, tuple[float, float]] | None:
        """``committed_per_node`` of what is counted and ``releasing``; None when one of them
        must be placed (the caller asks ``committed_per_node``)."""
        if self._unplaced or not all(map(self.placed, releasing)):
            return None
        for nid in self._dirty:
            self._sums[nid] = _node_sum(self._on[nid].values())
        self._dirty.clear()
        if not releasing:
            return dict(self._sums)
        extra: dict[str, list[tuple[float, float]]] = {}
        for c in releasing:
            for nid in c.node_ids:
                extra.setdefault(nid, []).append((float(c.demand.n_gpus_per_node), c.demand.cpus_per_node))
        out = dict(self._sums)
        for nid, more in extra.items():
            out[nid] = _node_sum([*self._on[nid].values(), *more])
        return out


def _node_sum(uses: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """GPUs and CPUs of one node's commitments, as ``committed_per_node`` sums them."""
    uses = list(uses)
    return float(sum(g for g, _ in uses)), math.fsum(c for _, c in uses)
