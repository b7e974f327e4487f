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

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from argus.events import Demand, NodeCapacity

__all__ = ["Commitment", "NodeLedger", "admissible", "committed_per_node", "ready_nodes"]


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
    GPUs (sorted, so the same inputs give the same answer)."""
    used: dict[str, list[float]] = {n.node_id: [0.0, 0.0] for n in nodes}
    totals = {n.node_id: n.total_gpus for n in nodes}
    # Members with no node of their own: not placed yet when their node died (Ray will
    # place them elsewhere, so they are held elsewhere), or recorded before the ledger.
    unplaced: list[tuple[Commitment, list[str]]] = []
    for c in commitments:
        d = c.demand
        if len(c.node_ids) == d.nnodes and all(nid in used for nid in c.node_ids):  # the usual case
            for nid in c.node_ids:
                node = used[nid]
                node[0] += d.n_gpus_per_node
                node[1] += d.cpus_per_node
            continue
        known = [nid for nid in c.node_ids if nid in used]
        for nid in known:
            used[nid][0] += d.n_gpus_per_node
            used[nid][1] += d.cpus_per_node
        if len(known) < d.nnodes:
            unplaced.append((c, known))
    for c, known in sorted(unplaced, key=lambda item: item[0].task_id):
        others = [nid for nid in used if nid not in known]
        freest = sorted(others, key=lambda nid: (used[nid][0] - totals[nid], nid))[: c.demand.nnodes - len(known)]
        for nid in freest:
            used[nid][0] += c.demand.n_gpus_per_node
            used[nid][1] += c.demand.cpus_per_node
    return {nid: (g, c) for nid, (g, c) in used.items()}


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
    used = committed_per_node(nodes, commitments)
    return [NodeLedger(node=n, committed_gpus=used[n.node_id][0], committed_cpus=used[n.node_id][1],
                       ready=ready is None or n.node_id in ready) for n in nodes]
