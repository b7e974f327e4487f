"""Client commands for tasks: submit, tasks, show, spec, logs, cancel, watch."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from argus.cli.client import Client, client_options, fmt_time, print_table

__all__ = ["cancel", "logs", "show", "spec", "submit", "tasks", "watch"]

_END_EVENTS = {"TaskSucceeded", "TaskFailed", "TaskCanceled"}


@click.command()
@click.argument("file", type=click.File("rb"))
@click.option("--validate", is_flag=True, help="Only check the spec; submit nothing.")
@client_options
def submit(client: Client, file: Any, validate: bool) -> None:
    """Submit the TaskSpec in FILE (YAML; '-' reads stdin). Prints the task id."""
    body = file.read()
    path = "/tasks/validate" if validate else "/tasks"
    r = client.request("POST", path, content=body, headers={"Content-Type": "application/yaml"})
    data = r.json()
    if validate and not data["ok"]:
        client.out(data, lambda d: click.echo("\n".join(f"error: {e['field']}: {e['message']}"
                                                         for e in d["errors"]), err=True))
        sys.exit(1)

    def human(d: dict[str, Any]) -> None:
        click.echo("ok: the spec is valid" if validate else d["task_id"])
        for w in d.get("warnings", []):
            click.echo(f"warning: {w}", err=True)

    client.out(data, human)


@click.command()
@click.option("--state", "state", default=None, help="Filter: QUEUED, RUNNING, ... (comma-separated).")
@click.option("--user", default=None, help="Admin: one user's tasks.")
@click.option("--limit", default=50, show_default=True)
@click.option("--offset", default=0)
@client_options
def tasks(client: Client, state: str | None, user: str | None, limit: int, offset: int) -> None:
    """List tasks, newest first (yours; an admin sees everyone's)."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if state:
        params["state"] = state
    if user:
        params["user"] = user
    data = client.request("GET", "/tasks", params=params).json()

    def human(d: dict[str, Any]) -> None:
        print_table(["task", "user", "state", "attempts", "created", "reason"], [
            [t["task_id"], t["user"], t["state"], t["attempts"], fmt_time(t["created_at"]),
             t.get("failure_kind") or t.get("wait_reason") or ""] for t in d["items"]])
        if d["total"] > len(d["items"]) + offset:
            click.echo(f"({len(d['items'])} of {d['total']}; use --offset/--limit)")

    client.out(data, human)


@click.command()
@click.argument("task_id")
@client_options
def show(client: Client, task_id: str) -> None:
    """A task: state, attempts, failure reason, queue position and why it waits."""
    d = client.request("GET", f"/tasks/{task_id}").json()

    def human(d: dict[str, Any]) -> None:
        dm = d["demand"]
        click.echo(f"task      {d['task_id']}  ({d['kind']} {d['workload']}, user {d['user']})")
        click.echo(f"state     {d['state']}")
        click.echo(f"demand    {dm['nnodes']} node(s) x {dm['n_gpus_per_node']} GPU(s), "
                   f"{dm['cpus_per_node']:g} CPU(s) per node; priority {d['priority']}")
        click.echo(f"created   {fmt_time(d['created_at'])}   updated {fmt_time(d['updated_at'])}")
        if d.get("queue_position"):
            click.echo(f"queue     position {d['queue_position']}")
        if d.get("wait_reason"):
            click.echo(f"waiting   {d['wait_reason']}: {d['wait_message']}")
        if d.get("next_run_at"):
            click.echo(f"retry at  {fmt_time(d['next_run_at'])}")
        if d.get("failure_kind"):
            click.echo(f"failure   {d['failure_kind']}: {d.get('error_summary') or ''}")
        for w in d.get("warnings", []):
            click.echo(f"warning   {w}")
        if d["attempts"]:
            click.echo("attempts:")
            print_table(["no", "submission", "ray status", "started", "ended", "failure"], [
                [a["attempt_no"], a["submission_id"], a["ray_status"], fmt_time(a["started_at"]),
                 fmt_time(a["ended_at"]), a.get("failure_kind") or ""] for a in d["attempts"]])

    client.out(d, human)


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
@client_options
def cancel(client: Client, task_id: str) -> None:
    """Cancel a task (a running one is stopped by the reactor)."""
    d = client.request("POST", f"/tasks/{task_id}/cancel").json()
    client.out(d, lambda d: click.echo(f"{d['task_id']}: {d['state']}"))


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
        if client.as_json:
            click.echo(ev["data"])
        else:
            payload = {k: v for k, v in data["data"].items()
                       if k not in ("type", "spec", "spec_raw", "payload", "command_raw")}
            brief = " ".join(f"{k}={v}" for k, v in payload.items() if v not in (None, "", [], {}))
            click.echo(f"{data['position']:>7} {fmt_time(data['recorded_at'])} {data['type']:<20} "
                       f"{data['stream']}  {brief[:200]}")
        if stream and data["type"] in _END_EVENTS:
            sys.exit(0 if data["type"] == "TaskSucceeded" else 1)
