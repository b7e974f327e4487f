"""The shape every projection has: a pure per-entity fold plus the SQL that persists it.

A projection keys each event to an entity (a task, a user, the cluster), folds the event
into that entity with a pure ``evolve``, and writes the entity to its tables. The same
``evolve`` serves both paths:
- inline (``apply``): load the entity's row, evolve, save — inside the append transaction;
- rebuild (``rebuilder``): fold the whole log in memory, then bulk-write every entity.
"""

from __future__ import annotations

import sqlite3
from typing import ClassVar, Generic, TypeVar

from argus.events import Recorded

__all__ = ["EntityProjection", "Rebuild"]

E = TypeVar("E")


class EntityProjection(Generic[E]):
    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    handles: ClassVar[frozenset[str]]

    def key(self, rec: Recorded) -> str:
        raise NotImplementedError

    def evolve(self, entity: E | None, rec: Recorded) -> E | None:
        """Pure: the entity after ``rec`` (None when the entity no longer has a row)."""
        raise NotImplementedError

    def load(self, db: sqlite3.Connection, key: str) -> E | None:
        raise NotImplementedError

    def save(self, db: sqlite3.Connection, key: str, before: E | None, after: E | None) -> None:
        raise NotImplementedError

    def write_all(self, db: sqlite3.Connection, entities: dict[str, E]) -> None:
        raise NotImplementedError

    def apply(self, db: sqlite3.Connection, rec: Recorded) -> None:
        key = self.key(rec)
        before = self.load(db, key)
        self.save(db, key, before, self.evolve(before, rec))

    def rebuilder(self) -> "Rebuild[E]":
        return Rebuild(self)


class Rebuild(Generic[E]):
    """Folds records in memory; ``write`` clears the projection's tables and fills them."""

    def __init__(self, projection: EntityProjection[E]) -> None:
        self.projection = projection
        self.entities: dict[str, E] = {}

    def fold(self, rec: Recorded) -> None:
        key = self.projection.key(rec)
        entity = self.projection.evolve(self.entities.get(key), rec)
        if entity is None:
            self.entities.pop(key, None)
        else:
            self.entities[key] = entity

    def write(self, db: sqlite3.Connection) -> None:
        for table in self.projection.tables:
            db.execute(f"DELETE FROM {table}")
        self.projection.write_all(db, self.entities)
