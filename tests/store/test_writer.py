"""The store's writer: transactions on the loop's thread when the lock is free, on the
writer's thread when they must wait, never both at once."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from argus.events import task_stream
from projections import open_store
from projections.tasks_read import all_tasks
from tests.events import factories as f


async def test_an_append_waiting_for_another_processs_lock_does_not_block_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store = await open_store(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds SQLite's write lock
        append = asyncio.create_task(store.append(task_stream("a"), 0, [f.submitted("a")]))
        ticks = 0
        for _ in range(20):  # the loop keeps running while the append waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and not append.done()
        # A second append queues behind the first (same thread, in order), not beside it.
        second = asyncio.create_task(store.append(task_stream("a"), 1, [f.deferred("a")]))
        await asyncio.sleep(0.05)
        assert not second.done()
        threading.Timer(0.05, lambda: other.execute("ROLLBACK")).start()
        assert await asyncio.wait_for(append, 10) == [1]
        assert await asyncio.wait_for(second, 10) == [2]
        # Back on the loop's thread once nothing is queued.
        assert await store.append(task_stream("a"), 2, [f.deferred("a", reason="max_running")]) == [3]
        assert [(v.state.value, v.stream_version) for v in await store.read_snapshot(all_tasks)] == [
            ("PENDING_RESOURCES", 3)]
    finally:
        other.close()
        await store.close()


async def test_a_cancelled_caller_does_not_let_two_transactions_share_the_connection(tmp_path: Path) -> None:
    """The job on the writer's thread runs to its end even if its caller stops waiting;
    until it ends, later appends queue behind it instead of using the connection too."""
    path = tmp_path / "db.sqlite3"
    store = await open_store(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        first = asyncio.create_task(store.append(task_stream("a"), 0, [f.submitted("a")]))
        await asyncio.sleep(0.05)
        first.cancel()
        later = asyncio.create_task(store.append(task_stream("b"), 0, [f.submitted("b")]))
        await asyncio.sleep(0.05)
        assert not later.done()
        other.execute("ROLLBACK")
        await asyncio.wait_for(later, 10)
        rows = [(r.stream, r.version) for r in await store.read()]
        # The cancelled append was already on its way: it committed, and first.
        assert rows == [("task-a", 1), ("task-b", 1)]
    finally:
        other.close()
        await store.close()
