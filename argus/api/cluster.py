"""The queue (with why each task waits) and the cluster as last seen."""

from __future__ import annotations

import json
from typing import Any

from litestar import get
from litestar.datastructures import State

import msgspec

from argus.api.schemas import ClusterOut, QueueEntry
from argus.scheduler.queue import read_queue
from argus.service import Principal
from projections.cluster import read_cluster

__all__ = ["cluster_view", "queue_view"]


@get("/queue", tags=["cluster"])
async def queue_view(state: State, who: Principal) -> list[QueueEntry]:
    """Waiting tasks in the order the configured policy will consider them; other users'
    entries are anonymised for users."""
    policy = state.config.v2.scheduler.policy
    queue = await state.store.read_snapshot(lambda db: read_queue(db, policy))
    if who.is_admin:
        return queue
    return [e if e.user == who.user_id else msgspec.structs.replace(e, task_id=None, user=None)
            for e in queue]


def _head(state: State) -> dict[str, Any] | None:
    try:
        doc = json.loads(state.config.discovery_file().read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@get("/cluster", tags=["cluster"])
async def cluster_view(state: State, who: Principal) -> ClusterOut:
    """Worker nodes and their free capacity as the reactor last saw them."""
    seen = await state.store.read_snapshot(read_cluster)
    if seen is None:  # never observed yet
        return ClusterOut(reachable=None, error=None, observed_at=None, nodes=[], head=_head(state))
    return ClusterOut(reachable=seen.reachable, error=seen.error or None, observed_at=seen.observed_at,
                      nodes=list(seen.nodes), head=_head(state))
