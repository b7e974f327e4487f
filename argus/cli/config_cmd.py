"""``argus config show``: the effective configuration (file + ARGUS_* overrides)."""

from __future__ import annotations

import os

import click
import msgspec
import yaml

from argus.cli.serve import UP_DATA_DIR

__all__ = ["config"]


@click.group()
def config() -> None:
    """Inspect the configuration."""


# What `argus up` runs with, written by it at start (in its default --data-dir).
UP_EFFECTIVE_CONFIG = UP_DATA_DIR / "config.yaml"


@config.command("show")
@click.option("--config", "path", type=click.Path(dir_okay=False), default=None,
              help="Config file (default: $ARGUS_CONFIG, else the running `argus up`'s "
                   ".argus/config.yaml in this folder).")
def show(path: str | None) -> None:
    """Print the server configuration and the client settings in effect."""
    from argus.cli.client import Client, client_config_path
    from argus.config import ConfigError, load_config, redact_url

    path = path or os.environ.get("ARGUS_CONFIG")
    if path is None and UP_EFFECTIVE_CONFIG.is_file():
        path = str(UP_EFFECTIVE_CONFIG)
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"# server configuration ({path or 'defaults'} + ARGUS_* overrides)")
    shown = msgspec.to_builtins(cfg)
    shown["v2"]["postgres"]["url"] = redact_url(cfg.v2.postgres.url)  # never print a password
    click.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
    client = Client(None, None)
    click.echo(f"\n# client ({client_config_path()}, $ARGUS_URL, $ARGUS_TOKEN)")
    click.echo(f"url: {client.url}\ntoken: {'set' if client.token else 'not set'}")
