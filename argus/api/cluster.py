"""The queue (with why each task waits) and the cluster as last seen, with the ledger."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.params import Parameter

from argus.api.auth import request_id, require_admin
from argus.api.openapi import errors
from argus.api.reads import Reads
from argus.api.redact import redacted, redactor_for
from argus.api.schemas import ClusterOut, DrainIn, NodeSeenOut, QueuePage
from argus.nodepool.keeper import read_node_reports
from argus.service import Commands, Principal
from argus.views.eta import EtaBoard, with_estimates
from argus.views.queue import QueueCursor
from argus.views.standing import Standing
from projections.goodput_table import GoodputReport

__all__ = ["cluster_view", "drain_node", "goodput_view", "queue_view", "shares_view", "undrain_node"]


@get("/queue", tags=["cluster"])
async def queue_view(
    etas: EtaBoard, reads: Reads, who: Principal,
    limit: Annotated[int, Parameter(ge=1, le=1000)] = 200,
    cursor: Annotated[str | None, Parameter(
        max_length=300, description="the previous page's next_cursor: the page after it")] = None,
) -> QueuePage:
    """Waiting tasks in the order the configured policy will consider them, a page at a
    time; other users' entries are anonymised for users."""
    try:
        after = QueueCursor.decode(cursor) if cursor else None
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=f"cursor: {exc}") from exc
    page = await reads.queue_page(limit=limit, after=after)
    estimates = await etas.estimates()
    page.items = [with_estimates(e, estimates) for e in page.items]
    hide = await redactor_for(reads, who)
    if hide is not None:
        # Whose task it is, and the wait message, which names tasks and users (who holds
        # the nodes, who it preempts): another user's entry keeps its reason code only,
        # and the user's own entries' messages do not name the others (argus.api.redact).
        page.items = [redacted(hide, e) if e.user == who.user_id else msgspec.structs.replace(
                          e, task_id=None, user=None, wait_message="") for e in page.items]
    return page


@get("/shares", tags=["cluster"])
async def shares_view(reads: Reads, who: Principal) -> Standing:
    """Each user's standing under fair share: share, quota, fair share of the GPUs, GPUs
    held, tasks waiting and running, and recent GPU-hours (decayed by half every
    ``half_life_s``). Users see their own row; admins see every user's."""
    standing = await reads.standing(time.time())
    if not who.is_admin:
        standing = msgspec.structs.replace(standing, users=[u for u in standing.users if u.user == who.user_id])
    return standing


@get("/goodput", tags=["cluster"])
async def goodput_view(reads: Reads, who: Principal) -> GoodputReport:
    """GPU-seconds held by every task so far (running ones up to now) and where they went:
    productive, placement, start-up, stalled, lost to restarts, failed, other; with the
    wall time tasks waited (docs/runs.md "Goodput"). Per user, and the cluster's sum. Users
    see their own row and the cluster's; admins every row."""
    report = await reads.goodput(time.time())
    if not who.is_admin:
        report.users = [u for u in report.users if u.user == who.user_id]
    return report


def _head(state: State) -> dict[str, Any] | None:
    try:
        doc = json.loads(state.config.discovery_file().read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@get("/cluster", tags=["cluster"])
async def cluster_view(state: State, reads: Reads, who: Principal) -> ClusterOut:
    """Worker nodes and their free capacity as the reactor last saw them."""
    seen, ledger = await reads.cluster_ledger()
    if seen is None:  # never observed yet
        return ClusterOut(reachable=None, error=None, observed_at=None, nodes=[], head=_head(state))
    alive = {n.node_id for n in seen.nodes}
    reports = await asyncio.to_thread(read_node_reports, state.config.shared_root)
    last = [NodeSeenOut(node_id=r.node_id, hostname=r.hostname, checked_at=r.checked_at)
            for r in reports if r.node_id in alive]
    return ClusterOut(reachable=seen.reachable, error=seen.error or None, observed_at=seen.observed_at,
                      nodes=list(seen.nodes), head=_head(state), ledger=ledger, holds=list(seen.holds), seen=last)


@post("/cluster/nodes/{node_id:str}/drain", tags=["cluster"], status_code=200, responses=errors(403, 404))
async def drain_node(request: Request[Any, Any, Any], state: State, commands: Commands, reads: Reads, who: Principal,
                     node_id: str, data: DrainIn) -> ClusterOut:
    """Drain a node (admin): it admits no new attempt; what runs there goes on. Tasks that
    wait for it are told why. Draining a drained node changes nothing."""
    require_admin(who)
    await commands.hold_node(who, node_id, True, data.reason, request_id(request))
    return await cluster_view.fn(state, reads, who)


@post("/cluster/nodes/{node_id:str}/undrain", tags=["cluster"], status_code=200, responses=errors(403, 404))
async def undrain_node(request: Request[Any, Any, Any], state: State, commands: Commands, reads: Reads, who: Principal,
                       node_id: str) -> ClusterOut:
    """Undrain a node (admin): it admits again (unless it is quarantined)."""
    require_admin(who)
    await commands.hold_node(who, node_id, False, "", request_id(request))
    return await cluster_view.fn(state, reads, who)

