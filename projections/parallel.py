"""Folding a long log on several cores: each process folds its share of the streams.

A rebuild is CPU-bound in Python (read a row, decode it, fold it), so one process uses one
core. Every event of a stream belongs to one entity key (task, user, cluster), so the
streams can be split into shares (``argus.store.Share``) and each share folded by its own process
with the same ``fold_log``, in log order; the caller's process writes its own share's
entities while the helpers fold, then adds theirs, all in the caller's transaction. Helpers read the database file through their own
read-only connections: they see the committed log, and the caller folds only up to a
position it read first (``until``), so every share ends at the same point.

Anything unexpected falls back to one process, which gives the same result or the real
error: no file to reopen, a helper that fails, a helper whose log ends before ``until``
(the caller's transaction holds events not yet committed), an entity key found in two
shares.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sqlite3
from typing import Any

import msgspec

from argus.store.log import Share, head_position
from projections.base import FoldPlan, Rebuild
from projections.fold import fold_log
from projections.registry import default_projections

__all__ = ["PARALLEL_MIN_EVENTS", "rebuild_in_parallel", "split_streams"]

# Below this many events a helper's start (a fresh interpreter: ~0.3 s) costs more than
# folding half the log saves.
PARALLEL_MIN_EVENTS = 200_000
MAX_SHARES = 4
# Events sampled to weigh the streams for the split (``split_streams``).
SPLIT_SAMPLES = 4096
# This process folds the first share and then writes it while the helpers, which start
# ~0.4 s later, still fold theirs: a share a little under an equal part evens that out.
OWN_SHARE = 0.9


def _shares() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_SHARES))


def _database_file(conn: sqlite3.Connection) -> str | None:
    for _, name, path in conn.execute("PRAGMA database_list"):
        if name == "main":
            return path or None  # "" for an in-memory or temporary database
    return None


def split_streams(
    db: sqlite3.Connection, count: int, first: float | None = None, until: int | None = None
) -> list[Share]:
    """Up to ``count`` shares as ranges of stream names: the first holds about ``first`` of
    the log's events up to ``until`` (default: an equal part), the others equal parts of
    the rest.

    Streams are weighed by a sample of the log: the streams of every ``step``-th event (up
    to ``SPLIT_SAMPLES`` rowid lookups, every event of a short log). Counting every
    stream's events read the whole (stream, version) index, ~0.15 s of a million-event
    rebuild, to place a cut that need only be about right. A cut falls where the running
    total passes the next part, so one busy stream (the cluster's capacity observations)
    ends up in a share with fewer streams rather than splitting anything."""
    head = head_position(db, until)
    step = max(1, head // SPLIT_SAMPLES)
    weights = db.execute(
        "WITH RECURSIVE sample(p) AS (SELECT ? UNION ALL SELECT p + ? FROM sample WHERE p + ? <= ?) "
        "SELECT stream, count(*) FROM events JOIN sample ON position = p GROUP BY stream ORDER BY stream",
        (step, step, step, head),
    ).fetchall()
    total = sum(w for _, w in weights)
    head_part = 1 / count if first is None else first
    ends = [head_part + (1 - head_part) * k / (count - 1) for k in range(count - 1)] if count > 1 else []
    cuts: list[str | None] = []
    running = 0
    for stream, weight in weights:
        if len(cuts) < len(ends) and running >= total * ends[len(cuts)]:
            cuts.append(stream)
        running += weight
    edges = [None, *cuts, None]
    return [Share(edges[k], edges[k + 1]) for k in range(len(edges) - 1)]


def rebuild_in_parallel(source: sqlite3.Connection, target: sqlite3.Connection, plan: FoldPlan, until: int) -> bool:
    """Fold the log up to ``until`` in shares across processes and write the projections
    into ``target``: this process writes its own share while the helpers still fold, then
    adds theirs. False when not worth it (short log, one core, no file) or when it did not
    work; the tables may then be half written, and the caller's serial rebuild, which
    clears them first, gives the same result or the real error."""
    count, path = _shares(), _database_file(source)
    if count < 2 or path is None or until < PARALLEL_MIN_EVENTS:
        return False
    names = [p.name for p in plan.projections]
    context = multiprocessing.get_context("spawn")  # never fork a process with threads
    try:
        shares = split_streams(source, count, first=OWN_SHARE / count, until=until)
        with concurrent.futures.ProcessPoolExecutor(len(shares) - 1, mp_context=context) as pool:
            futures = [pool.submit(_fold_share, path, names, until, share) for share in shares[1:]]
            # This process folds the first share meanwhile, on its own connection (it may
            # be the caller's, inside the caller's transaction: that is fine for reading).
            own = fold_log(source, plan, until=until, share=shares[0])
            own.write(target)
            keys = {fold: set(own.entities[fold]) for fold in plan.by_fold}
            del own
            for future in futures:
                seen, payload = future.result()
                # A helper reads only what is committed. If the caller's transaction holds
                # events not yet committed, the helper's log ends earlier: not the same log.
                if seen != until:
                    return False
                part = _decode(plan, payload)
                for fold, entities in part.entities.items():
                    # A key folded in two shares had its events in two streams of different
                    # shares: only a serial fold is right then.
                    if not keys[fold].isdisjoint(entities):
                        return False
                    keys[fold].update(entities)
                part.add_to(target)
    except Exception:  # noqa: BLE001 - any failure: the caller rebuilds in one process
        return False
    return True


def _decode(plan: FoldPlan, payload: bytes) -> Rebuild:
    """A helper's entities, per fold."""
    part = Rebuild(plan)
    for fold, encoded in zip(plan.by_fold, msgspec.msgpack.decode(payload, type=list[bytes])):
        entities_type: Any = dict[str, fold.entity]  # type: ignore[name-defined]  # known at run time only
        part.entities[fold] = msgspec.msgpack.decode(encoded, type=entities_type)
    return part


def _fold_share(path: str, names: list[str], until: int, share: Share) -> tuple[int, bytes]:
    """In a helper process: fold one share of the log; return the last position it saw (up
    to ``until``) and its entities per fold (msgpack, in the order of ``FoldPlan.by_fold``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one snapshot for the check and the fold
        seen = conn.execute(
            "SELECT coalesce(max(position), 0) FROM events WHERE position <= ?", (until,)
        ).fetchone()[0]
        plan = FoldPlan([p for p in default_projections() if p.name in names])
        rebuild = fold_log(conn, plan, until=until, share=share)
        conn.execute("COMMIT")
    finally:
        conn.close()
    encode = msgspec.msgpack.Encoder().encode
    return seen, encode([encode(rebuild.entities[fold]) for fold in plan.by_fold])
