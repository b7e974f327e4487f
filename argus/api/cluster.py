"""The queue (with why each task waits) and the cluster as last seen."""

from __future__ import annotations

import json
from typing import Any

from litestar import get
from litestar.datastructures import State

from argus.api.schemas import ClusterNodeOut, ClusterOut, DemandOut, QueueEntryOut
from argus.service import Principal
from projections.queue import QUEUE_ORDER_SQL

__all__ = ["cluster_view", "queue_view"]


@get("/queue", tags=["cluster"])
async def queue_view(state: State, who: Principal) -> list[QueueEntryOut]:
    """Waiting tasks in admission order; other users' entries are anonymised for users."""
    rows = await state.store.query(QUEUE_ORDER_SQL)
    out = []
    for i, r in enumerate(rows, start=1):
        mine = who.is_admin or r[1] == who.user_id
        out.append(QueueEntryOut(
            position=i, task_id=r[0] if mine else None, user=r[1] if mine else None,
            priority=r[2], state=r[3],
            demand=DemandOut(nnodes=r[4], n_gpus_per_node=r[5], cpus_per_node=r[6]),
            next_run_at=r[7], wait_reason=r[8], wait_message=r[9] or "", waiting_since=r[10]))
    return out


def _head(state: State) -> dict[str, Any] | None:
    try:
        doc = json.loads(state.config.discovery_file().read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@get("/cluster", tags=["cluster"])
async def cluster_view(state: State, who: Principal) -> ClusterOut:
    """Worker nodes and their free capacity as the reactor last saw them."""
    status = await state.store.query("SELECT reachable, error, observed_at FROM cluster_status")
    nodes = await state.store.query(
        "SELECT node_id, ip, total_gpus, free_gpus, total_cpus, free_cpus FROM cluster_nodes "
        "ORDER BY node_id")
    s = status[0] if status else (None, None, None)
    return ClusterOut(
        reachable=None if s[0] is None else bool(s[0]), error=s[1], observed_at=s[2],
        nodes=[ClusterNodeOut(node_id=n[0], ip=n[1], total_gpus=n[2], free_gpus=n[3],
                              total_cpus=n[4], free_cpus=n[5]) for n in nodes],
        head=_head(state))
