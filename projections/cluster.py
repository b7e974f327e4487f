"""The cluster as last seen: free capacity per worker node, whether Ray answered, and the
nodes held from admitting (drained by an admin, or quarantined by the reactor)."""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.events import (
    CapacityObserved, ClusterUnreachable, HoldKind, NodeCapacity, NodeHeld, NodeReleased, Recorded,
)
from projections.base import Change, EntityFold, EntityProjection

__all__ = [
    "CLUSTER_FOLD", "ClusterAt", "ClusterFold", "ClusterView", "ClusterProjection", "NodeAt", "NodeHold", "cluster_at",
    "evolve_cluster", "read_cluster",
]


class NodeHold(msgspec.Struct, frozen=True, kw_only=True):
    """A node that admits no new attempt, of one ``kind``, since ``since``, and why."""

    node_id: str
    ip: str = ""
    kind: HoldKind
    reason: str
    by: str
    since: float


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    """The last observation: the alive worker nodes (kept, marked unreachable, while Ray
    does not answer) and when it was made; and the nodes held (by node id, then kind)."""

    reachable: bool
    nodes: tuple[NodeCapacity, ...]
    error: str = ""
    observed_at: float
    holds: tuple[NodeHold, ...] = ()


def evolve_cluster(view: ClusterView | None, rec: Recorded) -> ClusterView:
    event = rec.event
    holds = view.holds if view else ()
    if isinstance(event, CapacityObserved):
        return ClusterView(reachable=True, nodes=tuple(event.nodes), observed_at=event.observed_at, holds=holds)
    if isinstance(event, ClusterUnreachable):
        # Keep the last nodes seen (marked unreachable): "last seen" is still worth showing.
        nodes = view.nodes if view else ()
        return ClusterView(reachable=False, nodes=nodes, error=event.error, observed_at=event.observed_at, holds=holds)
    base = view or ClusterView(reachable=False, nodes=(), observed_at=0.0)
    if isinstance(event, NodeHeld):
        hold = NodeHold(node_id=event.node_id, ip=event.ip, kind=event.kind, reason=event.reason, by=event.by,
                        since=event.held_at)
        kept = [h for h in holds if (h.node_id, h.kind) != (event.node_id, event.kind)]
        return msgspec.structs.replace(base, holds=tuple(sorted([*kept, hold], key=lambda h: (h.node_id, h.kind))))
    if isinstance(event, NodeReleased):
        return msgspec.structs.replace(base, holds=tuple(
            h for h in holds if (h.node_id, h.kind) != (event.node_id, event.kind)))
    raise TypeError(f"not a cluster event: {rec.type}")


class ClusterFold(EntityFold[ClusterView]):
    """Capacity observations -> the one ``ClusterView``; its home is ``cluster_*``."""

    name = "cluster"
    entity = ClusterView
    handles = frozenset({"CapacityObserved", "ClusterUnreachable", "NodeHeld", "NodeReleased"})
    home = "cluster"

    def key(self, rec: Recorded) -> str:
        return "cluster"

    def evolve(self, entity: ClusterView | None, rec: Recorded) -> ClusterView:
        return evolve_cluster(entity, rec)

    def load(self, db: sqlite3.Connection, key: str) -> ClusterView | None:
        status = db.execute("SELECT reachable, error, observed_at FROM cluster_status").fetchone()
        if status is None:
            return None
        nodes = tuple(
            NodeCapacity(node_id=r[0], ip=r[1], total_gpus=r[2], free_gpus=r[3], total_cpus=r[4], free_cpus=r[5],
                         gpu_type=r[6])
            for r in db.execute("SELECT node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus, gpu_type "
                                "FROM cluster_nodes ORDER BY node_id")
        )
        holds = tuple(
            NodeHold(node_id=r[0], kind=HoldKind(r[1]), ip=r[2], reason=r[3], by=r[4], since=r[5])
            for r in db.execute("SELECT node_id, kind, ip, reason, held_by, since FROM cluster_holds "
                                "ORDER BY node_id, kind")
        )
        return ClusterView(reachable=bool(status[0]), nodes=nodes, error=status[1] or "", observed_at=status[2],
                           holds=holds)


CLUSTER_FOLD = ClusterFold()


def read_cluster(db: sqlite3.Connection) -> ClusterView | None:
    """The cluster as last observed (None: never observed)."""
    return CLUSTER_FOLD.load(db, "cluster")


class ClusterProjection(EntityProjection[ClusterView]):
    name = "cluster"
    version = 3  # 2: nodes' gpu_type (migration 0017); 3: held nodes (0020)
    tables = ("cluster_nodes", "cluster_status", "cluster_holds")
    fold = CLUSTER_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[ClusterView]]) -> None:
        for key, _, after in changes:  # one entity: the cluster
            assert after is not None
            for table in self.tables:
                db.execute(f"DELETE FROM {table}")
            self.write_all(db, {key: after})

    def write_all(self, db: sqlite3.Connection, entities: dict[str, ClusterView]) -> None:
        for view in entities.values():
            db.execute(
                "INSERT INTO cluster_status VALUES (1, ?, ?, ?)",
                (int(view.reachable), view.error or None, view.observed_at),
            )
            db.executemany(
                "INSERT INTO cluster_nodes (node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus, observed_at, "
                "gpu_type) VALUES (?,?,?,?,?,?,?,?)",
                (
                    (n.node_id, n.ip, n.total_gpus, n.free_gpus, n.total_cpus, n.free_cpus, view.observed_at,
                     n.gpu_type)
                    for n in view.nodes
                ),
            )
            db.executemany(
                "INSERT INTO cluster_holds (node_id, kind, ip, reason, held_by, since) VALUES (?,?,?,?,?,?)",
                ((h.node_id, h.kind.value, h.ip, h.reason, h.by, h.since) for h in view.holds),
            )


class NodeAt(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``cluster_nodes``: a node's capacity and when it was observed."""

    node_id: str
    ip: str
    total_gpus: float
    free_gpus: float
    total_cpus: float
    free_cpus: float
    observed_at: float


class ClusterAt(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster as replay's ``at`` shows it (``reachable`` None: nothing observed yet)."""

    reachable: bool | None
    error: str = ""
    observed_at: float | None = None
    nodes: list[NodeAt] = []


def cluster_at(db: sqlite3.Connection) -> ClusterAt:
    """The last observation and every node in it (by node id), from the cluster tables."""
    status = db.execute("SELECT reachable, error, observed_at FROM cluster_status").fetchone()
    nodes = [
        NodeAt(node_id=node_id, ip=ip, total_gpus=total_gpus, free_gpus=free_gpus, total_cpus=total_cpus,
               free_cpus=free_cpus, observed_at=observed_at)
        for node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus, observed_at in db.execute(
            "SELECT node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus, observed_at "
            "FROM cluster_nodes ORDER BY node_id"
        )
    ]
    if status is None:
        return ClusterAt(reachable=None, nodes=nodes)
    reachable, error, observed_at = status
    return ClusterAt(reachable=bool(reachable), error=error or "", observed_at=observed_at, nodes=nodes)
