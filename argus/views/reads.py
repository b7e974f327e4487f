"""The read side's typed face under a configuration: the projections' own queries
(``projections.reads.ProjectionReads``) and the assembled views (the queue in the
configured policy's order, fair-share standing, the cluster's ledger, what a reactor
starts from), each one read transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from argus.views.cluster import NodeLedgerOut, read_cluster_ledger
from argus.views.queue import QueueCursor, fair_view, queue_page, queue_position
from argus.views.reactor_start import ReactorStart, read_reactor_start
from argus.views.standing import Standing, read_standing
from projections.cluster import ClusterView
from projections.queue import QueuePage
from projections.reads import ProjectionReads

if TYPE_CHECKING:
    from argus.config import ArgusConfig
    from argus.store.protocol import Snapshots

__all__ = ["ViewReads"]


class ViewReads(ProjectionReads):
    """The read models of ``log``, as asked for under ``config``."""

    def __init__(self, log: Snapshots, config: ArgusConfig) -> None:
        super().__init__(log)
        self.config = config

    async def queue_page(self, *, limit: int, after: QueueCursor | None) -> QueuePage:
        """Waiting tasks in the configured policy's order, a page at a time."""
        policy, fair = self.config.v2.scheduler.policy, fair_view(self.config)
        return await self.read_view(lambda db: queue_page(db, policy, limit=limit, after=after, fair=fair))

    async def queue_position(self, task_id: str) -> int | None:
        """The task's place in line (1-based) in the configured policy's order."""
        policy, fair = self.config.v2.scheduler.policy, fair_view(self.config)
        return await self.read_view(lambda db: queue_position(db, policy, task_id, fair))

    async def standing(self, now: float) -> Standing:
        """Every user's standing under fair share, at ``now``."""
        sched = self.config.v2.scheduler
        return await self.read_view(lambda db: read_standing(db, sched, now))

    async def cluster_ledger(self) -> tuple[ClusterView | None, list[NodeLedgerOut]]:
        """The last observation of the cluster (None: never) and each node's ledger."""
        driver_cpus = self.config.entrypoint_num_cpus
        found = await self.read_view(lambda db: read_cluster_ledger(db, driver_cpus))
        return found.seen, found.ledger

    async def reactor_start(self) -> ReactorStart:
        """What a reactor taking the lead starts from."""
        half_life_s = self.config.v2.scheduler.fairshare.half_life_s
        return await self.read_view(lambda db: read_reactor_start(db, half_life_s))
