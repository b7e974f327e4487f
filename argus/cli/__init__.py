"""The ``argus`` command line.

Sub-commands are imported lazily: ``argus --help`` or ``argus submit`` must not pay for
importing Ray or Litestar. Each concern registers its command in ``COMMANDS`` as
``"name": "module:attribute"``.
"""

from __future__ import annotations

import importlib

import click

__all__ = ["main", "COMMANDS"]

COMMANDS: dict[str, str] = {
    "submit": "argus.cli.tasks_cmd:submit",
    "tasks": "argus.cli.tasks_cmd:tasks",
    "show": "argus.cli.tasks_cmd:show",
    "spec": "argus.cli.tasks_cmd:spec",
    "logs": "argus.cli.tasks_cmd:logs",
    "stacks": "argus.cli.tasks_cmd:stacks",
    "cancel": "argus.cli.tasks_cmd:cancel",
    "watch": "argus.cli.tasks_cmd:watch",
    "queue": "argus.cli.cluster_cmd:queue",
    "cluster": "argus.cli.cluster_cmd:cluster",
    "drain": "argus.cli.cluster_cmd:drain",
    "undrain": "argus.cli.cluster_cmd:undrain",
    "shares": "argus.cli.cluster_cmd:shares",
    "goodput": "argus.cli.cluster_cmd:goodput",
    "teams": "argus.cli.teams_cmd:teams",
    "usage": "argus.cli.teams_cmd:usage",
    "users": "argus.cli.admin_cmd:users",
    "tokens": "argus.cli.admin_cmd:tokens",
    "keys": "argus.cli.keys_cmd:keys",
    "files": "argus.cli.admin_cmd:files",
    "config": "argus.cli.config_cmd:config",
    "serve": "argus.cli.serve:serve",
    "up": "argus.cli.serve:up",
    "db": "argus.cli.db:db",
    "reactor": "argus.cli.reactor:reactor",
    "node": "argus.cli.node:node",
    "replay": "argus.cli.replay:replay",
    "sim": "argus.cli.sim_cmd:sim",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="argus")
def main() -> None:
    """Argus: queue, admit and follow verl training tasks on a Ray cluster."""
