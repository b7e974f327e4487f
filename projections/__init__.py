"""Pure folds from the event log to read models, and the SQL that persists them.

Three projections (``tasks``, ``queue``, ``user_views``) are kept from one fold of each
task's events (``evolve_task``); ``users`` and ``cluster`` have folds of their own.
"""

from projections.base import EntityFold, EntityProjection, FoldPlan, InlineFold, Rebuild
from projections.cluster import CLUSTER_FOLD, ClusterProjection, ClusterView, evolve_cluster
from projections.queue import QueueProjection, queue_row
from projections.tasks import (
    TASK_FOLD,
    AttemptView,
    TaskView,
    TasksProjection,
    evolve_task,
    load_task,
)
from projections.user_views import UserViewsProjection
from projections.users import USER_FOLD, TokenView, UsersProjection, UserView, evolve_user

__all__ = [
    "ALL_PROJECTIONS",
    "PROJECTION_TABLES",
    "AttemptView",
    "CLUSTER_FOLD",
    "ClusterProjection",
    "ClusterView",
    "EntityFold",
    "EntityProjection",
    "FoldPlan",
    "InlineFold",
    "QueueProjection",
    "Rebuild",
    "TASK_FOLD",
    "TaskView",
    "TasksProjection",
    "TokenView",
    "UserView",
    "UserViewsProjection",
    "USER_FOLD",
    "UsersProjection",
    "default_projections",
    "evolve_cluster",
    "evolve_task",
    "evolve_user",
    "load_task",
    "queue_row",
]


def default_projections() -> list[EntityProjection]:  # type: ignore[type-arg]
    """Fresh instances of every projection."""
    return [
        TasksProjection(),
        QueueProjection(),
        UserViewsProjection(),
        UsersProjection(),
        ClusterProjection(),
    ]


ALL_PROJECTIONS = tuple(p.name for p in default_projections())
# Every table the projections keep (everything in the database but the log and its consumers).
PROJECTION_TABLES = tuple(t for p in default_projections() for t in p.tables)
