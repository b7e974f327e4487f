"""Deleting what a finished task wrote under its user's ``jobs/``: by the owner (the files
API's ``DELETE /files/jobs/...``), and the removal both the owner and the retention policy
(``argus.reactor.retention``) use.

A folder of ``jobs/`` belongs to a task: ``<task_id>/`` (its spec) or ``<task_id>--aNN/``
(attempt NN's outputs). Only a task in a terminal state has its files deleted: no attempt
of it runs or waits to resume from them (a retry moves the last attempt's checkpoints
forward). Every deletion walks from ``<shared>/users`` without following a link (a job
may have planted any), is bounded per call (``argus.safefs.remove_tree``), and is
recorded as an ``AttemptOutputsRemoved`` event on the task's stream, a partial one too.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from argus import layout, safefs
from argus.events import AttemptOutputsRemoved, EventBase, EventMeta, task_stream
from argus.rayjobs.submission import attempt_of
from argus.service.auth import Principal
from argus.service.commands import Commands
from argus.store import AppendBatch
from projections import TaskView
from projections.reads import ProjectionReads

__all__ = ["MAX_ENTRIES", "outputs_event", "remove_output"]

# Entries one request deletes at most: a bigger tree takes several calls (each says so).
MAX_ENTRIES = 1_000_000


def outputs_event(view: TaskView, attempt_no: int | None, paths: list[str], removal: safefs.Removal,
                  *, rule: str, by: str, reason: str = "", now: float) -> AppendBatch:
    """The ``AttemptOutputsRemoved`` batch for ``view``'s stream."""
    event: EventBase = AttemptOutputsRemoved(
        task_id=view.task_id, attempt_no=attempt_no, paths=paths, entries=removal.entries,
        bytes=removal.bytes, complete=removal.complete, rule=rule, reason=reason, by=by, removed_at=now)
    return AppendBatch(stream=task_stream(view.task_id), expected_version=None, events=[event], owner=view.user)


def _owned(view: TaskView | None, who: Principal, folder: str, attempt_no: int | None) -> TaskView:
    """The finished task of the caller's that ``jobs/<folder>`` belongs to; else a
    :class:`safefs.Refused` that says why it is not deleted."""
    if view is None or view.user != who.user_id or (
            attempt_no is not None and all(a.attempt_no != attempt_no for a in view.attempts)):
        raise safefs.Refused(409, f"jobs/{folder} is not the folder of a task of yours; Argus "
                             "deletes under jobs/ only what your finished tasks wrote")
    if not view.state.is_terminal():
        raise safefs.Refused(409, f"task {view.task_id} is {view.state.value}: its files are "
                             "deleted only once it has finished (cancel it first: "
                             f"argus cancel {view.task_id})")
    return view


async def remove_output(commands: Commands, who: Principal, parts: list[str], recursive: bool,
                        request_id: str = "") -> tuple[bool, safefs.Removal]:
    """Delete ``jobs/<parts...>`` for its owner: whether it was a folder, and what was
    removed. ``commands``: the API's write side (its store and log). Raises
    :class:`safefs.Refused` (4xx) for anything not deleted, after recording what a refusal
    midway had deleted."""
    store, log = commands.store, commands.log
    users = commands.shared_root / layout.USERS
    folder = parts[0]
    task_id, attempt_no = attempt_of(folder)
    view = _owned(await ProjectionReads(store).task(task_id), who, folder, attempt_no)
    names = [who.user_id, layout.JOBS, *parts]
    fd, st = await asyncio.to_thread(safefs.walk, users, names)
    os.close(fd)
    is_dir = stat.S_ISDIR(st.st_mode)
    if is_dir and not recursive:
        raise safefs.Refused(400, f"jobs/{'/'.join(parts)} is a folder: add ?recursive=true "
                             "(argus files rm -r)")
    meta = EventMeta(actor=who.actor, request_id=request_id)
    try:
        removal = await asyncio.to_thread(lambda: safefs.remove_at(users, names, max_entries=MAX_ENTRIES))
    except safefs.Refused as exc:
        if exc.partial is not None and exc.partial.entries:
            await log.append_batches([outputs_event(view, attempt_no, ["/".join(parts)], exc.partial,
                                                    rule="owner", by=who.user_id, now=time.time())], meta=meta)
        raise
    await log.append_batches([outputs_event(view, attempt_no, ["/".join(parts)], removal, rule="owner",
                                            by=who.user_id, now=time.time())], meta=meta)
    return is_dir, removal
