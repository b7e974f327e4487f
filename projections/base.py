"""The shape of every projection: a pure per-entity fold, and tables kept from it.

An ``EntityFold`` keys each event to an entity (a task, a user, the cluster) and folds the
event into it with a pure ``evolve``. An ``EntityProjection`` persists what it needs of
that entity in its own tables, with its own name, version and checkpoint. Several
projections may share one fold — ``tasks``, ``queue`` and ``user_views`` all read the one
``TaskView`` — so an event is folded once however many tables it changes.

The same folds serve both paths:
- inline (``InlineFold``): inside the append transaction, the entities it touches are
  loaded together, folded through every event of the transaction, and saved together at
  the end (each projection writes all of its changes with one statement per kind of row);
- rebuild (``projections.fold.fold_log`` into a ``Rebuild``): fold the whole log in
  memory, then bulk-write every entity.
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar, Generic, Sequence, TypeVar

from argus.events import Recorded

__all__ = ["Change", "EntityFold", "EntityProjection", "FoldPlan", "InlineFold", "Rebuild", "insert_sql", "upsert_sql"]

E = TypeVar("E")

# One entity's change within a transaction: (key, as loaded, as folded). ``before`` is
# None for an entity the tables did not hold.
Change = tuple[str, E | None, E | None]


def insert_sql(table: str, columns: str) -> str:
    """A plain INSERT of ``columns`` (what a rebuild uses: its keys are all new)."""
    return f"INSERT INTO {table} ({columns}) VALUES ({','.join('?' * len(columns.split(',')))})"


def upsert_sql(table: str, columns: str, key: str, fixed: frozenset[str] = frozenset()) -> str:
    """INSERT, or on a clash of ``key`` UPDATE the columns that can change. SQLite leaves
    an index alone when none of its columns is SET, so columns that never change after
    the insert (``fixed``) are left out of the SET: their indexes are written once."""
    names = [c.strip() for c in columns.split(",")]
    keys = {c.strip() for c in key.split(",")}
    sets = ", ".join(f"{c} = excluded.{c}" for c in names if c not in fixed and c not in keys)
    return f"{insert_sql(table, columns)} ON CONFLICT ({key}) DO UPDATE SET {sets}"


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

    def load_many(self, db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, E]:
        """The entities among ``keys`` that the tables hold (override with one query)."""
        found = {}
        for key in keys:
            entity = self.load(db, key)
            if entity is not None:
                found[key] = entity
        return found


class EntityProjection(Generic[E]):
    """Tables kept from one fold, with a version (a change means: rebuild on start)."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    fold: ClassVar[EntityFold]  # type: ignore[type-arg]

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[E]]) -> None:
        """Write every change of one transaction (each entity once, from the same fold)."""
        raise NotImplementedError

    def write_all(self, db: sqlite3.Connection, entities: dict[str, E]) -> None:
        """Add ``entities`` to the tables, which hold none of their keys (a rebuild clears
        the tables, then adds every entity, in one part or several)."""
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
    """The entities one append transaction touches: loaded together, folded, saved together."""

    def __init__(self, plan: FoldPlan) -> None:
        self.plan = plan
        # fold -> key -> [as loaded, as folded so far]
        self.touched: dict[EntityFold, dict[str, list[object]]] = {}  # type: ignore[type-arg]

    def fold(self, db: sqlite3.Connection, records: Sequence[Recorded]) -> None:
        """Fold ``records`` (in order) into the entities they touch; raises what ``evolve``
        raises for an event the entity does not allow."""
        by_type = self.plan.by_type
        work = [(fold, fold.key(rec), rec) for rec in records for fold in by_type.get(rec.type, ())]
        keys: dict[EntityFold, dict[str, None]] = {}  # type: ignore[type-arg]
        for fold, key, _ in work:
            keys.setdefault(fold, {})[key] = None
        for fold, wanted in keys.items():
            entities = self.touched.setdefault(fold, {})
            missing = [k for k in wanted if k not in entities]
            loaded = fold.load_many(db, missing) if missing else {}
            for key in missing:
                entity = loaded.get(key)
                entities[key] = [entity, entity]
        for fold, key, rec in work:
            pair = self.touched[fold][key]
            pair[1] = fold.evolve(pair[1], rec)

    def save(self, db: sqlite3.Connection) -> None:
        by_fold = self.plan.by_fold
        for fold, entities in self.touched.items():
            changes = [(key, before, after) for key, (before, after) in entities.items()]
            for projection in by_fold[fold]:
                projection.save(db, changes)
        self.touched.clear()


class Rebuild:
    """Entities folded in memory, per fold (``projections.fold.fold_log`` fills them).
    ``write`` clears the projections' tables and fills them; ``add_to`` adds these
    entities to tables that hold others already (a parallel rebuild writes its shares one
    after another, each share's keys its own)."""

    def __init__(self, plan: FoldPlan) -> None:
        self.plan = plan
        self.entities: dict[EntityFold, dict[str, object]] = {f: {} for f in plan.by_fold}  # type: ignore[type-arg]

    def write(self, db: sqlite3.Connection) -> None:
        self.clear(db)
        self.add_to(db)

    def clear(self, db: sqlite3.Connection) -> None:
        for projection in self.plan.projections:
            for table in projection.tables:
                db.execute(f"DELETE FROM {table}")

    def add_to(self, db: sqlite3.Connection) -> None:
        for fold, projections in self.plan.by_fold.items():
            # In key order, each b-tree keyed by it is written at its end, page after page.
            entities = dict(sorted(self.entities[fold].items()))
            for projection in projections:
                projection.write_all(db, entities)  # type: ignore[arg-type]
