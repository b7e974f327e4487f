"""Plain-text tables for the replay CLI (the same data goes out as ``--json``)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence

from argus.replay.explain import fmt_duration, fmt_num
from argus.replay.stats import Stats, UserStats
from argus.replay.timeline import TaskTimeline
from argus.replay.timetravel import World

__all__ = ["render_stats", "render_timeline", "render_world", "table", "ts"]


def ts(t: float | None) -> str:
    """UTC time, second precision."""
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return fmt_num(v)
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = "(none)") -> str:
    if not rows:
        return "  " + empty
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda r: "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(list(headers)), line(["-" * w for w in widths]), *map(line, cells)])


def render_world(w: World) -> str:
    out = [f"World at position {w.position} (recorded {ts(w.recorded_at)} UTC)", "", "Tasks:"]
    out.append(table(
        ["TASK", "USER", "STATE", "ATTEMPTS", "WAIT REASON", "FAILURE", "UPDATED"],
        [(t.task_id, t.user, t.state, t.attempts, t.wait_reason, t.failure_kind, ts(t.updated_at))
         for t in w.tasks],
    ))
    out += ["", "Queue (in order):"]
    out.append(table(
        ["#", "TASK", "USER", "PRIO", "STATE", "NEEDS", "WAIT REASON", "MESSAGE", "SINCE"],
        [(q.position, q.task_id, q.user, q.priority, q.state, f"{q.demand.nnodes}×{q.demand.n_gpus_per_node} GPU",
          q.wait_reason, q.wait_message, ts(q.waiting_since)) for q in w.queue],
        empty="(empty)",
    ))
    out += ["", "Running attempts:"]
    out.append(table(
        ["TASK", "ATTEMPT", "SUBMISSION", "STATE", "RAY", "NEEDS", "STARTED"],
        [(r.task_id, r.attempt_no, r.submission_id, r.task_state, r.ray_status,
          f"{r.nnodes}×{r.n_gpus_per_node} GPU", ts(r.started_at)) for r in w.running],
    ))
    c = w.cluster
    reach = {None: "never observed", True: "reachable", False: f"UNREACHABLE: {c.error}"}[c.reachable]
    out += ["", f"Cluster ({reach}, observed {ts(c.observed_at)}):"]
    out.append(table(
        ["NODE", "IP", "FREE GPU", "TOTAL GPU", "FREE CPU", "TOTAL CPU"],
        [(n.node_id, n.ip, n.free_gpus, n.total_gpus, n.free_cpus, n.total_cpus) for n in c.nodes],
    ))
    return "\n".join(out)


def render_timeline(tl: TaskTimeline) -> str:
    t = tl.task
    out = [f"Task {t.task_id}  user {t.user}  {t.workload}  state {t.state.value}", "", "Events:"]
    lines = table(
        ["POS", "TIME (UTC)", "SOURCE", "ACTOR", "EVENT", "WHAT"],
        [(e.position, ts(e.time), e.source, e.actor, e.type, e.summary) for e in tl.entries],
    ).split("\n")
    out += lines[:2]
    for entry, line in zip(tl.entries, lines[2:]):
        # What changed goes under its event: one change per line keeps the table narrow.
        out.append(line)
        out.extend(f"         ↳ {change}" for change in entry.changes)
    out += ["", "Attempts:"]
    fields = [
        ("submission", lambda a: a.submission_id),
        ("ray status", lambda a: a.ray_status),
        ("decided", lambda a: ts(a.decided_at)),
        ("submitted", lambda a: ts(a.submitted_at)),
        ("started", lambda a: ts(a.started_at)),
        ("ended", lambda a: ts(a.ended_at)),
        ("ran", lambda a: fmt_duration(a.ended_at - a.started_at)
         if a.started_at is not None and a.ended_at is not None else "-"),
        ("failure", lambda a: a.failure_kind.value if a.failure_kind else "-"),
        ("exit code", lambda a: a.exit_code),
        ("evidence", lambda a: a.evidence or "-"),
        ("recovered", lambda a: "yes" if a.recovered else "no"),
    ]
    # Attempts side by side: one column per attempt.
    out.append(table(["", *(f"attempt {a.attempt_no}" for a in tl.attempts)],
                     [(name, *(get(a) for a in tl.attempts)) for name, get in fields])
               if tl.attempts else "  (none)")
    out += ["", f"Waited {fmt_duration(tl.waited_s)} in all:"]
    out.append(table(["REASON", "WAITED"],
                     [(r, fmt_duration(s)) for r, s in tl.wait_by_reason.items()]))
    still = [s for s in tl.waits if s.end is None]
    if still:
        out.append(f"  still waiting since {ts(still[-1].start)} ({still[-1].reason})")
    return "\n".join(out)


def _stats_row(u: UserStats) -> tuple[Any, ...]:
    outcomes = ", ".join(f"{k} {v}" for k, v in u.outcomes.items()) or "-"
    retries = ", ".join(f"{k} {v}" for k, v in u.retries.items()) or "-"
    p = lambda x: fmt_duration(x) if x is not None else "-"  # noqa: E731
    return (u.user, u.submitted, outcomes, u.waits, p(u.wait_p50_s), p(u.wait_p95_s),
            f"{u.gpu_hours:.2f}", retries)


def _goodput_row(u: UserStats) -> tuple[Any, ...]:
    g = u.goodput
    hours = lambda x: f"{x / 3600:.2f}"  # noqa: E731
    ratio = f"{100 * g.ratio:.0f} %" if g.ratio is not None else "-"
    return (u.user, u.goodput_tasks, hours(g.held), hours(g.productive), ratio, hours(g.placement),
            hours(g.startup), hours(g.stalled), f"{hours(g.lost)} ({g.lost_steps} steps)", hours(g.failed),
            hours(g.other), fmt_duration(g.waiting_s))


def render_stats(s: Stats) -> str:
    start = "the start of the log" if s.since <= 0 else f"{ts(s.since)} UTC"  # no --since: all of it
    head = f"From {start} to {ts(s.until)} UTC"
    return head + "\n" + table(
        ["USER", "SUBMITTED", "ENDED", "WAITS", "WAIT P50", "WAIT P95", "GPU-H", "RETRIES"],
        [*(_stats_row(u) for u in s.users), _stats_row(s.overall)],
    ) + "\n\nGoodput of the tasks that ended in the window (their whole lives), in GPU-hours " \
        "(docs/runs.md, Goodput):\n" + table(
        ["USER", "TASKS", "HELD", "PRODUCTIVE", "GOODPUT", "PLACEMENT", "START-UP", "STALLED", "LOST",
         "FAILED", "OTHER", "WAITED"],
        [*(_goodput_row(u) for u in s.users), _goodput_row(s.overall)],
    )
