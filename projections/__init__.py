"""Pure folds from the event log to read models, and the SQL that persists them.

Three projections (``tasks``, ``queue``, ``user_views``) are kept from one fold of each
task's events (``evolve_task``); ``users`` and ``cluster`` have folds of their own.
The package owns the read side whole: the folds, their tables, their rebuild (``fold``,
``parallel``, ``rebuild``), the hook through which the store keeps them inline
(``kept``), and the typed queries its readers need (beside each projection).
"""

from projections.base import EntityFold, EntityProjection, FoldPlan, InlineFold, Rebuild
from projections.fold import fold_log, fold_rows
from projections.kept import KeptProjections, open_store
from projections.rebuild import projection_checkpoint, rebuild_projections, write_projection_state
from projections.registry import ALL_PROJECTIONS, PROJECTION_TABLES, default_projections
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
    "KeptProjections",
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
    "fold_log",
    "fold_rows",
    "load_task",
    "open_store",
    "projection_checkpoint",
    "queue_row",
    "rebuild_projections",
    "write_projection_state",
]

