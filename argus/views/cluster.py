"""The cluster as last observed, with Argus's ledger of each node: what admitted gangs hold
there and what admission may still hand out (``argus.scheduler.ledger``), read from the
projections as ``GET /cluster`` shows it."""

from __future__ import annotations

import sqlite3

import msgspec

from argus.lifecycle import TaskState
from argus.scheduler.inputs import commitments
from argus.scheduler.ledger import admissible
from projections.cluster import ClusterView, read_cluster
from projections.tasks_read import tasks_in_states

__all__ = ["ClusterLedger", "NodeLedgerOut", "read_cluster_ledger"]


class NodeLedgerOut(msgspec.Struct, kw_only=True):
    """One node in Argus's ledger (``argus.scheduler.ledger``): what admitted gangs hold
    there (with their drivers' CPUs), and what admission may still hand out: the least of
    Ray's free count and the total less the committed."""

    node_id: str
    committed_gpus: float
    committed_cpus: float
    admissible_gpus: float
    admissible_cpus: float


class ClusterLedger(msgspec.Struct, frozen=True, kw_only=True):
    """The last observation of the cluster (None: never observed) and each node's ledger."""

    seen: ClusterView | None
    ledger: list[NodeLedgerOut]


def read_cluster_ledger(db: sqlite3.Connection, driver_cpus: float) -> ClusterLedger:
    """The cluster and the ledger of the tasks whose attempts hold Ray jobs, read together
    (the caller's read transaction). ``driver_cpus``: each job driver's CPUs, held on one
    of its task's nodes."""
    seen = read_cluster(db)
    if seen is None:  # never observed yet
        return ClusterLedger(seen=None, ledger=[])
    active = tasks_in_states(db, [s for s in TaskState if s.holds_ray_job() or s is TaskState.CANCELING])
    held = commitments(active, driver_cpus)
    return ClusterLedger(seen=seen, ledger=[
        NodeLedgerOut(node_id=n.node.node_id, committed_gpus=n.committed_gpus, committed_cpus=n.committed_cpus,
                      admissible_gpus=n.free_gpus, admissible_cpus=n.free_cpus)
        for n in admissible(seen.nodes, held, None)])
