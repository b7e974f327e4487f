"""The projections a store keeps: the store's ``ReadModels`` hook, and ``open_store``.

The store calls ``KeptProjections`` inside its transactions: ``apply`` folds one append's
events into the entities they touch (each loaded once and saved once, after all of its
events are folded: 100 events over a dozen tasks are a dozen rows), ``catch_up`` rebuilds
at open what changed version or fell behind, ``rebuild`` recomputes everything.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Sequence

from argus.events import Recorded
from argus.lifecycle import IllegalTransition
from argus.store import EventStore, InvariantViolation
from argus.store.sqlite import DEFAULT_MAX_PAYLOAD
from projections.base import EntityProjection, FoldPlan, InlineFold
from projections.rebuild import rebuild_projections
from projections.registry import default_projections

__all__ = ["KeptProjections", "open_store"]


class KeptProjections:
    """``projections`` kept inline by a store (a ``argus.store.ReadModels``)."""

    def __init__(self, projections: Sequence[EntityProjection]) -> None:  # type: ignore[type-arg]
        self.projections = list(projections)
        self.plan = FoldPlan(self.projections)
        self.plan.require_homes()

    def folds(self, event_type: str) -> bool:
        return event_type in self.plan.by_type

    def apply(self, db: sqlite3.Connection, records: Sequence[Recorded]) -> None:
        inline = InlineFold(self.plan)
        try:
            inline.fold(db, records)
        except IllegalTransition as exc:  # a task event its state does not allow
            raise InvariantViolation(str(exc)) from exc
        inline.save(db)

    def catch_up(self, db: sqlite3.Connection) -> list[str]:
        """Rebuild the kept projections whose version changed or that stopped being live,
        and mark the ones not kept as no longer live (appends will not fold them)."""
        state = {
            name: (version, bool(live))
            for name, version, live in db.execute("SELECT name, version, live FROM projection_state")
        }
        stale = [p for p in self.projections if state.get(p.name) != (p.version, True)]
        if stale:
            rebuild_projections(db, db, stale)
        kept = {p.name for p in self.projections}
        left = [name for name, (_, live) in state.items() if live and name not in kept]
        if left:
            db.executemany(
                "UPDATE projection_state SET live = 0, "
                "checkpoint = (SELECT coalesce(max(position), 0) FROM events) WHERE name = ?",
                [(name,) for name in left],
            )
        return [p.name for p in stale]

    def rebuild(self, db: sqlite3.Connection) -> int:
        return rebuild_projections(db, db, self.projections)


async def open_store(
    path: str | Path,
    *,
    projections: Sequence[EntityProjection] | None = None,  # type: ignore[type-arg]
    synchronous: str = "FULL",
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
    shared_url: str = "",
    on_damage: str = "refuse",
) -> EventStore:
    """Open the event store at ``path`` keeping ``projections`` inline (default: all of
    them; ``[]``: the log alone). ``shared_url`` (``postgresql://…``): the log is that
    database's, shared with other hosts, and ``path`` is this process's copy of it
    (``argus.store.mirror``). ``on_damage``: what a damaged log does at open (``EventStore.open``)."""
    kept = KeptProjections(default_projections() if projections is None else projections)
    if shared_url:
        from argus.store.mirror import MirroredStore  # needs the postgres extra: only when asked for

        return await MirroredStore.open_mirrored(shared_url, path, kept, synchronous=synchronous,
                                                 max_payload_bytes=max_payload_bytes)
    return await EventStore.open(path, kept, synchronous=synchronous, max_payload_bytes=max_payload_bytes,
                                 on_damage=on_damage)
