"""The reactor's side of node hygiene (``argus.nodepool.keeper``): it publishes the live
attempts for the nodes' keepers, and reads their reports for the turn to judge
(``argus.reactor.holds``)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

from argus.nodepool.keeper import CHECK_S, LIVE_HEARTBEAT_S, LiveAttempts, NodeReport, read_node_reports, write_live
from argus.reactor.state import ReactorState
from argus.store import EventStore
from projections import TaskView
from projections.tasks_read import task_view

__all__ = ["NodeWatch"]


class NodeWatch:
    """``publish`` the live set after a turn (when it changed, and every heartbeat);
    ``reports`` every ``CHECK_S``, with the views of the tasks whose leftovers they name
    (the reactor keeps only unfinished tasks; a leftover is of one that ended)."""

    def __init__(self, shared_root: str, clock: Callable[[], float]) -> None:
        self.shared_root, self.clock = shared_root, clock
        self._published: tuple[str, ...] | None = None
        self._published_at = -1e18
        self._read_at = -1e18

    async def publish(self, state: ReactorState) -> None:
        live = tuple(sorted(a.submission_id for t in state.active() if (a := t.latest_attempt) is not None
                            and not a.ended))
        now = self.clock()
        if live == self._published and now - self._published_at < LIVE_HEARTBEAT_S:
            return
        try:
            await asyncio.to_thread(write_live, self.shared_root, LiveAttempts(written_at=now, submission_ids=list(live)))
        except OSError:
            return  # the keepers judge nothing on a stale live set: no harm, only no news
        self._published, self._published_at = live, now

    async def reports(self, state: ReactorState, store: EventStore) -> tuple[list[NodeReport], dict[str, TaskView]]:
        """The nodes' reports when due (else none), and the views of the tasks they name."""
        now = self.clock()
        if now - self._read_at < CHECK_S:
            return [], {}
        self._read_at = now
        reports = await asyncio.to_thread(read_node_reports, self.shared_root)
        named = {p.submission_id.rsplit("--a", 1)[0] for r in reports for p in r.leftovers if p.submission_id}
        views = {tid: state.tasks[tid] for tid in named if tid in state.tasks}
        missing = sorted(named - views.keys())
        if missing:
            def load(db: sqlite3.Connection) -> dict[str, TaskView]:
                return {tid: v for tid in missing if (v := task_view(db, tid)) is not None}
            views.update(await store.read_snapshot(load))
        return reports, views
