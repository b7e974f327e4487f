"""The store's one write connection, driven from the event loop.

A write transaction here is short (tens of µs of work, then the fsync), and a hop to a
worker thread and back costs 70–100 µs on a small machine: more than the work itself. So
a transaction runs on the loop's own thread when SQLite's write lock is free at once, and
moves to the writer's thread only when it would have to wait: another process holds the
lock, or an earlier job is still queued there. Long jobs (a rebuild) always go there.

One connection, never used by two threads at once: the loop thread uses it only while no
job is queued on the writer's thread, and that thread runs one job at a time.

A write refused for lack of space is raised as ``StorageFull`` (its cause kept), never as
whatever a cleanup after it raised: SQLite rolls a transaction back by itself on some
errors (``SQLITE_FULL`` among them), and a ROLLBACK then would fail "no transaction is
active" over the real cause.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from argus.store.space import storage_full

__all__ = ["SqliteWriter", "configure"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def configure(conn: sqlite3.Connection, synchronous: str, busy_timeout_ms: int = 30_000) -> None:
    """WAL, the durability asked for, and how long to wait for another writer's lock."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "locked" in str(exc)


class SqliteWriter:
    """Write transactions on one connection: on the loop thread when they need not wait."""

    def __init__(self, path: str, synchronous: str, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # No waiting on the loop thread: a busy lock sends the job to the writer's thread,
        # which waits up to ``busy_timeout_ms`` (set around each of its jobs).
        configure(self.conn, synchronous, busy_timeout_ms=0)
        self.busy_timeout_ms = busy_timeout_ms
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="argus-writer")
        self._queued = 0  # jobs submitted to the writer's thread and not yet finished

    async def transaction(self, body: Callable[..., T], *args: Any) -> T:
        """``body(conn, *args)`` inside ``BEGIN IMMEDIATE … COMMIT`` (ROLLBACK if it raises)."""
        if self._queued == 0:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise storage_full(exc, self.path) or exc
            else:
                try:
                    return _finish(self.conn, body, args)
                except sqlite3.Error as exc:
                    raise storage_full(exc, self.path) or exc
        return await self.in_thread(_begin_and_finish, body, args)

    async def long_transaction(self, body: Callable[..., T], *args: Any) -> T:
        """Like ``transaction``, always on the writer's thread: for work that holds the
        write lock for seconds (a rebuild), which must not stop the loop."""
        return await self.in_thread(_begin_and_finish, body, args)

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the writer's thread, after every job queued before it,
        waiting for another process's write lock as long as the busy timeout allows."""
        loop = asyncio.get_running_loop()
        self._queued += 1
        job = self._thread.submit(self._waiting, fn, args)
        # Counted down when the thread is done with the connection, not when the caller
        # stops waiting (a cancelled caller does not stop a job that has started).
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(self._job_done))
        try:
            return await asyncio.wrap_future(job)
        except sqlite3.Error as exc:
            raise storage_full(exc, self.path) or exc

    def _job_done(self) -> None:
        self._queued -= 1

    def _waiting(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        self.conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        try:
            return fn(self.conn, *args)
        finally:
            self.conn.execute("PRAGMA busy_timeout=0")

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.conn.close()


def _finish(conn: sqlite3.Connection, body: Callable[..., T], args: tuple[Any, ...]) -> T:
    try:
        result = body(conn, *args)
        conn.execute("COMMIT")
        return result
    except BaseException:
        # Only a transaction still open is rolled back: after SQLITE_FULL, IOERR or NOMEM
        # SQLite has already done it, and a failing ROLLBACK must not hide the cause.
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as cleanup:
                log.warning("ROLLBACK after a failed transaction failed too: %s", cleanup)
        raise


def _begin_and_finish(conn: sqlite3.Connection, body: Callable[..., T], args: tuple[Any, ...]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    return _finish(conn, body, args)

