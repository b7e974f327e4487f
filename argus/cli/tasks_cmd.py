"""Client commands for tasks: submit, tasks, show, spec, logs, cancel, watch."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from argus.cli.client import Client, client_options, fmt_age, fmt_eta, fmt_starts_in, fmt_time, print_table

__all__ = ["cancel", "logs", "show", "spec", "stacks", "submit", "tasks", "watch"]

_END_EVENTS = {"TaskSucceeded", "TaskIncomplete", "TaskFailed", "TaskCanceled"}


@click.command()
@click.argument("file", type=click.File("rb"))
@click.option("--validate", "--dry-run", "validate", is_flag=True,
              help="Submit nothing: check the spec, and say where it would wait and when it would start.")
@client_options
def submit(client: Client, file: Any, validate: bool) -> None:
    """Submit the TaskSpec in FILE (YAML; '-' reads stdin). Prints the task id."""
    body = file.read()
    path = "/tasks/validate" if validate else "/tasks"
    r = client.request("POST", path, content=body, headers={"Content-Type": "application/yaml"})
    data = r.json()
    if validate and not data["ok"]:
        # Every problem, one per line: all of them can be fixed before the next try.
        client.out(data, lambda d: click.echo("\n".join(
            f"error: {e['field']}: {e['message']}" if e.get("field") else f"error: {e['message']}"
            for e in d["errors"]), err=True))
        sys.exit(1)

    def human(d: dict[str, Any]) -> None:
        click.echo(_dry_run(d) if validate else d["task_id"])
        for w in d.get("warnings", []):
            click.echo(f"warning: {w}", err=True)

    client.out(data, human)


def _dry_run(d: dict[str, Any]) -> str:
    """What ``--dry-run`` says: valid, and where and when it would start."""
    out = "ok: the spec is valid"
    if d.get("position"):
        out += f"; submitted now it would be number {d['position']} in line"
    if d.get("expected_start"):
        out += f", {fmt_eta(d)}"
    return out


@click.command()
@click.option("--state", "state", default=None, help="Filter: QUEUED, RUNNING, ... (comma-separated).")
@click.option("--user", default=None, help="Admin: one user's tasks.")
@click.option("--limit", default=50, show_default=True)
@click.option("--cursor", default=None, help="Start after the page that printed this cursor.")
@client_options
def tasks(client: Client, state: str | None, user: str | None, limit: int, cursor: str | None) -> None:
    """List tasks, newest first (yours; an admin sees everyone's)."""
    params: dict[str, Any] = {"limit": limit}
    if cursor:
        params["cursor"] = cursor
    if state:
        params["state"] = state
    if user:
        params["user"] = user
    data = client.request("GET", "/tasks", params=params).json()

    def human(d: dict[str, Any]) -> None:
        now = time.time()
        print_table(["task", "name", "user", "state", "gpus", "age", "ran", "step", "starts", "why"], [
            [t["task_id"], t.get("name") or "", t["user"], t["state"], t.get("gpus", ""),
             fmt_age(now - t["created_at"]), _ran(t, now), _step(t), fmt_starts_in(t, now), _why(t)]
            for t in d["items"]])
        if d.get("next_cursor"):
            click.echo(f"({len(d['items'])} of {d['total']}; next page: --cursor {d['next_cursor']})")

    client.out(data, human)


def _ran(t: dict[str, Any], now: float) -> str:
    """How long the latest attempt ran (so far)."""
    if not t.get("started_at"):
        return ""
    return fmt_age((t.get("ended_at") or now) - t["started_at"])


def _step(t: dict[str, Any]) -> str:
    if t.get("step") is None:
        return ""
    return f"{t['step']}/{t['total_steps']}" if t.get("total_steps") else str(t["step"])


def _reason(kind: str, text: str | None) -> str:
    """``KIND: text``, or the kind alone when there is no text (a canceled task's, say)."""
    return f"{kind}: {text}" if text else kind


_WAITING = ("QUEUED", "PENDING_RESOURCES")


def _why(t: dict[str, Any]) -> str:
    """Why it waits now, else why it failed, short enough for one row (a task waiting for
    a retry says why it waits: its last attempt's failure is in ``argus show``)."""
    if t.get("wait_reason") and t.get("state") in _WAITING:
        return _reason(t["wait_reason"], t.get("wait_message"))[:70]
    if t.get("failure_kind"):
        return _reason(t["failure_kind"], t.get("error_summary"))[:70]
    if t.get("wait_reason"):
        return _reason(t["wait_reason"], t.get("wait_message"))[:70]
    return ""


@click.command()
@click.argument("task_id")
@client_options
def show(client: Client, task_id: str) -> None:
    """A task: state, attempts, failure reason, queue position and why it waits."""
    d = client.request("GET", f"/tasks/{task_id}").json()

    def human(d: dict[str, Any]) -> None:
        dm = d["demand"]
        name = f" \"{d['name']}\"" if d.get("name") else ""
        click.echo(f"task      {d['task_id']}{name}  ({d['kind']} {d['workload']}, user {d['user']})")
        click.echo(f"state     {d['state']}")
        model = f"{' or '.join(dm['gpu_types'])} " if dm.get("gpu_types") else ""
        click.echo(f"demand    {dm['nnodes']} node(s) x {dm['n_gpus_per_node']} {model}GPU(s), "
                   f"{dm['cpus_per_node']:g} CPU(s) per node; priority {d['priority']}")
        click.echo(f"created   {fmt_time(d['created_at'])}   updated {fmt_time(d['updated_at'])}")
        if d.get("queue_position"):
            eta = f"; {fmt_eta(d)}" if d.get("expected_start") else ""
            click.echo(f"queue     position {d['queue_position']}{eta}")
        if d.get("wait_reason"):
            click.echo(f"waiting   {d['wait_reason']}: {d['wait_message']}")
        lost = sum(1 for a in d["attempts"] if a.get("failure_kind") == "CLUSTER_LOST")
        click.echo(f"retries   {lost} of {d['max_attempts']} attempts lost to the cluster; resource "
                   "races retried until the cluster's longest wait (docs/taskspec.md, Retries)")
        if d.get("next_run_at") and d["next_run_at"] > time.time() and d["state"] in _WAITING:
            click.echo(f"retry at  {fmt_time(d['next_run_at'])}")  # (a time past is no news)
        if d.get("failure_kind"):
            click.echo(f"failure   {_reason(d['failure_kind'], d.get('error_summary'))}")
        for w in d.get("warnings", []):
            click.echo(f"warning   {w}")
        for line in goodput_lines(d.get("goodput")):
            click.echo(line)
        if d["attempts"]:
            click.echo("attempts:")
            print_table(["no", "submission", "ray status", "started", "ended", "checkpoint", "failure"], [
                [a["attempt_no"], a["submission_id"], a["ray_status"], fmt_time(a.get("started_at")),
                 fmt_time(a.get("ended_at")), _checkpoint(a), a.get("failure_kind") or ""] for a in d["attempts"]])
        for a in d["attempts"]:
            if a.get("stacks_at"):
                click.echo(f"stacks    attempt {a['attempt_no']} stalled; stacks of {a.get('stacks_processes', 0)} "
                           f"process(es): argus stacks {d['task_id']} --attempt {a['attempt_no']}")

    client.out(d, human)


# Where held GPU time went besides training, as ``argus show`` names it (docs/runs.md, Goodput).
_SPENT_ON = (("placement", "placement"), ("startup", "start-up"), ("stalled", "stalled"),
             ("lost", "lost to restarts"), ("failed", "failed"), ("other", "other"))


def fmt_gpu_time(gpu_s: float) -> str:
    """GPU-seconds as GPU-s under an hour, else GPU-h."""
    return f"{gpu_s:.0f} GPU-s" if gpu_s < 3600 else f"{gpu_s / 3600:.1f} GPU-h"


def goodput_lines(g: dict[str, Any] | None) -> list[str]:
    """``goodput`` lines of ``argus show``: productive of held, then where the rest went."""
    if not g or not g.get("held"):
        return [f"goodput   nothing held yet; waited {fmt_age(g['waiting_s'])}"] if g else []
    held = g["held"]
    steps = f", {g['lost_steps']} step(s) trained again" if g.get("lost_steps") else ""
    rest = [f"{name} {fmt_gpu_time(g[key])} ({100 * g[key] / held:.0f} %{steps if key == 'lost' else ''})"
            for key, name in _SPENT_ON if g.get(key)]
    return [f"goodput   {100 * g['ratio']:.0f} % productive: {fmt_gpu_time(g['productive'])} of "
            f"{fmt_gpu_time(held)} held; waited {fmt_age(g['waiting_s'])}",
            f"          the rest: {'; '.join(rest) or 'none'}"]


def _checkpoint(attempt: dict[str, Any]) -> str:
    """The attempt's last checkpoint the reactor saw: what a resume starts from."""
    step = attempt.get("checkpoint_step")
    return "" if step is None else f"step {step} at {fmt_time(attempt.get('checkpointed_at'))}"


@click.command()
@click.argument("task_id")
@click.option("--raw", "which", flag_value="raw", help="Only the spec as submitted.")
@click.option("--expanded", "which", flag_value="expanded", help="Only the command as run.")
@client_options
def spec(client: Client, task_id: str, which: str | None) -> None:
    """A task's spec: as submitted, and the command as it runs ($HOME expanded)."""
    d = client.request("GET", f"/tasks/{task_id}/spec").json()

    def human(d: dict[str, Any]) -> None:
        if which != "expanded":
            click.echo(d["spec_raw"].rstrip("\n"))
        if which is None:
            click.echo("\n# command as run:")
        if which != "raw":
            click.echo(d["command"].rstrip("\n"))

    client.out(d, human)


@click.command()
@click.argument("task_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the task ends.")
@click.option("-n", "--tail", default=200, show_default=True, help="Lines from the end.")
@click.option("--attempt", type=int, default=None, help="Attempt number (default: latest).")
@client_options
def logs(client: Client, task_id: str, follow: bool, tail: int, attempt: int | None) -> None:
    """The driver log of a task's attempt."""
    params: dict[str, Any] = {"tail": tail}
    if attempt:
        params["attempt"] = attempt
    if not follow:
        click.echo(client.request("GET", f"/tasks/{task_id}/logs", params=params).text, nl=False)
        return
    for ev in client.stream(f"/tasks/{task_id}/logs", params={**params, "follow": "true"}):
        if ev.get("event") == "end":
            click.echo(f"-- task {ev['data']}", err=True)
            return
        click.echo(ev["data"])


@click.command()
@click.argument("task_id")
@click.option("--attempt", type=int, default=None, help="Attempt number (default: the latest that has them).")
@client_options
def stacks(client: Client, task_id: str, attempt: int | None) -> None:
    """The Python stacks of a stalled attempt, dumped before the watchdog stopped it."""
    params = {"attempt": attempt} if attempt else {}
    click.echo(client.request("GET", f"/tasks/{task_id}/stacks", params=params).text, nl=False)


@click.command()
@click.argument("task_id")
@client_options
def cancel(client: Client, task_id: str) -> None:
    """Cancel a task (a running one is stopped by the reactor)."""
    d = client.request("POST", f"/tasks/{task_id}/cancel").json()
    client.out(d, lambda d: click.echo(f"{d['task_id']}: {d['state']}"))


def event_line(data: dict[str, Any]) -> str:
    """One readable line for an event as the stream sends it: when, whose, what happened
    (the replay tool's own summary of the event's facts)."""
    import msgspec

    from argus.events import Event, EventMeta, Recorded
    from argus.replay.timeline import summarize

    try:
        event = msgspec.convert(data["data"], Event)
        what = summarize(Recorded(position=data["position"], stream=data["stream"], version=0,
                                  type=data["type"], event=event, meta=EventMeta(), owner=None,
                                  recorded_at=data["recorded_at"]))
    except (msgspec.ValidationError, KeyError):  # a newer server's event: say its type
        what = data.get("type", "?")
    subject = data["stream"].removeprefix("task-")
    return f"{data['position']:>6} {fmt_time(data['recorded_at'])[11:]}  {subject}  {what}"[:300]


@click.command()
@click.argument("task_id", required=False)
@click.option("--after", type=int, default=None, help="Start after this log position (default: now).")
@client_options
def watch(client: Client, task_id: str | None, after: int | None) -> None:
    """Follow the event log live (yours; an admin sees all). With TASK_ID: only that
    task's events, from its start, until it ends (exit 0 if it succeeded)."""
    params: dict[str, Any] = {}
    if task_id and after is None:
        after = 0
    if after is not None:
        params["after"] = after
    stream = f"task-{task_id}" if task_id else None
    for ev in client.stream("/events", params=params):
        data = json.loads(ev["data"])
        if stream and data["stream"] != stream:
            continue
        click.echo(ev["data"] if client.as_json else event_line(data))
        if stream and data["type"] in _END_EVENTS:
            sys.exit(0 if data["type"] == "TaskSucceeded" else 1)
