"""Pure folds from the event log to read models, and the SQL that persists them.

``ALL_PROJECTIONS`` is the order they run in inside an append transaction: ``user_views``
reads the task's previous state from ``tasks``, so it must run before ``tasks``.
"""

from projections.base import EntityProjection, Rebuild
from projections.cluster import ClusterProjection, ClusterView, evolve_cluster
from projections.queue import QueueEntry, QueueProjection, evolve_queue_entry
from projections.tasks import AttemptView, TaskView, TasksProjection, evolve_task, load_task
from projections.user_views import UserViewsProjection
from projections.users import TokenView, UsersProjection, UserView, evolve_user

__all__ = [
    "ALL_PROJECTIONS",
    "AttemptView",
    "ClusterProjection",
    "ClusterView",
    "EntityProjection",
    "QueueEntry",
    "QueueProjection",
    "Rebuild",
    "TaskView",
    "TasksProjection",
    "TokenView",
    "UserView",
    "UserViewsProjection",
    "UsersProjection",
    "default_projections",
    "evolve_cluster",
    "evolve_queue_entry",
    "evolve_task",
    "evolve_user",
    "load_task",
]


def default_projections() -> list[EntityProjection]:  # type: ignore[type-arg]
    """Fresh instances of every projection, in the order they must run."""
    return [
        UserViewsProjection(),
        QueueProjection(),
        TasksProjection(),
        UsersProjection(),
        ClusterProjection(),
    ]


ALL_PROJECTIONS = tuple(p.name for p in default_projections())
