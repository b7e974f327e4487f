"""Task endpoints: submit, validate, list, show, spec, cancel, timeline, logs, progress."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, AsyncIterator

import msgspec
from litestar import Controller, MediaType, Request, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException, PermissionDeniedException
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema
from litestar.params import Parameter
from litestar.response import ServerSentEventMessage

from argus.api import jobfiles
from argus.api.auth import request_id
from argus.api.events_sse import Broadcaster
from argus.api.openapi import LOG_EVENTS, also_returns, errors, sse_events
from argus.api.reads import Reads
from argus.api.redact import redacted, redactor_for
from argus.api.schemas import (
    ProgressOut, ProgressPoint, SpecOut, SubmitOut, TaskDetail, TaskList, TaskStateOut,
    TimelineEntry, ValidateError, ValidateOut,
)
from argus.api.streamcap import held
from argus.api.streams import EventStream
from argus.lifecycle import TaskState
from argus.nodepool.stacks import read_stacks
from argus.rayjobs.submission import job_dir
from argus.service import CommandError, Commands, Principal
from argus.taskspec import TaskSpecError
from argus.taskspec.document import decode_json
from argus.views.eta import EtaBoard, with_estimates
from projections.goodput import task_goodput
from projections.tasks_read import PageCursor, summarize, task_detail

__all__ = ["TasksController", "read_document"]


# What a submission's body may be, by Content-Type (parameters such as charset aside):
# the TaskSpec as YAML text, or as JSON (the spec object, or {"spec": <YAML text or object>}).
# A body without a Content-Type is read as YAML; any other type is a 415.
YAML_TYPES = ("text/plain", "application/yaml")
JSON_TYPE = "application/json"


@dataclass
class _SubmitOperation(Operation):
    """Declares the submission body: YAML text or JSON."""

    def __post_init__(self) -> None:
        # text/plain: the YAML text, whatever it holds (the spec checker says what is wrong
        # with it). application/yaml: a YAML document, and that document is a mapping.
        self.request_body = RequestBody(required=True, content={
            "text/plain": OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.STRING, min_length=1, pattern=r"\S",
                description="the TaskSpec as YAML text (not blank)")),
            "application/yaml": OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.OBJECT, description="the TaskSpec: a YAML mapping")),
            JSON_TYPE: OpenAPIMediaType(schema=Schema(
                type=OpenAPIType.OBJECT,
                description='the TaskSpec as an object, or {"spec": <its YAML text or object>}')),
        })


def _media_type(request: Request[Any, Any, Any]) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_document(request: Request[Any, Any, Any]) -> str | dict[str, Any]:
    """The TaskSpec from the body: JSON ``{"spec": ...}`` or a spec object, else YAML text
    (``text/plain``, ``application/yaml`` or no Content-Type). 415 for another type."""
    media = _media_type(request)
    if media and media != JSON_TYPE and media not in YAML_TYPES:
        raise HTTPException(status_code=415, detail=f"Content-Type {media!r} is not accepted: "
                            f"send the TaskSpec as YAML ({', '.join(YAML_TYPES)}) or {JSON_TYPE}")
    body = await request.body()
    if not body.strip():
        raise HTTPException(status_code=400, detail="empty body: send the TaskSpec as YAML "
                            "(Content-Type: application/yaml) or JSON {\"spec\": ...}")
    if media == JSON_TYPE:
        try:
            doc = decode_json(body)
        except msgspec.DecodeError as exc:
            raise HTTPException(status_code=400, detail=f"body is not valid JSON: {exc}") from exc
        except TaskSpecError as exc:
            raise HTTPException(status_code=400, detail=f"body {exc.message}") from exc
        if not isinstance(doc, dict):
            raise HTTPException(status_code=400, detail="JSON body must be an object: the spec, "
                                "or {\"spec\": \"<yaml text>\"}")
        if set(doc) == {"spec"} and isinstance(doc["spec"], (str, dict)):
            doc = doc["spec"]
        return doc
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(status_code=400, detail="body must be UTF-8 YAML text") from exc


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# What ``GET /tasks?state=`` accepts, exactly: state names in any case, comma-separated.
_STATE = "(?:" + "|".join(_any_case(s) for s in TaskState.__members__) + ")"
STATES_PATTERN = rf"^\s*{_STATE}\s*(?:,\s*{_STATE}\s*)*$"
_STATES = re.compile(STATES_PATTERN)


class TasksController(Controller):
    path = "/tasks"
    tags = ["tasks"]

    @post("/", operation_class=_SubmitOperation, status_code=201, responses=errors(409, 415, 429))
    async def submit(self, request: Request[Any, Any, Any], state: State, commands: Commands,
                     who: Principal) -> SubmitOut:
        """Submit a TaskSpec (YAML text or JSON). Returns the new task's id and warnings."""
        wait_s = state.submit_limit.take(who.user_id)
        if wait_s:
            detail, headers = state.submit_limit.refusal(wait_s)
            raise HTTPException(status_code=429, detail=detail, headers=headers)
        document = await read_document(request)
        result = await commands.submit(who, document, request_id(request))
        return SubmitOut(task_id=result.task_id, state=result.state, warnings=result.warnings)

    @post("/validate", operation_class=_SubmitOperation, status_code=200, responses=errors(415))
    async def validate(self, request: Request[Any, Any, Any], commands: Commands, etas: EtaBoard,
                       who: Principal) -> ValidateOut:
        """Check a TaskSpec without submitting it (nothing is written): were it submitted now,
        would it be accepted, where would it wait, and when would it start (a dry run)."""
        document = await read_document(request)
        # A refused spec is this endpoint's answer (200, ok=False), not an HTTP error:
        # caught here, before the app's CommandError handler would turn it into a 4xx.
        try:
            _, prepared = await commands.prepare_admissible(
                document, who.user_id, task_id=f"{who.user_id}-validate")
            await commands.check_limits(who, prepared)
        except CommandError as exc:
            errors = exc.extra.get("errors") or [{"field": "", "message": exc.detail}]
            # A YAML body that is no YAML mapping is not what the operation declares: a 400,
            # as for JSON that is no object. (YAML text sent as text/plain is the checker's.)
            if _media_type(request) == "application/yaml" and any(
                    e.get("field") == "document" for e in errors):
                raise
            return ValidateOut(ok=False, warnings=[], errors=[ValidateError(**e) for e in errors])
        dry = await etas.dry_run(who.user_id, prepared.workload, prepared.demand,
                                       prepared.priority, prepared.time_limit_s)
        span = dry.start_range
        return ValidateOut(ok=True, warnings=list(prepared.warnings), errors=[], position=dry.position,
                           expected_start=dry.expected_start, start_earliest=span.earliest if span else None,
                           start_latest=span.latest if span else None)

    @get("/")
    async def list_tasks(
        self, etas: EtaBoard, reads: Reads, who: Principal,
        task_state: Annotated[str | None, Parameter(
            query="state", description="filter: task states, comma-separated, in any case "
            "(e.g. RUNNING,queued)", schema_extra={"pattern": STATES_PATTERN})] = None,
        user: Annotated[str | None, Parameter(description="admin: one user's tasks")] = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Parameter(
            max_length=200, description="the previous page's next_cursor: the page after it")] = None,
        offset: Annotated[int, Parameter(
            ge=0, le=100_000, description="rows to skip (slow on deep pages: prefer cursor)")] = 0,
    ) -> TaskList:
        """Tasks newest first: the caller's own (an admin: everyone's, or ``user``'s). Page
        with ``cursor`` (each page returns ``next_cursor``; null on the last)."""
        if not who.is_admin:
            if user is not None and user != who.user_id:
                raise PermissionDeniedException("only an admin can list other users' tasks")
            user = who.user_id
        states: list[TaskState] = []
        if task_state is not None:
            names = [s.strip().upper() for s in task_state.split(",")]
            bad = [s for s in names if s not in TaskState.__members__]
            if bad or not _STATES.match(task_state):  # the pattern the schema declares
                raise HTTPException(status_code=400, detail=f"unknown state {bad or task_state!r}; "
                                    f"use one of {', '.join(TaskState.__members__)}")
            states = [TaskState[s] for s in names]
        try:
            after = PageCursor.decode(cursor) if cursor else None
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=f"cursor: {exc}") from exc
        views, total, next_page = await reads.task_page(user=user, states=states, limit=limit, after=after,
                                                        offset=offset)
        hide = await redactor_for(reads, who)
        items = [summarize(v) for v in views]
        if any(v.state.is_waiting() for v in views):
            estimates = await etas.estimates()
            items = [with_estimates(item, estimates) for item in items]
        items = [redacted(hide, item) for item in items]
        return TaskList(items=items, total=total, limit=limit, offset=offset,
                        next_cursor=next_page.encode() if next_page else None)

    @get("/{task_id:str}", responses=errors(404))
    async def show(self, state: State, commands: Commands, etas: EtaBoard, reads: Reads, who: Principal,
                   task_id: str) -> TaskDetail:
        """State, attempts, failure reason, queue position, why it waits, and its goodput
        (the GPU time it held and where it went, up to now)."""
        v = await commands.load_task(who, task_id)
        first = await reads.submitted(v)
        detail = task_detail(v, jobspec=first.spec_raw, expected_start=None, goodput=task_goodput(v, time.time()),
                             driver_cpus=state.config.entrypoint_num_cpus)
        if v.state.is_waiting():  # its start as the list and the queue show it (with_estimates)
            detail = with_estimates(msgspec.structs.replace(detail, queue_position=await reads.queue_position(task_id)),
                                    await etas.estimates())
        return redacted(await redactor_for(reads, who), detail)

    @get("/{task_id:str}/spec", responses=errors(404))
    async def spec(self, commands: Commands, reads: Reads, who: Principal, task_id: str) -> SpecOut:
        """The spec as sent (raw) and as run (expanded command)."""
        first = await reads.submitted(await commands.load_task(who, task_id))
        return SpecOut(task_id=task_id, kind=first.kind, workload=first.workload,
                       spec_raw=first.spec_raw, spec=first.spec, command_raw=first.command_raw,
                       command=first.command, warnings=list(first.warnings))

    @post("/{task_id:str}/cancel", status_code=200, responses=errors(404, 409))
    async def cancel(self, request: Request[Any, Any, Any], commands: Commands, who: Principal,
                     task_id: str) -> TaskStateOut:
        """Cancel: at once while queued; a running task is stopped by the reactor."""
        new_state = await commands.cancel(who, task_id, request_id(request))
        return TaskStateOut(task_id=task_id, state=new_state)

    @get("/{task_id:str}/timeline", responses=errors(404))
    async def timeline(self, commands: Commands, reads: Reads, who: Principal, task_id: str) -> list[TimelineEntry]:
        """Every event of the task, in order."""
        await commands.load_task(who, task_id)  # 404 unless the caller may see it
        hide = await redactor_for(reads, who)
        return [TimelineEntry(position=r.position, version=r.version, type=r.type,
                              recorded_at=r.recorded_at, actor=r.meta.actor,
                              data=hide.value(data) if hide is not None else data)
                for r in await reads.timeline(task_id)
                for data in (msgspec.to_builtins(r.event),)]

    @get("/{task_id:str}/logs", media_type=MediaType.TEXT, responses=errors(400, 403, 404, 409, 429),
         opt={**also_returns("text/event-stream"), **sse_events(LOG_EVENTS)})
    async def logs(
        self, state: State, commands: Commands, broadcaster: Broadcaster, who: Principal, task_id: str,
        tail: Annotated[int, Parameter(ge=0, le=100_000)] = 200,
        attempt: Annotated[int | None, Parameter(ge=1, le=1000)] = None,
        follow: Annotated[bool, Parameter(description="stream as SSE 'log' events")] = False,
    ) -> Any:
        """The tail of an attempt's driver log (latest attempt by default): read backwards
        from its end, at most 16 MiB; a line over 64 KiB is shown by its end after a marker.
        A log (or folder) a job replaced with a symlink is a 400 that names it."""
        v = await commands.load_task(who, task_id)
        path = _log_path(state, v, attempt)
        # Read before answering: a driver.log a job replaced with a link is a 400 naming it.
        text, offset = await _tail(path, tail)
        if not follow:
            return text
        slot = state.stream_slots.take(who)  # a 429 beyond the caps on open streams
        return EventStream(held(slot, _follow(state, commands, broadcaster, who, task_id, path, text, offset, attempt)))

    @get("/{task_id:str}/stacks", media_type=MediaType.TEXT, responses=errors(404))
    async def stacks(self, state: State, commands: Commands, who: Principal, task_id: str,
                     attempt: Annotated[int | None, Parameter(ge=1, le=1000)] = None) -> str:
        """The Python stacks of a stalled attempt's processes, dumped by its driver before
        the stall watchdog stopped it (the latest attempt that has them by default; at most
        512 KiB, from the control plane's folder, which no job can write)."""
        v = await commands.load_task(who, task_id)
        taken = [a for a in v.attempts if a.stacks_at is not None and (attempt is None or a.attempt_no == attempt)]
        if attempt is not None:
            _chosen_attempt(v, attempt)  # a 404 naming an attempt that does not exist
        text = await asyncio.to_thread(read_stacks, state.config.shared_root, taken[-1].submission_id) if taken else None
        if not text:
            which = f"attempt {attempt} has no stacks" if attempt is not None else "no attempt has stacks"
            raise NotFoundException(f"task {task_id}: {which}; they are dumped when the stall "
                                    "watchdog stops a run that made no new step (docs/runs.md)")
        return text

    @get("/{task_id:str}/progress", responses=errors(400, 403, 404, 409))
    async def progress(self, state: State, commands: Commands, reads: Reads, who: Principal, task_id: str,
                       attempt: Annotated[int | None, Parameter(ge=1, le=1000)] = None) -> ProgressOut:
        """Training steps and metrics parsed from the attempt's metrics / driver log (the
        last 32 MiB in all; symlinks and non-regular files are skipped, never read)."""
        v = await commands.load_task(who, task_id)
        chosen = _chosen_attempt(v, attempt)
        path = _log_path(state, v, attempt)
        try:
            points = await asyncio.to_thread(jobfiles.parse_progress, path.parent) if path else []
        except jobfiles.Refused as exc:  # the attempt's folder is a link a job planted
            raise HTTPException(status_code=exc.status, detail=exc.detail) from exc
        total = (await reads.submitted(v)).spec.get("total_training_steps")
        if not isinstance(total, int):  # what the trainer said, as its driver reported
            total = chosen.total_steps if chosen else None
        return ProgressOut(
            task_id=task_id, attempt_no=chosen.attempt_no if chosen else None,
            total_steps=total,
            last_step=points[-1][0] if points else None,
            points=[ProgressPoint(step=s, metrics=m) for s, m in points])


def _chosen_attempt(view: Any, attempt: int | None) -> Any:
    """Attempt ``attempt`` (the latest when None; None when there is none yet)."""
    if not view.attempts:
        return None
    chosen = view.attempts[-1] if attempt is None else next(
        (a for a in view.attempts if a.attempt_no == attempt), None)
    if chosen is None:
        raise NotFoundException(f"task {view.task_id} has no attempt {attempt}")
    return chosen


def _log_path(state: State, view: Any, attempt: int | None) -> Path | None:
    chosen = _chosen_attempt(view, attempt)
    if chosen is None:
        return None
    return Path(job_dir(state.config.shared_root, view.user, chosen.submission_id)) / "driver.log"


async def _tail(path: Path | None, n: int) -> tuple[str, int]:
    """The last ``n`` lines of a driver log and the offset they end at; a 4xx naming the
    component when a job replaced it (or a folder above it) with a link."""
    if path is None:
        return "", 0
    try:
        return await asyncio.to_thread(jobfiles.tail_lines, path, n)
    except jobfiles.Refused as exc:
        raise HTTPException(status_code=exc.status, detail=exc.detail) from exc


async def _follow(state: State, commands: Commands, broadcaster: Broadcaster, who: Principal, task_id: str,
                  path: Path | None, text: str, offset: int, attempt: int | None) -> AsyncIterator[ServerSentEventMessage]:
    """Stream the log: its tail (``text``, ending at ``offset``), then new lines, until the
    task ended and the log is quiet. Without ``attempt``, a new attempt's log is followed
    from its start."""
    for line in text.splitlines():
        yield ServerSentEventMessage(data=line, event="log")
    quiet = 0
    # Ends when the server shuts down, or when the caller's token is revoked or their user
    # disabled meanwhile (the reconnect is then refused).
    while not broadcaster.closing and not broadcaster.cut_off(who):
        await asyncio.sleep(0.5)
        view = await commands.load_task(who, task_id)
        new_path = _log_path(state, view, attempt)
        if new_path != path:  # a new attempt started: follow its log from the start
            path, offset = new_path, 0
        data = b""
        if path is not None:
            data, offset = await asyncio.to_thread(jobfiles.read_new, path, offset)
        for line in data.decode("utf-8", "replace").splitlines():
            yield ServerSentEventMessage(data=line, event="log")
        quiet = 0 if data else quiet + 1
        if view.state.is_terminal() and quiet >= 2:
            yield ServerSentEventMessage(data=view.state.value, event="end")
            return
        if quiet and quiet % 30 == 0:
            yield ServerSentEventMessage(comment="keepalive", data=None)
