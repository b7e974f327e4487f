"""The reactor's side of node hygiene (``argus.nodepool.keeper``): it publishes the live
attempts for the nodes' keepers, reads their reports for the turn to judge
(``argus.reactor.holds``), and follows the nodes that ended attempts ran on until they
have cleared (``argus.reactor.clearing``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

from argus.nodepool.keeper import (CHECK_S, LIVE_HEARTBEAT_S, LiveAttempts, NodeReport, read_node_report,
                                   read_node_reports, report_path, write_live)
from argus.nodepool.stacks import withdraw_stacks_request
from argus.rayjobs.reports import ExitReport
from argus.reactor.clearing import REPORT_FRESH_S, EndedAttempt, clearing_nodes
from argus.reactor.state import ReactorState
from argus.store import EventStore
from projections import TaskView
from projections.reads import ProjectionReads

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
        self._placed: dict[str, tuple[tuple[str, ...], str]] = {}  # live attempt -> (gang nodes, driver node)
        self.ended: dict[str, EndedAttempt] = {}  # attempts whose nodes may still be clearing
        self._report_mtimes: dict[str, float] = {}  # of the clearing nodes' reports, as last read
        self._last_reports: list[NodeReport] = []

    async def publish(self, state: ReactorState, exits: Mapping[str, ExitReport] | None = None,
                      stacks_asked: set[str] | None = None) -> None:
        """Write the live set; the attempts that left it start clearing their nodes, and
        their stacks requests (``stacks_asked``, emptied of them) are withdrawn."""
        attempts = [a for t in state.active() if (a := t.latest_attempt) is not None and not a.ended]
        live = tuple(sorted(a.submission_id for a in attempts))
        placed = {a.submission_id: (a.node_ids, a.driver_node_id) for a in attempts}
        now = self.clock()
        if live == self._published and now - self._published_at < LIVE_HEARTBEAT_S:
            self._placed.update(placed)  # a driver's node is known once it runs
            return
        try:
            await asyncio.to_thread(write_live, self.shared_root, LiveAttempts(written_at=now, submission_ids=list(live)))
        except OSError:
            return  # the keepers judge nothing on a stale live set: no harm, only no news
        left = set(self._published or ()) - set(live)
        for sid in left:
            nodes, driver = self._placed.pop(sid, ((), ""))
            report = (exits or {}).get(sid)
            if nodes or driver:
                self.ended[sid] = EndedAttempt(submission_id=sid, node_ids=nodes, driver_node_id=driver,
                                               host_clean=report is not None and report.host_clean, left_at=now)
            if stacks_asked is not None and sid in stacks_asked:
                stacks_asked.discard(sid)
                await asyncio.to_thread(withdraw_stacks_request, self.shared_root, sid)
        self._placed.update(placed)
        self._published, self._published_at = live, now

    async def clearing(self) -> dict[str, str]:
        """The nodes still clearing an ended attempt's processes, and why (their keepers'
        reports are read each turn while any is)."""
        if not self.ended:
            self._report_mtimes = {}
            return {}
        nodes = {n for e in self.ended.values() for n in (*e.node_ids, e.driver_node_id) if n}

        def read() -> dict[str, NodeReport | None]:
            self._report_mtimes = {n: _mtime(report_path(self.shared_root, n)) for n in nodes}
            return {n: read_node_report(self.shared_root, n) for n in nodes}

        clearing, done = clearing_nodes(self.ended.values(), await asyncio.to_thread(read), self.clock())
        for sid in done:
            del self.ended[sid]
        return clearing

    def reports_changed(self) -> bool:
        """A clearing node's keeper wrote since the turn read it (a stat per node)."""
        return any(_mtime(report_path(self.shared_root, n)) != m for n, m in self._report_mtimes.items())

    def keepers(self, now: float) -> set[str]:
        """The nodes whose keepers reported lately (as last read, every ``CHECK_S``)."""
        return {r.node_id for r in self._last_reports if now - r.checked_at <= REPORT_FRESH_S}

    async def reports(self, state: ReactorState, store: EventStore) -> tuple[list[NodeReport], dict[str, TaskView]]:
        """The nodes' reports when due (else none), and the views of the tasks they name."""
        now = self.clock()
        if now - self._read_at < CHECK_S:
            return [], {}
        self._read_at = now
        reports = self._last_reports = await asyncio.to_thread(read_node_reports, self.shared_root)
        named = {p.submission_id.rsplit("--a", 1)[0] for r in reports for p in r.leftovers if p.submission_id}
        views = {tid: state.tasks[tid] for tid in named if tid in state.tasks}
        missing = sorted(named - views.keys())
        if missing:
            views.update(await ProjectionReads(store).tasks(missing))
        return reports, views


def _mtime(path: os.PathLike[str]) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
