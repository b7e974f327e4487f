"""Child processes for the multi-process store tests: ``python -m tests.store.procs <role> …``.

Each role opens its own EventStore on the database given, as a separate OS process would
in production (the API and the reactor share one database file)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

from argus.events import task_stream
from argus.store import AppendBatch, EventStore
from argus.store.postgres import PostgresEventLog
from projections import open_store
from tests.events import factories as f

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "tests.store.procs", *map(str, args)]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    return env


async def kill_mid_storm(child: "subprocess.Popen[bytes]", head: Callable[[], Awaitable[int]], at_least: int,
                         timeout: float = 30) -> None:
    """Once the storm ``child`` has written ``at_least`` events (``head()``), SIGKILL it
    somewhere inside a later transaction; the child is reaped whatever happens."""
    try:
        deadline = time.monotonic() + timeout
        while await head() < at_least:
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            assert time.monotonic() < deadline, "the storm did not get going"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.037)  # land somewhere inside a later transaction
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stderr:
            child.stderr.close()
    assert child.returncode == -signal.SIGKILL


def task_batch(task_id: str, first: bool, size: int, tag: int) -> list[object]:
    """``size`` legal events for one task: TaskSubmitted first, then TaskDeferred."""
    events: list[object] = [f.submitted(task_id)] if first else []
    events += [f.deferred(task_id, reason=f"r{tag}-{i}") for i in range(size - len(events))]
    return events


async def writer(db: str, task_id: str, transactions: int, size: int, start_file: str) -> None:
    """Append ``transactions`` × ``size`` events to ``task-<task_id>``, once ``start_file``
    exists (so that two writers start together)."""
    store = await open_store(db)
    try:
        while not os.path.exists(start_file):
            time.sleep(0.001)
        for n in range(transactions):
            version = n * size
            await store.append(task_stream(task_id), version, task_batch(task_id, n == 0, size, n))  # type: ignore[arg-type]
    finally:
        await store.close()


async def storm(db: str, synchronous: str, pairs: int, size: int) -> None:
    """Append forever (until killed): each transaction writes ``size`` events to each of two
    task streams of one pair, round robin over ``pairs`` pairs. ``db``: a SQLite file, or a
    ``postgresql://`` DSN (the log alone)."""
    store: EventStore | PostgresEventLog = (
        await PostgresEventLog.open(db) if db.startswith("postgresql://") else await open_store(db, synchronous=synchronous))
    versions = [0] * pairs
    n = 0
    while True:
        k = n % pairs
        streams = (f"p{k}-a", f"p{k}-b")
        batches = [
            AppendBatch(
                stream=task_stream(tid), expected_version=versions[k],
                events=task_batch(tid, versions[k] == 0, size, n),  # type: ignore[arg-type]
            )
            for tid in streams
        ]
        await store.append_batches(batches)
        versions[k] += size
        n += 1


async def ticker(db: str, count: int, interval: float) -> None:
    """Append ``count`` single events, one every ``interval`` seconds."""
    store = await open_store(db)
    try:
        await store.append(task_stream("x"), 0, [f.submitted("x")])
        for i in range(1, count):
            await store.append(task_stream("x"), i, [f.deferred("x", reason=f"tick{i}")])
            await asyncio.sleep(interval)
    finally:
        await store.close()


async def opener(db: str) -> None:
    store = await open_store(db)
    await store.close()


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "writer":
        asyncio.run(writer(args[0], args[1], int(args[2]), int(args[3]), args[4]))
    elif role == "storm":
        asyncio.run(storm(args[0], args[1], int(args[2]), int(args[3])))
    elif role == "ticker":
        asyncio.run(ticker(args[0], int(args[1]), float(args[2])))
    elif role == "opener":
        asyncio.run(opener(args[0]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
