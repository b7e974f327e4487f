"""Every projection of the house, by name."""

from __future__ import annotations

from projections.base import EntityProjection
from projections.cluster import ClusterProjection
from projections.goodput_table import GoodputProjection
from projections.queue import QueueProjection
from projections.runtime_stats import RuntimeStatsProjection
from projections.ssh_keys import SshKeysProjection
from projections.tasks import TasksProjection
from projections.teams import TeamsProjection
from projections.usage import UsageProjection
from projections.user_views import UserViewsProjection
from projections.users import UsersProjection

__all__ = ["ALL_PROJECTIONS", "PROJECTION_TABLES", "default_projections"]


def default_projections() -> list[EntityProjection]:  # type: ignore[type-arg]
    """Fresh instances of every projection."""
    return [
        TasksProjection(),
        QueueProjection(),
        UserViewsProjection(),
        UsersProjection(),
        ClusterProjection(),
        RuntimeStatsProjection(),
        UsageProjection(),
        GoodputProjection(),
        SshKeysProjection(),
        TeamsProjection(),
    ]


ALL_PROJECTIONS = tuple(p.name for p in default_projections())
# Every table the projections keep (everything in the database but the log and its consumers).
PROJECTION_TABLES = tuple(t for p in default_projections() for t in p.tables)
