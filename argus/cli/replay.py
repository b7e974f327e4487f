"""``argus replay``: forensics on the event log (reads it only; never writes to it).

Point it at the live database or at a copy (``--db``, default: the configured
``v2.sqlite.db_path`` if it exists, else ``argus up``'s ``./.argus/argus.sqlite3``). Exit status: 0 fine, 1 ``verify`` found differences, 2 the question
could not be answered (no such task, not an Argus database, …).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click
import msgspec

from argus.cli.serve import UP_DATA_DIR
from argus.cli.teams_cmd import day_start, render_usage, usage_options
from argus.config import SchedulerConfig

__all__ = ["replay"]


def _json(obj: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(obj), indent=2))


def _guard(fn: Callable[[], Any]) -> Any:
    from argus.replay import ReplayError

    try:
        return fn()
    except ReplayError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


# Where `argus up` keeps its database when run with its default --data-dir.
UP_DEFAULT_DB = UP_DATA_DIR / "argus.sqlite3"


def _db(ctx: click.Context) -> str:
    """--db, else the configured database if it exists, else `argus up`'s in this folder."""
    path: str | None = ctx.obj["db"]
    if path is not None:
        return path
    from argus.config import ConfigError, load_config

    try:
        configured = load_config().v2.sqlite.db_path
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (or name the database with --db)") from exc
    for candidate in (Path(configured), UP_DEFAULT_DB):
        if candidate.is_file():
            return str(candidate)
    raise click.ClickException(
        f"no database found at {configured} (v2.sqlite.db_path) nor at {UP_DEFAULT_DB} "
        "(argus up's); name it: argus replay --db <data-dir>/argus.sqlite3 <command>")


@click.group()
@click.option("--db", "db", type=click.Path(dir_okay=False), default=None,
              help="Database file to inspect (default: the configured v2.sqlite.db_path); "
                   "export also reads a PostgreSQL URL.")
@click.pass_context
def replay(ctx: click.Context, db: str | None) -> None:
    """Rebuild, verify and investigate the event log (read-only)."""
    ctx.ensure_object(dict)
    ctx.obj["db"] = db


@replay.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--max-diffs", default=100, show_default=True, help="Differences to keep.")
@click.pass_context
def verify(ctx: click.Context, as_json: bool, max_diffs: int) -> None:
    """Rebuild every projection from the log and compare with the live tables."""
    from argus.replay import verify as run

    report = _guard(lambda: run(_db(ctx), max_diffs=max_diffs))
    if report.copied:
        click.echo("note: the database could not be opened read-only in place; "
                   "read from a temporary copy", err=True)
    _json(report) if as_json else click.echo(report.render())
    sys.exit(0 if report.ok else 1)


def _configured_scheduler() -> SchedulerConfig:
    """The scheduler's configuration (the log does not record it): its policy, shares and quotas."""
    from argus.config import ConfigError, load_config

    try:
        return load_config().v2.scheduler
    except ConfigError:
        return SchedulerConfig(policy="fifo")


@replay.command()
@click.argument("point", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the world as JSON.")
@click.option("--policy", default=None,
              help="Show the queue in this policy's order (default: the configured v2.scheduler.policy).")
@click.pass_context
def at(ctx: click.Context, point: str | None, as_json: bool, policy: str | None) -> None:
    """The world at POINT: a log position, or a time (ISO-8601, or UNIX seconds as @N).

    Default: the head of the log. The queue is shown in the order the policy considers it."""
    from argus.replay import world_at
    from argus.replay.render import render_world
    from argus.scheduler import ORDERS

    sched = _configured_scheduler()
    chosen = policy or sched.policy
    if chosen not in ORDERS:
        raise click.BadParameter(f"unknown policy {chosen!r}; one of {', '.join(sorted(ORDERS))}",
                                 param_hint="--policy")
    world = _guard(lambda: world_at(_db(ctx), point, policy=chosen, sched=sched))
    _json(world) if as_json else click.echo(render_world(world))


@replay.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def task(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """A task's whole life: events, attempts side by side, waits per reason."""
    from argus.replay import task_timeline
    from argus.replay.render import render_timeline

    tl = _guard(lambda: task_timeline(_db(ctx), task_id))
    _json(tl) if as_json else click.echo(render_timeline(tl))


@replay.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def explain(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Why did this task wait, fail or retry? (from recorded facts only)"""
    from argus.replay import explain as run

    ex = _guard(lambda: run(_db(ctx), task_id))
    if as_json:
        _json({"task_id": ex.task_id, "state": ex.state, "lines": ex.lines,
               "waits": ex.timeline.waits, "attempts": ex.timeline.attempts})
    else:
        click.echo(ex.text)


@replay.command()
@click.option("--since", default=None, help="Window start: ISO-8601 or UNIX seconds (default: 0).")
@click.option("--until", default=None, help="Window end, exclusive (default: now).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def stats(ctx: click.Context, since: str | None, until: str | None, as_json: bool) -> None:
    """Per user and overall: outcomes, wait p50/p95, GPU-hours, retries by failure kind."""
    from argus.replay import parse_time, stats as run
    from argus.replay.render import render_stats

    def go() -> Any:
        lo = parse_time(since) if since else 0.0
        hi = parse_time(until) if until else time.time()
        return run(_db(ctx), lo, hi)

    result = _guard(go)
    _json(result) if as_json else click.echo(render_stats(result))


@replay.command("usage")
@usage_options
@click.pass_context
def usage_cmd(ctx: click.Context, by: str, since: str | None, until: str | None, fmt: str) -> None:
    """GPU-hours, wait and goodput by team or user and day, as `argus usage` shows them,
    from projections rebuilt from the log (not the live tables)."""
    from argus.replay.usage import usage_from_log

    now = time.time()
    start = day_start(since) if since else (now // 86400 - 30) * 86400
    end = day_start(until) if until else now
    report = _guard(lambda: usage_from_log(_db(ctx), by=by, since=start, until=end, now=now))  # type: ignore[arg-type]
    render_usage(msgspec.to_builtins(report), fmt)


@replay.command("export")
@click.option("--after", default=0, show_default=True, help="Export positions after this one.")
@click.option("--until", default=None, type=int, help="Last position to export (default: head).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File to write (default: stdout).")
@click.pass_context
def export_cmd(ctx: click.Context, after: int, until: int | None, output: Path | None) -> None:
    """Write a range of the log as JSON Lines (one event per line, every column)."""
    from argus.replay import export_jsonl

    if output is None:
        n = _guard(lambda: export_jsonl(_db(ctx), sys.stdout.buffer, after=after, until=until))
    else:
        # Written beside it, then renamed: a failed export leaves no file that looks like one.
        partial = output.with_name(output.name + ".partial")
        try:
            with partial.open("wb") as out:
                n = _guard(lambda: export_jsonl(_db(ctx), out, after=after, until=until))
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"exported {n} events", err=True)


@replay.command("import")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("target", type=click.Path(dir_okay=False))
@click.option("--allow-partial", is_flag=True,
              help="Accept an export that does not start at position 1 (projections not rebuilt).")
def import_cmd(source: Path, target: str, allow_partial: bool) -> None:
    """Load an export (SOURCE, JSON Lines) into TARGET, a new or empty database: a SQLite
    file, or a PostgreSQL URL (postgresql://user@host:port/db) whose log is empty."""
    from argus.config import redact_url
    from argus.replay import import_jsonl
    from argus.replay.source import is_postgres_url

    with source.open("rb") as lines:
        report = _guard(lambda: import_jsonl(lines, target, allow_partial=allow_partial))
    rebuilt = ("read models rebuilt" if report.rebuilt else
               "each host's copy makes its read models when it first starts on it" if is_postgres_url(target)
               else "read models NOT rebuilt (partial log)")
    click.echo(f"imported {report.events} events (positions {report.first_position}.."
               f"{report.last_position}) into {redact_url(target)}; {rebuilt}")
