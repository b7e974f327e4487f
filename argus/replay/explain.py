"""``explain ID``: a short, deterministic answer to "why did this task wait / fail / retry?".

Built only from what was recorded: the scheduler's deferrals (reason, what was needed, what
was free), the attempts' failure kinds and evidence, the retry decisions, the cancel. No
guessing: a fact that was not recorded is not stated.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import msgspec

from argus.events import AttemptStarting, FailureKind, RetryScheduled, TaskCanceled, TaskCancelRequested, TaskFailed
from argus.lifecycle import AttemptStatus
from argus.replay.source import open_log
from argus.replay.timeline import TaskTimeline, build_timeline, load_task_events, nodes_phrase
from argus.replay.waits import WaitSegment
from projections.tasks import AttemptView

__all__ = ["Explanation", "explain", "explain_timeline", "fmt_duration", "fmt_num"]


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    state: str
    lines: list[str]
    timeline: TaskTimeline

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def explain(db_path: str | Path, task_id: str) -> Explanation:
    """Explain ``task_id`` from its events in the log at ``db_path``."""
    with open_log(db_path) as source:
        records = load_task_events(source.conn, task_id)
    return explain_timeline(build_timeline(records), records)


def fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0")


def fmt_duration(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S")


def _segment(seg: WaitSegment) -> str:
    span = f"from {_clock(seg.start)} to {_clock(seg.end)}" if seg.end is not None else (
        f"since {_clock(seg.start)}, still waiting at the end of the log")
    lead = f"{fmt_duration(seg.seconds)} " if seg.seconds is not None else ""
    if seg.reason == "queued":  # until the scheduler admitted or deferred it
        until = "until the scheduler's next decision" if seg.end is not None else "with no scheduler decision yet"
        return f"{lead}QUEUED {until} ({span})"
    if seg.reason == "retry_backoff":
        return f"{lead}in retry backoff: {seg.message} ({span})"
    # The deferral's own words first: they say which resource was short (GPUs or CPUs) and
    # by how much. The GPU list is only a fallback for a deferral recorded without them.
    facts = seg.message
    if not facts and (seg.free_gpus_per_node or seg.needed is not None):
        n = seg.needed
        needs = f"needs {nodes_phrase(n.nnodes)} × {n.n_gpus_per_node} GPUs" if n is not None else ""
        free = "[" + ", ".join(fmt_num(x) for x in seg.free_gpus_per_node) + "]"
        facts = f"{needs}; free GPUs per node were {free}"
    return f"{lead}in {seg.state}: {facts} ({seg.reason}, {span})"


def _wait_line(attempt_no: int, segs: list[WaitSegment], started: bool) -> str:
    closed = sum(s.seconds or 0.0 for s in segs)
    parts = "; ".join(_segment(s) for s in segs)
    if started:
        return f"Waited {fmt_duration(closed)} before attempt {attempt_no}: {parts}."
    if all(s.end is not None for s in segs):
        return f"Waited {fmt_duration(closed)} and attempt {attempt_no} never started: {parts}."
    return f"Waiting for attempt {attempt_no}: {parts}."


def _failure(a: AttemptView) -> str:
    kind = a.failure_kind.value if a.failure_kind else a.ray_status
    code = f" (exit code {a.exit_code})" if a.exit_code is not None else ""
    evidence = f": {a.evidence!r}" if a.evidence else ""
    return f"Attempt {a.attempt_no} failed {kind}{code}{evidence}"


def _ran(a: AttemptView) -> str:
    if a.started_at is not None and a.ended_at is not None:
        return f" after running {fmt_duration(a.ended_at - a.started_at)}"
    return ""


def _where(a: AttemptView) -> str:
    """Where the attempt ran: the nodes its gang was admitted onto (the ledger held them)
    and the node of its driver, with their hosts; "" for attempts recorded before."""
    def node(node_id: str, ip: str) -> str:
        return f"{node_id[:12]} ({ip})" if ip else node_id[:12]

    parts = []
    if a.node_ids:
        ips = a.node_ips or ("",) * len(a.node_ids)
        parts.append("was admitted onto node" + ("s " if len(a.node_ids) > 1 else " ")
                     + ", ".join(node(n, ip) for n, ip in zip(a.node_ids, ips)))
    if a.driver_node_id:
        parts.append(f"ran its driver on node {node(a.driver_node_id, a.driver_node_ip)}")
    return " and ".join(parts)


def explain_timeline(tl: TaskTimeline, records: list | None = None) -> Explanation:  # type: ignore[type-arg]
    """The explanation of a task from its timeline (and its records, for the outcome)."""
    task = tl.task
    d = task.demand
    n = len(task.attempts)
    lines = [
        f"Task {task.task_id} ({task.user}, {task.workload}, {nodes_phrase(d.nnodes)} × "
        f"{d.n_gpus_per_node} GPUs) is {task.state.value}"
        + (f" after {n} attempt{'s' if n != 1 else ''}." if n else " with no attempt.")
    ]
    events = [r.event for r in records or []]
    retries = {e.failed_attempt_no: e for e in events if isinstance(e, RetryScheduled)}
    notes = {e.attempt_no: e.note for e in events if isinstance(e, AttemptStarting) and e.note}
    attempts = {a.attempt_no: a for a in task.attempts}
    by_attempt: dict[int, list[WaitSegment]] = {}
    for seg in tl.waits:
        by_attempt.setdefault(seg.before_attempt, []).append(seg)
    for attempt_no in sorted(set(by_attempt) | set(attempts)):
        segs = by_attempt.get(attempt_no, [])
        if segs:
            lines.append(_wait_line(attempt_no, segs, attempt_no in attempts))
        if attempt_no in notes:
            lines.append(f"Attempt {attempt_no} started ahead of its place in line: {notes[attempt_no]}.")
        a = attempts.get(attempt_no)
        if a is None:
            continue
        if where := _where(a):
            lines.append(f"Attempt {attempt_no} {where}.")
        retry = retries.get(attempt_no)
        if retry is not None:
            nxt = attempts.get(attempt_no + 1)
            then = f", which {nxt.ray_status}" if nxt is not None else ", not started yet"
            lines.append(f"{_failure(a)}; retried after {fmt_num(round(retry.delay_s))} s "
                         f"as attempt {attempt_no + 1}{then}.")
        elif a.failure_kind is not None and a.failure_kind is not FailureKind.CANCELED:
            lines.append(_failure(a) + ".")
        elif a.ray_status == AttemptStatus.SUCCEEDED and (attempt_no - 1) not in retries:
            lines.append(f"Attempt {attempt_no} SUCCEEDED{_ran(a)}.")
    lines.extend(_outcome(tl, events))
    return Explanation(task_id=task.task_id, state=task.state.value, lines=lines, timeline=tl)


def _outcome(tl: TaskTimeline, events: list) -> list[str]:  # type: ignore[type-arg]
    task = tl.task
    out: list[str] = []
    for e in events:
        if isinstance(e, TaskCancelRequested):
            out.append(f"Cancel requested by {e.by} at {_clock(e.requested_at)}.")
        elif isinstance(e, TaskCanceled):
            stopped = f"; Ray status {e.ray_status}" if e.ray_status else "; no Ray job was running"
            out.append(f"Canceled by {e.by} at {_clock(e.canceled_at)}{stopped}.")
        elif isinstance(e, TaskFailed):
            kind = e.failure_kind
            why = (f"{kind.value} is not retryable" if not kind.is_retryable()
                   else f"out of attempts ({e.attempt_no} of {task.max_attempts})")
            out.append(f"Failed {kind.value}: {e.error_summary}; not retried: {why}.")
    return out
