"""The shape of every projection: a pure per-entity fold, and tables kept from it.

An ``EntityFold`` keys each event to an entity (a task, a user, the cluster) and folds the
event into it with a pure ``evolve``. An ``EntityProjection`` persists what it needs of
that entity in its own tables, with its own name, version and checkpoint. Several
projections may share one fold — ``tasks``, ``queue`` and ``user_views`` all read the one
``TaskView`` — so an event is folded once however many tables it changes.

The same folds serve both paths:
- inline (``InlineFold``): inside the append transaction, each touched entity is loaded
  once, folded through every event of the transaction, and saved once at the end;
- rebuild (``argus.store.rows.fold_log`` into a ``Rebuild``): fold the whole log in
  memory, then bulk-write every entity.
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar, Generic, Sequence, TypeVar

from argus.events import Recorded

__all__ = ["EntityFold", "EntityProjection", "FoldPlan", "InlineFold", "Rebuild"]

E = TypeVar("E")


class EntityFold(Generic[E]):
    """How one kind of entity is folded from the log."""

    name: ClassVar[str]
    entity: ClassVar[type]  # what ``evolve`` returns (a msgspec Struct)
    handles: ClassVar[frozenset[str]]  # event types this fold takes
    # The projection whose tables ``load`` reads: a store that keeps any projection of
    # this fold must keep this one too, or ``load`` would read a stale entity.
    home: ClassVar[str]

    def key(self, rec: Recorded) -> str:
        raise NotImplementedError

    def evolve(self, entity: E | None, rec: Recorded) -> E | None:
        """Pure: the entity after ``rec`` (None when the entity no longer exists)."""
        raise NotImplementedError

    def load(self, db: sqlite3.Connection, key: str) -> E | None:
        """The entity as the home projection's tables hold it now."""
        raise NotImplementedError


class EntityProjection(Generic[E]):
    """Tables kept from one fold, with a version (a change means: rebuild on start)."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    fold: ClassVar[EntityFold]  # type: ignore[type-arg]

    def save(self, db: sqlite3.Connection, key: str, before: E | None, after: E | None) -> None:
        """Write the change from ``before`` to ``after`` (both from the same fold)."""
        raise NotImplementedError

    def write_all(self, db: sqlite3.Connection, entities: dict[str, E]) -> None:
        """Fill the (empty) tables with every entity."""
        raise NotImplementedError


class FoldPlan:
    """Which folds run for which event types, and which projections each fold feeds."""

    def __init__(self, projections: Sequence[EntityProjection]) -> None:  # type: ignore[type-arg]
        self.projections = list(projections)
        self.by_fold: dict[EntityFold, list[EntityProjection]] = {}  # type: ignore[type-arg]
        for p in self.projections:
            self.by_fold.setdefault(p.fold, []).append(p)
        self.by_type: dict[str, tuple[EntityFold, ...]] = {}  # type: ignore[type-arg]
        for fold in self.by_fold:
            for t in fold.handles:
                self.by_type[t] = (*self.by_type.get(t, ()), fold)

    def require_homes(self) -> None:
        """Refuse a set of projections that would fold from a table nobody keeps."""
        names = {p.name for p in self.projections}
        for fold, users in self.by_fold.items():
            if fold.home not in names:
                raise ValueError(
                    f"projection(s) {', '.join(p.name for p in users)} need {fold.home!r}, "
                    f"whose tables hold the {fold.name} entities they are folded from"
                )


class InlineFold:
    """The entities one append transaction touches: load once, fold, save once."""

    def __init__(self, plan: FoldPlan) -> None:
        self.plan = plan
        # (fold, key) -> [as loaded, as folded so far]
        self.touched: dict[tuple[EntityFold, str], list[object]] = {}  # type: ignore[type-arg]

    def apply(self, db: sqlite3.Connection, rec: Recorded) -> None:
        for fold in self.plan.by_type.get(rec.type, ()):
            key = fold.key(rec)
            pair = self.touched.get((fold, key))
            if pair is None:
                loaded = fold.load(db, key)
                pair = self.touched[(fold, key)] = [loaded, loaded]
            pair[1] = fold.evolve(pair[1], rec)

    def save(self, db: sqlite3.Connection) -> None:
        by_fold = self.plan.by_fold
        for (fold, key), (before, after) in self.touched.items():
            for projection in by_fold[fold]:
                projection.save(db, key, before, after)
        self.touched.clear()


class Rebuild:
    """Entities folded in memory, per fold (``argus.store.rows.fold_log`` fills them);
    ``write`` clears the projections' tables and fills them."""

    def __init__(self, plan: FoldPlan) -> None:
        self.plan = plan
        self.entities: dict[EntityFold, dict[str, object]] = {f: {} for f in plan.by_fold}  # type: ignore[type-arg]

    def write(self, db: sqlite3.Connection) -> None:
        for fold, projections in self.plan.by_fold.items():
            for projection in projections:
                for table in projection.tables:
                    db.execute(f"DELETE FROM {table}")
                projection.write_all(db, self.entities[fold])  # type: ignore[arg-type]
