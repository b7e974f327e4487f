"""Event store benchmark: durable appends and projection rebuild, side by side with raw
``sqlite3`` (the ceiling) and the ``eventsourcing`` library's SQLite recorder.

    python tests/bench/bench_store.py [--events 1000000] [--single 2000] [--batches 200] [--rounds 3]

Prints a table; not a timed test. Appends run at synchronous=FULL (fsync per commit) in
WAL mode for all three, in ``--rounds`` interleaved rounds (fresh databases each round);
the table shows each measure's median, since a shared machine's fsync times wander.

What each side is timed doing, from the same event objects to durable rows:
- raw sqlite3: inserting rows already encoded, each transaction's in one multi-row
  INSERT (the ceiling: no Python work at all);
- argus: ``EventStore.append_batches`` (encode, check versions, insert, fold and write the
  inline projections); "log only" is a store that keeps no projections;
- eventsourcing: encoding each event (with msgspec, as argus does) into its
  ``StoredEvent``, then ``SQLiteApplicationRecorder.insert_events``: the recorder's work
  for the same events. Its own mapper would be slower; msgspec is the generous choice.

The rebuild log is a mix of task lifecycles (~7 events per task), written fast
(synchronous=OFF, large batches), then folded by ``rebuild_projections`` in a fresh
process (so that its peak memory is its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterator

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.events import EventBase, FailureKind, encode_event, task_stream  # noqa: E402
from argus.store import AppendBatch, EventStore, GroupCommitLog, migrate  # noqa: E402
from projections import open_store, rebuild_projections  # noqa: E402
from argus.store import EVENT_COLUMNS  # noqa: E402
from projections import default_projections  # noqa: E402
from tests.events import factories as f  # noqa: E402
from tests.bench.verdict import Verdict  # noqa: E402

INSERT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"


def lifecycle(i: int) -> list[EventBase]:
    """A realistic mix: most tasks run and succeed, some retry once, some fail or are canceled."""
    tid = f"t{i:07d}"
    user = f"user{i % 50}"
    base = [f.submitted(tid, user), f.deferred(tid), f.starting(tid), f.attempt_submitted(tid), f.running(tid)]
    kind = i % 10
    if kind == 7:  # lost cluster: retried, second attempt succeeds
        return [*base, f.ended(tid, 1, "LOST", failure_kind=FailureKind.CLUSTER_LOST), f.retry(tid),
                f.starting(tid, 2), f.attempt_submitted(tid, 2), f.running(tid, 2), f.ended(tid, 2), f.succeeded(tid, 2)]
    if kind == 8:
        return [*base, f.ended(tid, 1, "FAILED", failure_kind=FailureKind.USER_ERROR, exit_code=1), f.failed(tid)]
    if kind == 9:
        return [f.submitted(tid, user), f.deferred(tid), f.cancel_requested(tid), f.canceled(tid)]
    return [*base, f.ended(tid), f.succeeded(tid)]


def task_events() -> Iterator[tuple[str, int, list[EventBase]]]:
    i = 0
    while True:
        yield task_stream(f"t{i:07d}"), i, lifecycle(i)
        i += 1


def rows(n: int) -> Iterator[tuple[object, ...]]:
    """``n`` log rows (position order) of interleaved-free task lifecycles."""
    position = 0
    now = time.time()
    for stream, i, events in task_events():
        owner = f"user{i % 50}"
        for version, event in enumerate(events, start=1):
            if position == n:
                return
            position += 1
            type_, schema, data = encode_event(event)
            yield (position, stream, version, type_, schema, data, b"{}", owner, now)


def fresh_db(directory: Path, name: str, synchronous: str) -> sqlite3.Connection:
    path = directory / name
    migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


# ---------------------------------------------------------------------- appends
def raw_appends(directory: Path, name: str, prepared: list[tuple[object, ...]], per_tx: int) -> float:
    """Each transaction's rows in one multi-row INSERT: SQLite's fastest way in, about 20%
    faster per row than ``executemany``, so the ceiling stays a ceiling."""
    conn = fresh_db(directory, name, "FULL")
    row = f"({','.join('?' * len(EVENT_COLUMNS.split(',')))})"
    started = time.perf_counter()
    for k in range(0, len(prepared), per_tx):
        chunk = prepared[k:k + per_tx]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES {','.join([row] * len(chunk))}",
                     list(chain.from_iterable(chunk)))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(prepared) / elapsed


async def argus_appends(directory: Path, name: str, n: int, per_tx: int, *, projections: bool = True) -> float:
    """Appends through EventStore (inline projections, version checks) at FULL. Without
    ``projections``: the log alone, the work eventsourcing's recorder does."""
    store = await open_store(
        directory / name, synchronous="FULL", projections=None if projections else [],
    )
    work: list[list[AppendBatch]] = []
    pending: list[AppendBatch] = []
    count = 0
    for stream, _, events in task_events():
        for version, event in enumerate(events):
            if count == n:
                break
            pending.append(AppendBatch(stream=stream, expected_version=version, events=[event]))
            count += 1
            if sum(len(b.events) for b in pending) == per_tx:
                work.append(pending)
                pending = []
        if count == n:
            break
    if pending:
        work.append(pending)
    # Merge consecutive single-event batches of one stream (one AppendBatch per stream run).
    merged: list[list[AppendBatch]] = []
    for tx in work:
        out: list[AppendBatch] = []
        for b in tx:
            if out and out[-1].stream == b.stream:
                last = out[-1]
                out[-1] = AppendBatch(stream=last.stream, expected_version=last.expected_version,
                                      events=[*last.events, *b.events])
            else:
                out.append(b)
        merged.append(out)
    started = time.perf_counter()
    for tx in merged:
        await store.append_batches(tx)
    elapsed = time.perf_counter() - started
    await store.close()
    return n / elapsed


async def group_appends(directory: Path, name: str, n: int, callers: int) -> float:
    """``n`` one-event submissions from ``callers`` concurrent callers through group commit
    (``GroupCommitLog``, as the API appends): each caller's append waits for a shared
    transaction, so a commit's fixed costs (its fsyncs) are paid once per group."""
    store = await open_store(directory / name, synchronous="FULL")
    log = GroupCommitLog(store)
    work = iter(range(n))

    async def caller() -> None:
        for i in work:
            await log.append(task_stream(f"g{i:07d}"), 0, [f.submitted(f"g{i:07d}", f"user{i % 50}")])

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    elapsed = time.perf_counter() - started
    await log.close()
    await store.close()
    return n / elapsed


def es_recorder(path: Path, synchronous: str) -> Any:
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(str(path), originator_id_type="text")
    create = datastore.pool._create_connection

    def create_with_pragma() -> Any:  # same durability as ours
        conn = create()
        conn._sqlite_conn.execute(f"PRAGMA synchronous={synchronous}")
        return conn

    datastore.pool._create_connection = create_with_pragma  # type: ignore[method-assign]
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    return recorder


def es_stored(prepared: list[tuple[object, ...]]) -> list[Any]:
    from eventsourcing.persistence import StoredEvent

    return [StoredEvent(originator_id=r[1], originator_version=r[2], topic=r[3], state=r[5]) for r in prepared]  # type: ignore[arg-type]


def event_objects(n: int) -> list[tuple[str, int, EventBase]]:
    """The first ``n`` events of ``task_events`` as (stream, version, event)."""
    out: list[tuple[str, int, EventBase]] = []
    for stream, _, events in task_events():
        for version, event in enumerate(events, start=1):
            if len(out) == n:
                return out
            out.append((stream, version, event))
    return out


def es_appends(directory: Path, name: str, events: list[tuple[str, int, EventBase]], per_tx: int) -> float:
    """eventsourcing's recorder, timed from the event objects (see the module docstring)."""
    from eventsourcing.persistence import StoredEvent

    recorder = es_recorder(directory / name, "FULL")
    started = time.perf_counter()
    for k in range(0, len(events), per_tx):
        stored = []
        for stream, version, event in events[k:k + per_tx]:
            type_, _, data = encode_event(event)
            stored.append(StoredEvent(originator_id=stream, originator_version=version, topic=type_, state=data))
        recorder.insert_events(stored)
    elapsed = time.perf_counter() - started
    recorder.datastore.close()
    return len(events) / elapsed


# ---------------------------------------------------------------------- rebuild
def build_log(path: Path, n: int) -> None:
    migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    chunk: list[tuple[object, ...]] = []
    conn.execute("BEGIN")
    for row in rows(n):
        chunk.append(row)
        if len(chunk) == 50_000:
            conn.executemany(INSERT, chunk)
            chunk = []
    conn.executemany(INSERT, chunk)
    conn.execute("COMMIT")
    conn.close()


def build_es_log(path: Path, n: int) -> None:
    recorder = es_recorder(path, "OFF")
    batch: list[tuple[object, ...]] = []
    for row in rows(n):
        batch.append(row)
        if len(batch) == 50_000:
            recorder.insert_events(es_stored(batch))
            batch = []
    if batch:
        recorder.insert_events(es_stored(batch))
    recorder.datastore.close()


def es_rebuild(path: Path) -> int:
    """The same rebuild with eventsourcing's recorder as the log: page through
    ``select_notifications`` and hand the notifications, as log rows, to the same fold
    (``fold_rows``), then write the same tables (into a fresh database). One process: the
    recorder reads in notification order only, with no way to split the log by stream."""
    from projections import fold_rows
    from projections import FoldPlan

    recorder = es_recorder(path, "FULL")
    count = 0

    def log_rows() -> Iterator[tuple[object, ...]]:
        nonlocal count
        start = 1
        while page := recorder.select_notifications(start, 10_000):
            count += len(page)
            start = page[-1].id + 1
            for n in page:  # recorded_at is not kept by the recorder
                yield (n.id, n.originator_id, n.originator_version, n.topic, 1, n.state, None, None, 0.0)

    rebuild = fold_rows(log_rows(), FoldPlan(default_projections()))
    target = path.with_name("es-rebuild-target.sqlite3")
    migrate(target)
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    rebuild.write(conn)
    conn.execute("COMMIT")
    conn.close()
    recorder.datastore.close()
    return count


def measure(kind: str, path: str) -> dict[str, float]:
    """Run one read-side measurement in this (fresh) process; peak RSS is its own."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if kind == "argus":
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        rebuild_projections(conn, conn, default_projections())
        conn.execute("COMMIT")
        n = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    elif kind == "raw":
        conn = sqlite3.connect(path)
        n = 0
        for _ in conn.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY position"):
            n += 1
    elif kind == "es-rebuild":
        n = es_rebuild(Path(path))
    elif kind == "es":
        recorder = es_recorder(Path(path), "FULL")
        n, start = 0, 1
        while True:
            page = recorder.select_notifications(start, 10_000)
            if not page:
                break
            n += len(page)
            start = page[-1].id + 1
    else:
        raise SystemExit(kind)
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"events": n, "seconds": elapsed, "rate": n / elapsed, "peak_mib": (peak - base) / 1024}


def in_child(kind: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", kind, str(path)], check=True, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def timed(label: str, fn: Callable[[], Any]) -> Any:
    print(f"  {label} …", file=sys.stderr, flush=True)
    return fn()


def print_appends(
    args: argparse.Namespace, rounds: dict[str, dict[str, list[float]]], results: dict[str, dict[str, float]]
) -> None:
    print(f"Appends: median of {args.rounds} interleaved rounds "
          f"(each round's rates, argus: {', '.join(f'{x:,.0f}' for x in rounds['single']['argus'])} single; "
          f"{', '.join(f'{x:,.0f}' for x in rounds['batch100']['argus'])} batched)\n")
    print(f"{'measure':44} {'argus':>12} {'raw sqlite3':>12} {'eventsourcing':>14} {'argus/raw':>10} {'argus/es':>9}")
    for key, label in (("single", f"durable appends/s, 1 event/tx ({args.single:,})"),
                       ("batch100", f"durable appends/s, 100 events/tx ({args.batches * 100:,})")):
        r = results[key]
        r.setdefault("es", float("nan"))  # --no-es
        print(f"{label:44} {r['argus']:12,.0f} {r['raw']:12,.0f} {r['es']:14,.0f} "
              f"{r['argus'] / r['raw']:10.2f} {r['argus'] / r['es']:9.2f}")
        print(f"{'  argus, log only (no projections)':44} {r['log']:12,.0f} {'':12} {'':14} "
              f"{r['log'] / r['raw']:10.2f} {r['log'] / r['es']:9.2f}")
        if "group" in r:
            label = f"  argus, group commit, {args.group_callers} callers"
            print(f"{label:44} {r['group']:12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the rebuild log")
    parser.add_argument("--single", type=int, default=2_000, help="one-event durable appends")
    parser.add_argument("--batches", type=int, default=200, help="durable transactions of 100 events")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the append measures")
    parser.add_argument("--appends-only", action="store_true", help="skip the rebuild measures")
    parser.add_argument("--group-callers", type=int, default=0,
                        help="also measure --single one-event appends from this many concurrent callers "
                             "through group commit")
    parser.add_argument("--no-es", action="store_true",
                        help="leave eventsourcing out of the append measures (where it is not installed)")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the databases (local disk)")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "DB"), help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite",
                        help="postgres: the event log on a throwaway PostgreSQL server (tests/bench/bench_store_pg.py)")
    parser.add_argument("--pg-rebuild-events", type=int, default=200_000,
                        help="postgres: events in the rebuild log (loaded into PostgreSQL)")
    parser.add_argument("--pg-rebuild-only", action="store_true", help="postgres: the rebuild measure alone")
    args = parser.parse_args()
    if args.backend == "postgres":
        from tests.bench.bench_store_pg import main as postgres_main

        postgres_main(args, event_objects)
        return
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        sizes = {"single": (args.single, 1), "batch100": (args.batches * 100, 100)}
        rounds: dict[str, dict[str, list[float]]] = {k: {} for k in sizes}
        for r in range(args.rounds):
            for key, (n, per_tx) in sizes.items():
                prepared, events = list(rows(n)), event_objects(n)
                runs: dict[str, Callable[[], float]] = {
                    "raw": lambda: raw_appends(d, f"raw-{key}-{r}", prepared, per_tx),
                    "argus": lambda: asyncio.run(argus_appends(d, f"argus-{key}-{r}", n, per_tx)),
                    "log": lambda: asyncio.run(argus_appends(d, f"log-{key}-{r}", n, per_tx, projections=False)),
                    "es": lambda: es_appends(d, f"es-{key}-{r}", events, per_tx),
                }
                if args.no_es:
                    del runs["es"]
                if key == "single" and args.group_callers:
                    runs["group"] = lambda: asyncio.run(group_appends(d, f"group-{r}", n, args.group_callers))
                for name, run in runs.items():
                    rate = timed(f"round {r + 1}: {name} {key}", run)
                    rounds[key].setdefault(name, []).append(rate)
        results = {key: {name: statistics.median(v) for name, v in by.items()} for key, by in rounds.items()}

        if args.appends_only:
            print_appends(args, rounds, results)
            return
        log, es_log = d / "log.sqlite3", d / "es_log.sqlite3"
        started = time.perf_counter()
        timed(f"building a {args.events:,}-event log", lambda: build_log(log, args.events))
        build_s = time.perf_counter() - started
        timed("building the eventsourcing copy", lambda: build_es_log(es_log, args.events))
        rebuild = {
            "raw": timed("raw scan", lambda: in_child("raw", log)),
            "argus": timed("argus rebuild", lambda: in_child("argus", log)),
            "es": timed("es select_notifications", lambda: in_child("es", es_log)),
            "es-rebuild": timed("es select_notifications + the same fold and writes", lambda: in_child("es-rebuild", es_log)),
        }

    print(f"\nEvent store benchmark (synchronous=FULL appends, WAL; {os.cpu_count()} CPUs; "
          f"log of {args.events:,} events built in {build_s:.1f}s)\n")
    print_appends(args, rounds, results)
    r2 = {k: v["rate"] for k, v in rebuild.items()}
    print(f"{'rebuild/scan events/s':44} {r2['argus']:12,.0f} {r2['raw']:12,.0f} {r2['es']:14,.0f} "
          f"{r2['argus'] / r2['raw']:10.2f} {r2['argus'] / r2['es']:9.2f}")
    es_rb = rebuild["es-rebuild"]["rate"]
    print(f"{'  the same rebuild from es (one process)':44} {'':12} {'':12} {es_rb:14,.0f} {'':10} "
          f"{r2['argus'] / es_rb:9.2f}")
    print(f"{'  seconds':44} {rebuild['argus']['seconds']:12.2f} {rebuild['raw']['seconds']:12.2f} "
          f"{rebuild['es']['seconds']:14.2f}")
    print(f"{'  peak RSS growth (MiB)':44} {rebuild['argus']['peak_mib']:12.1f} {rebuild['raw']['peak_mib']:12.1f} "
          f"{rebuild['es']['peak_mib']:14.1f}")
    print("\nraw sqlite3 = the same rows inserted / scanned without decoding (the ceiling);")
    print("argus rebuild = scan + decode + fold into every projection + write the tables;")
    print("argus, log only = EventStore with no projections: the same work as eventsourcing's recorder;")
    print("eventsourcing = msgspec-encoded StoredEvents + SQLiteApplicationRecorder.insert_events;")
    print("                for the rebuild, select_notifications (a scan, no decode, no fold).")
    verdict = Verdict()
    verdict.check("rebuild >= 200,000 events/s", r2["argus"] >= 200_000, f"{r2['argus']:,.0f} events/s")
    verdict.finish()


if __name__ == "__main__":
    main()
