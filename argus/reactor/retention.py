"""The retention policy (``v2.retention``; docs/data.md, "Retention"): what the reactor
deletes of finished tasks' outputs under ``<shared>/users/*/jobs/``, once every
``interval_s``, each deletion recorded as an ``AttemptOutputsRemoved`` event.

- ``max_age_days``: an attempt's folder goes that many days after the attempt ended.
- ``keep_checkpoints``: of a task's checkpoints (verl's ``global_step_<N>/`` folders, in
  any of its attempt folders, at most ``_SEARCH_DEPTH`` folders down) the ones with the
  highest steps are kept, the others deleted.

Only tasks in a terminal state are looked at: a running task, a waiting one and one that
will resume from its last attempt's checkpoints are never touched. A folder of ``jobs/``
that belongs to no task of its user is left alone. Everything is walked from
``<shared>/users`` without following a link (a job may plant any), and one pass deletes
at most ``max_entries_per_pass`` entries; the rest waits for the next pass.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from pathlib import Path
from typing import Callable, Iterator

import msgspec

from argus import layout, safefs
from argus.config import RetentionConfig
from argus.events import AttemptOutputsRemoved, task_stream
from argus.rayjobs.submission import attempt_of
from argus.store import AppendBatch, EventStore
from projections import TaskView
from projections.reads import ProjectionReads

__all__ = ["Planned", "Retention", "plan_removals"]

log = logging.getLogger("argus.reactor.retention")

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_SEARCH_DEPTH = 4  # folders below an attempt's where checkpoints are looked for
_SEARCH_DIRS = 2000  # folders looked into per attempt, at most
_DAY = 86_400.0


class Planned(msgspec.Struct, frozen=True, kw_only=True):
    """One deletion the policy decided: ``parts`` below ``jobs/`` of ``user``."""

    user: str
    task_id: str
    attempt_no: int
    parts: tuple[str, ...]
    rule: str
    reason: str


def _dirs(fd: int) -> list[str]:
    """The names of the real folders (not links) in the folder ``fd``, by name."""
    names = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
                    names.append(entry.name)
            except OSError:
                continue
    return sorted(names)


def _checkpoints(users: Path, names: list[str]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """``(step, path below the attempt folder)`` of each ``global_step_<N>/`` folder in the
    folder ``users/names...``, breadth first, bounded; links never followed."""
    try:
        top = safefs.open_dir(users, names, create_from=len(names))
    except safefs.Refused:
        return
    queue: list[tuple[int, tuple[str, ...]]] = [(top, ())]
    looked = 0
    try:
        while queue:
            fd, rel = queue.pop(0)
            try:
                looked += 1
                for name in _dirs(fd):
                    match = _STEP_DIR.match(name)
                    if match:
                        yield int(match.group(1)), (*rel, name)
                    elif len(rel) + 1 < _SEARCH_DEPTH and looked + len(queue) < _SEARCH_DIRS:
                        try:
                            queue.append((os.open(name, safefs.DIR_FLAGS, dir_fd=fd), (*rel, name)))
                        except OSError:
                            continue  # swapped for a link meanwhile: not followed
            finally:
                os.close(fd)
    finally:
        for fd, _ in queue:
            os.close(fd)


def plan_removals(users: Path, user: str, folders: list[str], views: dict[str, TaskView],
                  policy: RetentionConfig, now: float) -> list[Planned]:
    """What the policy deletes of ``user``'s ``jobs/`` folders (``folders``), given their
    tasks' views (a folder whose task is missing, another user's or not finished: nothing)."""
    by_task: dict[str, list[tuple[int, str]]] = {}
    for folder in folders:
        task_id, attempt_no = attempt_of(folder)
        view = views.get(task_id)
        if attempt_no is None or view is None or view.user != user or not view.state.is_terminal():
            continue
        by_task.setdefault(task_id, []).append((attempt_no, folder))
    planned: list[Planned] = []
    for task_id, attempts in sorted(by_task.items()):
        view = views[task_id]
        ended = {a.attempt_no: a.ended_at if a.ended_at is not None else view.updated_at for a in view.attempts}
        kept: list[tuple[int, str]] = []
        for attempt_no, folder in sorted(attempts):
            if attempt_no not in ended:
                continue  # a folder no attempt of the task made: not the policy's
            age = now - ended[attempt_no]
            if policy.max_age_days > 0 and age > policy.max_age_days * _DAY:
                planned.append(Planned(user=user, task_id=task_id, attempt_no=attempt_no, parts=(folder,),
                                       rule="max_age_days", reason=(
                                           f"attempt ended {age / _DAY:.1f} days ago "
                                           f"(v2.retention.max_age_days {policy.max_age_days:g})")))
            else:
                kept.append((attempt_no, folder))
        if policy.keep_checkpoints > 0:
            planned += _prune_checkpoints(users, user, task_id, kept, policy.keep_checkpoints)
    return planned


def _prune_checkpoints(users: Path, user: str, task_id: str, attempts: list[tuple[int, str]],
                       keep: int) -> list[Planned]:
    found = [(step, attempt_no, folder, rel) for attempt_no, folder in attempts
             for step, rel in _checkpoints(users, [user, layout.JOBS, folder])]
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)  # the highest steps first
    kept_steps = ", ".join(str(f[0]) for f in found[:keep])
    return [Planned(user=user, task_id=task_id, attempt_no=attempt_no, parts=(folder, *rel),
                    rule="keep_checkpoints",
                    reason=f"keeps the last {keep} checkpoint(s) of the task (steps {kept_steps})")
            for _step, attempt_no, folder, rel in found[keep:]]


def _jobs_folders(users: Path) -> dict[str, list[str]]:
    """Each user's folders in ``jobs/`` (links and files left out)."""
    found: dict[str, list[str]] = {}
    try:
        fd = safefs.open_dir(users.parent, [users.name], create_from=1)
    except safefs.Refused:
        return found
    try:
        names = _dirs(fd)
    finally:
        os.close(fd)
    for user in names:
        try:
            jobs = safefs.open_dir(users, [user, layout.JOBS], create_from=2)
        except safefs.Refused:
            continue
        try:
            found[user] = _dirs(jobs)
        finally:
            os.close(jobs)
    return found


def _remove(users: Path, plans: list[Planned], budget: int, now: float) -> list[AppendBatch]:
    """Carry the plans out, each as one event (a partial one too), within ``budget`` entries."""
    batches: list[AppendBatch] = []
    for plan in plans:
        if budget <= 0:
            break
        names = [plan.user, layout.JOBS, *plan.parts]
        try:
            removal = safefs.remove_at(users, names, max_entries=budget)
        except safefs.Refused as exc:
            log.warning("retention: %s not deleted: %s", "/".join(plan.parts), exc.detail)
            if exc.partial is None or not exc.partial.entries:
                continue
            removal = exc.partial
        budget -= removal.entries
        event = AttemptOutputsRemoved(
            task_id=plan.task_id, attempt_no=plan.attempt_no, paths=["/".join(plan.parts)],
            entries=removal.entries, bytes=removal.bytes, complete=removal.complete, rule=plan.rule,
            reason=plan.reason, by="retention", removed_at=now)
        log.info("retention: deleted jobs/%s of %s (%d entries, %d bytes; %s: %s)", "/".join(plan.parts),
                 plan.user, removal.entries, removal.bytes, plan.rule, plan.reason)
        batches.append(AppendBatch(stream=task_stream(plan.task_id), expected_version=None,
                                   events=[event], owner=plan.user))
    return batches


class Retention:
    """The policy's passes for the reactor: :meth:`due`, then :meth:`apply`, which deletes
    and returns the events to record."""

    def __init__(self, shared_root: str, policy: RetentionConfig, clock: Callable[[], float]) -> None:
        self.users = Path(layout.users_dir(shared_root))
        self.policy = policy
        self.clock = clock
        self.next_at = 0.0

    @property
    def enabled(self) -> bool:
        p = self.policy
        return p.interval_s > 0 and (p.max_age_days > 0 or p.keep_checkpoints > 0)

    def due(self, now: float) -> bool:
        return self.enabled and now >= self.next_at

    async def apply(self, store: EventStore, now: float) -> list[AppendBatch]:
        """One pass: every user's ``jobs/``, their tasks' views from the log's projections
        (``ProjectionReads.tasks``), the deletions, and their events (not yet recorded)."""
        self.next_at = now + self.policy.interval_s
        folders = await asyncio.to_thread(_jobs_folders, self.users)
        ids = sorted({attempt_of(f)[0] for names in folders.values() for f in names})
        views: dict[str, TaskView] = await ProjectionReads(store).tasks(ids)

        def work() -> list[AppendBatch]:
            plans = [p for user, names in sorted(folders.items())
                     for p in plan_removals(self.users, user, names, views, self.policy, now)]
            return _remove(self.users, plans, self.policy.max_entries_per_pass, now)

        return await asyncio.to_thread(work)
