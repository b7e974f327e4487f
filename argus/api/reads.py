"""The API's read side, typed: ``Reads`` holds every query a handler makes of the read
models (``argus.views.reads.ViewReads``: each one read transaction of the store, each with
its result's type) and of the log itself.

Handlers get it through Litestar's ``Provide`` (a ``reads: Reads`` parameter), not from the
untyped application state: a handler that read ``state.store.read_snapshot(lambda db: …)``
got ``Any`` back, and mypy could not check what it did with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from litestar.datastructures import State

from argus.events import Recorded, TaskSubmitted, task_stream
from argus.views.reads import ViewReads
from projections import TaskView
from projections.reads import TaskPage

if TYPE_CHECKING:
    from argus.config import ArgusConfig
    from argus.store import EventStore

__all__ = ["Reads", "TaskPage", "provide_reads"]


class Reads(ViewReads):
    """The read models and the log of ``store``, as the API asks for them under ``config``."""

    def __init__(self, store: EventStore, config: ArgusConfig) -> None:
        super().__init__(store, config)
        self.store = store

    async def submitted(self, view: TaskView) -> TaskSubmitted:
        """The task's TaskSubmitted, read at its log position (``seq``), not with its stream."""
        event = (await self.store.read(view.seq - 1, 1))[0].event
        assert isinstance(event, TaskSubmitted)  # a task's stream starts with it
        return event

    async def timeline(self, task_id: str) -> list[Recorded]:
        """Every event of the task, in order."""
        return await self.store.read_stream(task_stream(task_id))


def provide_reads(state: State) -> Reads:
    """The dependency: the app's one ``Reads`` (made at start-up, in ``create_app``)."""
    return cast(Reads, state.reads)
