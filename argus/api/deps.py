"""The app's parts as typed handler dependencies (Litestar's ``Provide``): a handler asks
for ``commands: Commands``, ``etas: EtaBoard`` or ``broadcaster: Broadcaster`` (as it asks
for ``reads: Reads``), not for the untyped application state, so mypy checks its use."""

from __future__ import annotations

from typing import cast

from litestar.datastructures import State
from litestar.di import Provide

from argus.api.events_sse import Broadcaster
from argus.api.reads import provide_reads
from argus.service import Commands
from argus.views.eta import EtaBoard

__all__ = ["DEPENDENCIES", "provide_broadcaster", "provide_commands", "provide_etas"]


def provide_commands(state: State) -> Commands:
    """The app's command side (made at start-up, in ``create_app``)."""
    return cast(Commands, state.commands)


def provide_etas(state: State) -> EtaBoard:
    """The app's board of estimated starts."""
    return cast(EtaBoard, state.etas)


def provide_broadcaster(state: State) -> Broadcaster:
    """The app's one tailer of the log, fanning out to SSE clients."""
    return cast(Broadcaster, state.broadcaster)


# The app's dependencies, by parameter name (``create_app`` registers them).
DEPENDENCIES = {
    "reads": Provide(provide_reads, sync_to_thread=False),
    "commands": Provide(provide_commands, sync_to_thread=False),
    "etas": Provide(provide_etas, sync_to_thread=False),
    "broadcaster": Provide(provide_broadcaster, sync_to_thread=False),
}
