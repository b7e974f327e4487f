"""Folding the log into projection entities in memory (a rebuild, time travel, verify).

``fold_rows`` is the one hot loop of a rebuild: it decodes each event once and folds it
once per fold, however many projections that fold feeds.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable, Sequence

import msgspec

from argus.events import Recorded
from argus.events.codec import decode_failure
from argus.store.log import EMPTY_META, Decoders, Share, log_rows
from projections.base import FoldPlan, Rebuild

__all__ = ["fold_log", "fold_rows"]


def fold_log(
    source: sqlite3.Connection, plan: FoldPlan, *, until: int | None = None, share: Share | None = None
) -> Rebuild:
    """Fold the log of ``source`` (up to ``until``; only ``share`` of its streams if given)
    in memory."""
    return fold_rows(log_rows(source, 0, until, meta=False, share=share), plan)


def fold_rows(rows: Iterable[Sequence[Any]], plan: FoldPlan) -> Rebuild:
    """Fold log rows (``EVENT_COLUMNS``, in log order; meta is not read) into fresh
    entities. One pass decodes each event once and folds it once per fold, however many
    projections that fold feeds."""
    rebuild = Rebuild(plan)
    # The fold and the row decoding inlined, with bound methods looked up once per type: this
    # loop runs once per event of a log of millions, and its overheads were most of its time.
    folds = {
        t: tuple((fold.key, fold.evolve, rebuild.entities[fold]) for fold in fs)
        for t, fs in plan.by_type.items()
    }
    decoders = Decoders()
    position, type_, schema = 0, "", 0
    try:
        for position, stream, version, type_, schema, data, _, owner, recorded_at in rows:
            fs = folds.get(type_)
            if fs is None:
                continue
            rec = Recorded(
                position=position, stream=stream, version=version, type=type_,
                event=decoders[type_, schema](data), meta=EMPTY_META, owner=owner,
                recorded_at=recorded_at,
            )
            for key_of, evolve, entities in fs:
                key = key_of(rec)
                entity = evolve(entities.get(key), rec)
                if entity is None:
                    entities.pop(key, None)
                else:
                    entities[key] = entity
    except msgspec.DecodeError as exc:
        raise decode_failure(type_, schema, exc, position) from exc
    return rebuild
