"""The projections of a log, typed: each method is one read transaction of the read models
kept beside the log, with its result's type. What reads a projection above this package
(the API, the command side, the SFTP door, the reactor) asks here, not with a raw
connection (``tests/test_layers.py`` finds ``read_snapshot`` only in ``argus/store`` and
``projections``). Read-side assembly that puts several readers through the scheduler's
functions in one transaction extends this face in ``argus.views.reads``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

from argus.lifecycle import TaskState
from argus.store.protocol import Snapshots
from projections.cluster import ClusterView, read_cluster
from projections.goodput_table import GoodputReport, read_goodput
from projections.ssh_keys import SshKeyLogin, SshKeySummary, ssh_key_login, user_ssh_keys
from projections.task_view import TaskView
from projections.tasks_read import (
    PageCursor, TaskCounts, task_counts, task_page, task_view, task_views, unfinished_tasks, waiting_count,
)
from projections.teams import TeamDetail, TeamModel, TeamSummary, read_team_model, team_detail, team_list, team_of
from projections.usage_report import UsageBy, UsageReport, read_usage_report
from projections.users import (
    TokenHolder, TokenSummary, UserSummary, list_users, token_holder, token_summary, user_summary, user_tokens,
)

__all__ = ["ProjectionReads", "TaskPage"]

T = TypeVar("T")
TaskPage = tuple[list[TaskView], int, PageCursor | None]


class ProjectionReads:
    """The read models of ``log``, one typed query per method."""

    def __init__(self, log: Snapshots) -> None:
        self.log = log

    async def read_view(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """``query`` in one read transaction: for ``argus.views``' assembly only, which
        reads several projections at once (``tests/test_layers.py`` holds it there)."""
        return await self.log.read_snapshot(query)

    # ------------------------------------------------------------------ tasks
    async def task(self, task_id: str) -> TaskView | None:
        return await self.log.read_snapshot(lambda db: task_view(db, task_id))

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, TaskView]:
        """The views of those of ``task_ids`` that exist, by id."""
        ids = list(task_ids)
        return await self.log.read_snapshot(lambda db: task_views(db, ids)) if ids else {}

    async def unfinished_tasks(self) -> list[TaskView]:
        return await self.log.read_snapshot(unfinished_tasks)

    async def waiting_count(self, user: str) -> int:
        """How many of ``user``'s tasks wait."""
        return await self.log.read_snapshot(lambda db: waiting_count(db, user))

    async def task_page(self, *, user: str | None, states: list[TaskState], limit: int,
                        after: PageCursor | None, offset: int) -> TaskPage:
        """A page of tasks, newest first, the filter's count and the next page's cursor."""
        return await self.log.read_snapshot(
            lambda db: task_page(db, user=user, states=states, limit=limit, after=after, offset=offset))

    async def task_counts(self) -> TaskCounts:
        """Unfinished tasks by state, attempts, failures by kind (for ``/metrics``)."""
        return await self.log.read_snapshot(task_counts)

    async def goodput(self, now: float) -> GoodputReport:
        """Every task's goodput at ``now``, per user and for the cluster."""
        return await self.log.read_snapshot(lambda db: read_goodput(db, now))

    # ------------------------------------------------------------------ the cluster
    async def cluster(self) -> ClusterView | None:
        """The cluster as last observed (None: never)."""
        return await self.log.read_snapshot(read_cluster)

    # ------------------------------------------------------------------ users and their credentials
    async def users(self) -> list[UserSummary]:
        return await self.log.read_snapshot(list_users)

    async def user(self, user_id: str) -> UserSummary | None:
        return await self.log.read_snapshot(lambda db: user_summary(db, user_id))

    async def tokens(self, user_id: str) -> list[TokenSummary]:
        return await self.log.read_snapshot(lambda db: user_tokens(db, user_id))

    async def token(self, user_id: str, token_id: str) -> TokenSummary | None:
        return await self.log.read_snapshot(lambda db: token_summary(db, user_id, token_id))

    async def token_holder(self, token_hash: str, *, revoked: bool = False) -> TokenHolder | None:
        """The holder of an unrevoked token (``revoked``: of any known one)."""
        return await self.log.read_snapshot(lambda db: token_holder(db, token_hash, revoked=revoked))

    async def ssh_keys(self, user_id: str) -> list[SshKeySummary]:
        return await self.log.read_snapshot(lambda db: user_ssh_keys(db, user_id))

    async def ssh_key_login(self, fingerprint: str) -> SshKeyLogin | None:
        """Who an unrevoked SSH key lets in (None: unknown or revoked)."""
        return await self.log.read_snapshot(lambda db: ssh_key_login(db, fingerprint))

    # ------------------------------------------------------------------ teams and usage
    async def teams(self) -> list[TeamSummary]:
        return await self.log.read_snapshot(team_list)

    async def team(self, team_id: str) -> TeamDetail | None:
        return await self.log.read_snapshot(lambda db: team_detail(db, team_id))

    async def team_of(self, user_id: str) -> str:
        """The user's team ("": none)."""
        return await self.log.read_snapshot(lambda db: team_of(db, user_id))

    async def team_model(self) -> TeamModel:
        """Every team, its members, share and quotas, as a scheduler takes them."""
        return await self.log.read_snapshot(read_team_model)

    async def usage(self, *, by: UsageBy, since: float, until: float, now: float) -> UsageReport:
        """GPU-hours, waits and goodput by team or user and day, in [since, until)."""
        return await self.log.read_snapshot(
            lambda db: read_usage_report(db, by=by, since=since, until=until, now=now))
