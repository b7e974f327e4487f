"""The API's read side, typed: ``Reads`` holds every query a handler makes of the read
models, each one read transaction of the store, each with its result's type.

Handlers get it through Litestar's ``Provide`` (a ``reads: Reads`` parameter), not from the
untyped application state: a handler that read ``state.store.read_snapshot(lambda db: …)``
got ``Any`` back, and mypy could not check what it did with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from litestar.datastructures import State

from argus.events import Recorded, TaskSubmitted, task_stream
from argus.lifecycle import TaskState
from argus.views.cluster import NodeLedgerOut, read_cluster_ledger
from argus.views.queue import QueueCursor, fair_view, queue_page, queue_position
from argus.views.standing import Standing, read_standing
from projections import TaskView
from projections.cluster import ClusterView
from projections.goodput_table import GoodputReport, read_goodput
from projections.queue import QueuePage
from projections.tasks_read import PageCursor, TaskCounts, task_counts, task_page
from projections.users import TokenSummary, UserSummary, list_users, token_summary, user_summary, user_tokens

if TYPE_CHECKING:
    from argus.config import ArgusConfig
    from argus.store import EventStore

__all__ = ["Reads", "TaskPage", "provide_reads"]

TaskPage = tuple[list[TaskView], int, PageCursor | None]


class Reads:
    """The read models of ``store``, as the API asks for them under ``config``."""

    def __init__(self, store: EventStore, config: ArgusConfig) -> None:
        self.store = store
        self.config = config

    # ------------------------------------------------------------------ tasks
    async def task_page(self, *, user: str | None, states: list[TaskState], limit: int,
                        after: PageCursor | None, offset: int) -> TaskPage:
        """A page of tasks, newest first, the filter's count and the next page's cursor."""
        return await self.store.read_snapshot(
            lambda db: task_page(db, user=user, states=states, limit=limit, after=after, offset=offset))

    async def submitted(self, view: TaskView) -> TaskSubmitted:
        """The task's TaskSubmitted, read at its log position (``seq``), not with its stream."""
        event = (await self.store.read(view.seq - 1, 1))[0].event
        assert isinstance(event, TaskSubmitted)  # a task's stream starts with it
        return event

    async def timeline(self, task_id: str) -> list[Recorded]:
        """Every event of the task, in order."""
        return await self.store.read_stream(task_stream(task_id))

    async def goodput(self, now: float) -> GoodputReport:
        """Every task's goodput at ``now``, per user and for the cluster."""
        return await self.store.read_snapshot(lambda db: read_goodput(db, now))

    async def task_counts(self) -> TaskCounts:
        """Unfinished tasks by state, attempts, failures by kind (for ``/metrics``)."""
        return await self.store.read_snapshot(task_counts)

    # ------------------------------------------------------------------ the queue and the cluster
    async def queue_page(self, *, limit: int, after: QueueCursor | None) -> QueuePage:
        """Waiting tasks in the configured policy's order, a page at a time."""
        policy, fair = self.config.v2.scheduler.policy, fair_view(self.config)
        return await self.store.read_snapshot(lambda db: queue_page(db, policy, limit=limit, after=after, fair=fair))

    async def queue_position(self, task_id: str) -> int | None:
        """The task's place in line (1-based) in the configured policy's order."""
        policy, fair = self.config.v2.scheduler.policy, fair_view(self.config)
        return await self.store.read_snapshot(lambda db: queue_position(db, policy, task_id, fair))

    async def standing(self, now: float) -> Standing:
        """Every user's standing under fair share, at ``now``."""
        sched = self.config.v2.scheduler
        return await self.store.read_snapshot(lambda db: read_standing(db, sched, now))

    async def cluster_ledger(self) -> tuple[ClusterView | None, list[NodeLedgerOut]]:
        """The last observation of the cluster (None: never) and each node's ledger."""
        driver_cpus = self.config.entrypoint_num_cpus
        found = await self.store.read_snapshot(lambda db: read_cluster_ledger(db, driver_cpus))
        return found.seen, found.ledger

    # ------------------------------------------------------------------ users
    async def users(self) -> list[UserSummary]:
        return await self.store.read_snapshot(list_users)

    async def user(self, user_id: str) -> UserSummary | None:
        return await self.store.read_snapshot(lambda db: user_summary(db, user_id))

    async def tokens(self, user_id: str) -> list[TokenSummary]:
        return await self.store.read_snapshot(lambda db: user_tokens(db, user_id))

    async def token(self, user_id: str, token_id: str) -> TokenSummary | None:
        return await self.store.read_snapshot(lambda db: token_summary(db, user_id, token_id))


def provide_reads(state: State) -> Reads:
    """The dependency: the app's one ``Reads`` (made at start-up, in ``create_app``)."""
    return cast(Reads, state.reads)
