"""The event log on PostgreSQL: durable appends/s, side by side with eventsourcing's
Postgres recorder, on a throwaway server started here (``tests/support/postgres.py``:
fsync and synchronous_commit on, as installed). Run through

    python tests/bench/bench_store.py --backend postgres [--single 2000] [--batches 200] [--rounds 3]
        [--pg-rebuild-events 200000] [--appends-only | --pg-rebuild-only]

Measured, from the same event objects to committed rows, 1 and 100 events per
transaction, in interleaved rounds (fresh databases each round; medians shown):

- argus: ``PostgresEventLog.append_batches`` (encode, validate by decoding, check
  versions, one INSERT ... SELECT unnest(...) per transaction), appends serialised by a
  transaction-scoped advisory lock (the default) and, as a second row, by ``LOCK TABLE
  events IN EXCLUSIVE MODE``;
- eventsourcing: msgspec-encoding each event into a ``StoredEvent`` (the generous choice,
  as in the SQLite bench), then ``PostgresApplicationRecorder.insert_events`` (which takes
  the table lock).

And a rebuild: every read model made from a log of ``--pg-rebuild-events`` task events
(the SQLite bench's lifecycles) held in PostgreSQL, into a fresh SQLite database, median
of the rounds:

- argus, a host's rebuild: ``EventStore.rebuild`` of a host's read models from its copy of
  the log (what a host does at the start after a read model's code changed; in parallel
  on a long log, as at any open): Argus's read models live beside each host's
  copy, so its rebuild never reads the network;
- argus, a new host: ``MirroredStore.open_mirrored`` with no copy yet (``argus.store.mirror``):
  the rows copied in pages, then the read models built from them. A cost eventsourcing's
  design does not have when its projections live in PostgreSQL (a new host has nothing to
  build), paid once per host;
- argus, read + fold: the shared log read from PostgreSQL into the same fold and table
  writes as eventsourcing's row (no copy);
- eventsourcing: ``select_notifications`` in pages of 10,000 from its Postgres recorder,
  the same fold (``fold_rows``) and the same table writes (as the SQLite bench's
  "es rebuild").
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from argus.events import encode_event
from argus.store import AppendBatch
from tests.bench.verdict import Verdict
from tests.support.postgres import PostgresServer


def _work(events: list[tuple[str, int, Any]], per_tx: int) -> list[list[AppendBatch]]:
    """Transactions of ``per_tx`` events, one AppendBatch per run of one stream."""
    out: list[list[AppendBatch]] = []
    for k in range(0, len(events), per_tx):
        tx: list[AppendBatch] = []
        for stream, version, event in events[k:k + per_tx]:
            if tx and tx[-1].stream == stream:
                last = tx[-1]
                tx[-1] = AppendBatch(stream=stream, expected_version=last.expected_version, events=[*last.events, event])
            else:
                tx.append(AppendBatch(stream=stream, expected_version=version - 1, events=[event]))
        out.append(tx)
    return out


async def _argus(dsn: str, events: list[tuple[str, int, Any]], per_tx: int, serialise: str) -> float:
    from argus.store.postgres import PostgresEventLog

    work = _work(events, per_tx)
    log = await PostgresEventLog.open(dsn, serialise=serialise)
    try:
        started = time.perf_counter()
        for tx in work:
            await log.append_batches(tx)
        return len(events) / (time.perf_counter() - started)
    finally:
        await log.close()


def _es(dsn: str, events: list[tuple[str, int, Any]], per_tx: int) -> float:
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

    url = urlsplit(dsn)
    datastore = PostgresDatastore(url.path.lstrip("/"), url.hostname or "", url.port or 5432, url.username or "", "")
    recorder = PostgresApplicationRecorder(datastore)
    recorder.create_table()
    ids: dict[str, uuid.UUID] = {}
    try:
        started = time.perf_counter()
        for k in range(0, len(events), per_tx):
            stored = []
            for stream, version, event in events[k:k + per_tx]:
                type_, _, data = encode_event(event)
                originator = ids.setdefault(stream, uuid.uuid5(uuid.NAMESPACE_URL, stream))
                stored.append(StoredEvent(originator_id=originator, originator_version=version, topic=type_,
                                          state=data))
            recorder.insert_events(stored)
        return len(events) / (time.perf_counter() - started)
    finally:
        datastore.close()


def _es_recorder(dsn: str) -> Any:
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

    url = urlsplit(dsn)
    datastore = PostgresDatastore(url.path.lstrip("/"), url.hostname or "", url.port or 5432, url.username or "", "")
    recorder = PostgresApplicationRecorder(datastore)
    recorder.create_table()
    return recorder


def _load_es(dsn: str, log_rows: list[tuple[object, ...]]) -> None:
    from eventsourcing.persistence import StoredEvent

    recorder = _es_recorder(dsn)
    try:
        for k in range(0, len(log_rows), 10_000):
            recorder.insert_events([StoredEvent(originator_id=uuid.uuid5(uuid.NAMESPACE_URL, str(r[1])),
                                                originator_version=r[2], topic=r[3], state=r[5])  # type: ignore[arg-type]
                                    for r in log_rows[k:k + 10_000]])
    finally:
        recorder.datastore.close()


async def _argus_rebuild(dsn: str, path: Path) -> tuple[float, float]:
    """A new host's whole copy, then a rebuild of its read models from that copy (what a
    host does at the start after a read model's code changed): events/s of each."""
    from argus.store.mirror import MirroredStore
    from projections import KeptProjections, default_projections

    started = time.perf_counter()
    store = await MirroredStore.open_mirrored(dsn, path, KeptProjections(default_projections()))
    elapsed = time.perf_counter() - started
    n = await store.head_position()
    try:
        again = time.perf_counter()
        await store.rebuild()
        return n / elapsed, n / (time.perf_counter() - again)
    finally:
        await store.close()


def _fold_into(log_rows: Any, path: Path) -> None:
    """The rebuild both sides share: fold the rows into every read model, write the tables
    into a fresh database."""
    from argus.store import migrate
    from projections import default_projections
    from projections.base import FoldPlan
    from projections.fold import fold_rows

    rebuild = fold_rows(log_rows, FoldPlan(default_projections()))
    migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    rebuild.write(conn)
    conn.execute("COMMIT")
    conn.close()


async def _argus_fold_only(dsn: str, path: Path) -> float:
    """As eventsourcing's row: argus's log read, then the same fold and writes (no copy)."""
    from argus.store.postgres import PostgresEventLog

    log = await PostgresEventLog.open(dsn)
    try:
        started = time.perf_counter()
        got: list[tuple[object, ...]] = []
        while page := await log.rows_after(int(got[-1][0]) if got else 0, 10_000):  # type: ignore[call-overload]
            got += page
        _fold_into(got, path)
        return len(got) / (time.perf_counter() - started)
    finally:
        await log.close()


def _es_rebuild(dsn: str, path: Path) -> float:
    recorder = _es_recorder(dsn)
    count = 0

    def log_rows() -> Any:
        nonlocal count
        start = 1
        while page := recorder.select_notifications(start, 10_000):
            count += len(page)
            start = page[-1].id + 1
            for n in page:
                yield (n.id, str(n.originator_id), n.originator_version, n.topic, 1, n.state, None, None, 0.0)

    try:
        started = time.perf_counter()
        _fold_into(log_rows(), path)
        return count / (time.perf_counter() - started)
    finally:
        recorder.datastore.close()


def rebuild(server: PostgresServer, n: int, rounds: int) -> None:
    from argus.store.postgres import PostgresEventLog
    from tests.bench.bench_store import rows

    log_rows = list(rows(n))
    argus_dsn, es_dsn = asyncio.run(server.new_database()), asyncio.run(server.new_database())

    async def load() -> None:
        log = await PostgresEventLog.open(argus_dsn)
        try:
            await log.load_rows(log_rows)
        finally:
            await log.close()

    asyncio.run(load())
    _load_es(es_dsn, log_rows)
    rates: dict[str, list[float]] = {"argus": [], "copy": [], "fold": [], "es": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            new_host, from_copy = asyncio.run(_argus_rebuild(argus_dsn, Path(tmp) / f"argus{r}.sqlite3"))
            rates["argus"].append(new_host)
            rates["copy"].append(from_copy)
            rates["fold"].append(asyncio.run(_argus_fold_only(argus_dsn, Path(tmp) / f"fold{r}.sqlite3")))
            rates["es"].append(_es_rebuild(es_dsn, Path(tmp) / f"es{r}.sqlite3"))
            print(f"  round {r + 1}: a host's rebuild from its copy {from_copy:,.0f} events/s, a new host's copy "
                  f"{new_host:,.0f}, argus read + the same fold {rates['fold'][-1]:,.0f}, eventsourcing "
                  f"{rates['es'][-1]:,.0f}", flush=True)
    a, c, fo, e = (statistics.median(rates[k]) for k in ("argus", "copy", "fold", "es"))
    print(f"\nRebuild of {n:,} events' read models, median of {rounds} (events/s):")
    print(f"  argus, a host's rebuild from its copy of the log   {c:>10,.0f}  {c / e:.2f}x eventsourcing")
    print(f"  argus, a new host's copy (log rows + read models)  {a:>10,.0f}  {a / e:.2f}x")
    print(f"  argus, read from PostgreSQL + the same fold/writes {fo:>10,.0f}  {fo / e:.2f}x")
    print(f"  eventsourcing, select_notifications + the same      {e:>10,.0f}")
    verdict = Verdict()
    verdict.check("a host's rebuild from its copy >= 2x eventsourcing's (issue 22)", c >= 2 * e, f"{c / e:.2f}x")
    verdict.finish()


def main(args: argparse.Namespace, event_objects: Callable[[int], list[tuple[str, int, Any]]]) -> None:
    server = PostgresServer().start()
    try:
        if args.pg_rebuild_only:
            rebuild(server, args.pg_rebuild_events, args.rounds)
            return
        sizes = {"1 event/tx": (args.single, 1), "100 events/tx": (args.batches * 100, 100)}
        rates: dict[str, dict[str, list[float]]] = {k: {} for k in sizes}
        for r in range(args.rounds):
            for key, (n, per_tx) in sizes.items():
                events = event_objects(n)
                runs: dict[str, Callable[[str], float]] = {
                    "argus (advisory lock)": lambda dsn: asyncio.run(_argus(dsn, events, per_tx, "advisory")),
                    "argus (table lock)": lambda dsn: asyncio.run(_argus(dsn, events, per_tx, "table")),
                    "eventsourcing": lambda dsn: _es(dsn, events, per_tx),
                }
                for name, run in runs.items():
                    dsn = asyncio.run(server.new_database())
                    rate = run(dsn)
                    print(f"  round {r + 1}: {name}, {key}: {rate:,.0f} events/s", flush=True)
                    rates[key].setdefault(name, []).append(rate)
        print("\nEvent log on PostgreSQL (fsync on): durable events/s, median of "
              f"{args.rounds} interleaved rounds\n")
        print(f"{'measure':<16}{'argus (advisory)':>18}{'argus (table)':>15}{'eventsourcing':>15}"
              f"{'advisory/es':>13}{'table/es':>10}")
        for key, by in rates.items():
            m = {name: statistics.median(v) for name, v in by.items()}
            adv, tab, es = m["argus (advisory lock)"], m["argus (table lock)"], m["eventsourcing"]
            print(f"{key:<16}{adv:>18,.0f}{tab:>15,.0f}{es:>15,.0f}{adv / es:>13.2f}{tab / es:>10.2f}")
        verdict = Verdict()
        for key, by in rates.items():
            adv, es = statistics.median(by["argus (advisory lock)"]), statistics.median(by["eventsourcing"])
            verdict.check(f"argus's appends >= eventsourcing's, {key} (issue 22)", adv >= es, f"{adv / es:.2f}x")
        if verdict.missed or args.appends_only:
            verdict.finish()
        else:
            for line in verdict.lines:
                print(f"verdict: {line}")
        if not args.appends_only:
            rebuild(server, args.pg_rebuild_events, args.rounds)
    finally:
        server.stop()
