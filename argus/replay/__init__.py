"""Replay and forensics: read a log (never write it) and rebuild, verify, time-travel,
explain. Every state here comes from the one fold (``projections.rebuild_projections``
and ``projections.tasks.evolve_task``), the same code the store runs on start.

Library entry points (all take the path of a database file and open it read-only):
``verify``, ``world_at``, ``task_timeline``, ``explain``, ``stats``, ``export_jsonl``;
``import_jsonl`` writes a new, empty database.
"""

from argus.replay.explain import Explanation, explain
from argus.replay.source import ReplayError, open_log, parse_time, resolve_point
from argus.replay.stats import Stats, UserStats, stats
from argus.replay.timeline import TaskNotFound, TaskTimeline, TimelineEntry, task_timeline
from argus.replay.timetravel import ClusterAt, NodeAt, RunningAttempt, TaskAt, World, read_world, world_at
from argus.replay.transfer import ImportRefused, ImportReport, export_jsonl, import_jsonl
from argus.replay.verify import RowDiff, VerifyReport, verify
from argus.replay.waits import WaitSegment, wait_segments

__all__ = [
    "ClusterAt",
    "Explanation",
    "ImportRefused",
    "ImportReport",
    "NodeAt",
    "ReplayError",
    "RowDiff",
    "RunningAttempt",
    "Stats",
    "TaskAt",
    "TaskNotFound",
    "TaskTimeline",
    "TimelineEntry",
    "UserStats",
    "VerifyReport",
    "WaitSegment",
    "World",
    "explain",
    "export_jsonl",
    "import_jsonl",
    "open_log",
    "parse_time",
    "read_world",
    "resolve_point",
    "stats",
    "task_timeline",
    "verify",
    "wait_segments",
    "world_at",
]
