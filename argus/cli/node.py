"""``argus node head|worker``: the Ray node pool watchdogs (run by supervisord in the image).

Settings come from the ``ARGUS_*`` environment variables of seed 003 §3.3 (see
``argus.nodepool.config``); the flags here override the few that operators and tests
change most often.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec

__all__ = ["node"]


def _load(overrides: dict[str, Any]) -> Any:
    from argus.config import ConfigError
    from argus.nodepool import NodePoolConfig

    try:
        cfg = NodePoolConfig.from_env()
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    changes = {key: value for key, value in overrides.items() if value is not None}
    return msgspec.structs.replace(cfg, **changes) if changes else cfg


def _common(func: Any) -> Any:
    func = click.option("--node-ip", "node_ip", default=None,
                        help="IP to advertise (default: $ARGUS_NODE_IP, else detected).")(func)
    func = click.option("--print-config", is_flag=True,
                        help="Print the effective settings as JSON and exit.")(func)
    return func


def _maybe_print(cfg: Any, print_config: bool) -> None:
    if print_config:
        click.echo(msgspec.json.format(msgspec.json.encode(cfg)).decode())
        sys.exit(0)


@click.group()
def node() -> None:
    """Run this machine as a Ray head or worker of the Argus node pool."""


@node.command()
@_common
@click.option("--ttl-s", type=float, default=None, help="head.json lifetime ($ARGUS_TTL_S, 60).")
@click.option("--refresh-s", type=float, default=None,
              help="head.json refresh period ($ARGUS_REFRESH_S, 10).")
def head(node_ip: str | None, print_config: bool, ttl_s: float | None,
         refresh_s: float | None) -> None:
    """Run `ray start --head --block` and publish head.json while it lives.

    Exits non-zero when Ray exits, so that the supervisor starts it again."""
    from argus.nodepool import HeadWatchdog, StopFlag

    cfg = _load({"node_ip": node_ip, "ttl_s": ttl_s, "refresh_s": refresh_s})
    _maybe_print(cfg, print_config)
    if cfg.refresh_s >= cfg.ttl_s:
        raise click.ClickException("refresh_s must be shorter than ttl_s")
    sys.exit(HeadWatchdog(cfg, stop=StopFlag().install()).run())


@node.command()
@_common
@click.option("--poll-s", type=float, default=None,
              help="head.json poll period ($ARGUS_POLL_S, 5).")
def worker(node_ip: str | None, print_config: bool, poll_s: float | None) -> None:
    """Wait for a fresh head.json, join that head, and rejoin when Ray exits or the head
    changes. Runs until SIGTERM."""
    from argus.nodepool import StopFlag, WorkerWatchdog

    cfg = _load({"node_ip": node_ip, "poll_s": poll_s})
    _maybe_print(cfg, print_config)
    sys.exit(WorkerWatchdog(cfg, stop=StopFlag().install()).run())
