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
    from argus.store.migrate import available_migrations

    path = _db_path(db_path, config_path)
    if not path.exists():
        raise click.ClickException(f"{path} does not exist; run `argus db migrate` to create it")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = (
            int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])
            if "schema_migrations" in tables else 0
        )
        shipped = available_migrations()
        pending = [m for m in shipped if m.version > version]
        click.echo(f"database:       {path}")
        click.echo(f"schema version: {version} (this code ships {shipped[-1].version if shipped else 0})")
        if version > (shipped[-1].version if shipped else 0):
            click.echo("                newer than this code: upgrade Argus before using it")
        click.echo("pending:        " + (", ".join(f"{m.version:04d}_{m.name}" for m in pending) or "none"))
        click.echo(f"journal mode:   {conn.execute('PRAGMA journal_mode').fetchone()[0]}")
        if "events" in tables:
            count, head = conn.execute("SELECT count(*), coalesce(max(position), 0) FROM events").fetchone()
            click.echo(f"events:         {count} (head position {head})")
        if "projection_state" in tables:
            # ``live`` came with migration 0005; an older database has checkpoints only.
            columns = {r[1] for r in conn.execute("PRAGMA table_info(projection_state)")}
            live_sql = "live" if "live" in columns else "0"
            for name, pversion, checkpoint, live in conn.execute(
                f"SELECT name, version, checkpoint, {live_sql} FROM projection_state ORDER BY name"
            ):
                where = "live, at the head" if live else f"at {checkpoint}"
                click.echo(f"projection:     {name} v{pversion} {where}")
        if "subscriber_checkpoints" in tables:
            for name, position in conn.execute("SELECT name, position FROM subscriber_checkpoints ORDER BY name"):
                click.echo(f"consumer:       {name} at {position}")
    except sqlite3.Error as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from exc
    finally:
        conn.close()
