"""``argus db``: bring the event database to this code's schema, and report where it stands.

The database path is ``--db``, else ``v2.sqlite.db_path`` from the configuration
(``--config``, else ``$ARGUS_CONFIG``, else defaults).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import click

__all__ = ["db"]


def _db_path(db_path: str | None, config_path: str | None) -> Path:
    if db_path:
        return Path(db_path)
    from argus.config import ConfigError, load_config

    try:
        return Path(load_config(config_path).v2.sqlite.db_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


_db_option = click.option(
    "--db", "db_path", type=click.Path(dir_okay=False), default=None,
    help="SQLite database file (default: v2.sqlite.db_path from the configuration).",
)
_config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, exists=True), default=None,
    help="Configuration file (default: $ARGUS_CONFIG).",
)


@click.group()
def db() -> None:
    """The event database: migrations and status."""


@db.command()
@_db_option
@_config_option
@click.option("--target", type=int, default=None, help="Stop at this schema version.")
def migrate(db_path: str | None, config_path: str | None, target: int | None) -> None:
    """Apply pending migrations (creates the database if it does not exist)."""
    from argus.store.migrate import MigrationError, available_migrations, migrate as run_migrate

    path = _db_path(db_path, config_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        applied = run_migrate(path, target=target)
    except MigrationError as exc:
        raise click.ClickException(str(exc)) from exc
    head = target if target is not None else available_migrations()[-1].version
    if applied:
        click.echo(f"{path}: applied {', '.join(f'{v:04d}' for v in applied)}; now at version {head}")
    else:
        click.echo(f"{path}: already at version {head}; nothing to do")


@db.command()
@_db_option
@_config_option
def status(db_path: str | None, config_path: str | None) -> None:
    """Schema version, pending migrations, log head and projection checkpoints (read-only)."""
    from argus.store import available_migrations, database_facts, open_read_only
    from projections.rebuild import projection_states

    path = _db_path(db_path, config_path)
    if not path.exists():
        raise click.ClickException(f"{path} does not exist; run `argus db migrate` to create it")
    try:
        with open_read_only(path) as (conn, _):
            facts = database_facts(conn, counts=True)
            states = projection_states(conn) if facts.has_event_log else []
    except sqlite3.Error as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from exc
    pending = [m for m in available_migrations() if m.version > facts.schema_version]
    click.echo(f"database:       {path}")
    click.echo(f"schema version: {facts.schema_version} (this code ships {facts.newest_known_version})")
    if facts.schema_version > facts.newest_known_version:
        click.echo("                newer than this code: upgrade Argus before using it")
    click.echo("pending:        " + (", ".join(f"{m.version:04d}_{m.name}" for m in pending) or "none"))
    click.echo(f"journal mode:   {facts.journal_mode}")
    if facts.has_event_log:
        click.echo(f"events:         {facts.events} (head position {facts.head})")
    for p in states:
        where = "live, at the head" if p.live else f"at {p.checkpoint}"
        click.echo(f"projection:     {p.name} v{p.version} {where}")
    for name, position in facts.consumers.items():
        click.echo(f"consumer:       {name} at {position}")
    _integrity_status(path)


def _integrity_status(path: Path) -> None:
    """The high-water mark, the verified point and accepted losses (docs/operations.md)."""
    from argus.store.integrity import highwater_path, integrity_facts

    facts = integrity_facts(str(path))
    click.echo(f"high-water:     {facts.highwater} ({highwater_path(path)})")
    click.echo(f"verified up to: {facts.verified} (checked at each start)")
    for first, last, by in facts.losses:
        click.echo(f"lost:           positions {first}..{last} (accepted by {by})")


@db.command()
@_db_option
@_config_option
def check(db_path: str | None, config_path: str | None) -> None:
    """The start's integrity check, now, without writing (exit 1: damaged): SQLite's
    quick_check, the high-water mark, and the events written since the last start."""
    from argus.store import LogDamaged
    from argus.store.integrity import check_log

    path = _db_path(db_path, config_path)
    if not path.exists():
        raise click.ClickException(f"{path} does not exist")
    result = check_log(str(path))
    if result.damage is not None:
        click.echo(str(LogDamaged(str(path), result.damage)), err=True)
        raise SystemExit(1)
    click.echo(f"{path}: whole (head {result.head}; {result.checked} event(s) decoded and compared with "
               f"their digests, {result.seconds:.2f} s)")


@db.command("accept-loss")
@_db_option
@_config_option
@click.option("--missing", type=int, required=True,
              help="How many events are missing, as the refusal said (a check that you mean this log).")
@click.option("--by", default=None, help="Who accepts it (default: $USER).")
def accept_loss(db_path: str | None, config_path: str | None, missing: int, by: str | None) -> None:
    """Accept that acknowledged events are lost (the log ends before its high-water mark),
    so that the log takes writes again. Their positions are never given to new events:
    the next one comes after them. Run it with Argus stopped, once the file is known to be
    otherwise whole (`argus db check`), and after trying a backup that holds them."""
    import getpass

    from argus.store.integrity import accept_loss as record, check_log

    path = _db_path(db_path, config_path)
    result = check_log(str(path))
    if result.damage is None or result.damage.kind != "missing":
        raise click.ClickException(
            f"{path}: no acknowledged events are missing" if result.damage is None else
            f"{path} is damaged otherwise ({result.damage.detail}); accepting a loss does not repair that")
    try:
        first, last = record(str(path), missing, by or getpass.getuser())
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{path}: positions {first}..{last} recorded as lost; the next event is {last + 1}")
