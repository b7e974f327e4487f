"""The store's read connections: a small pool, so that no read waits behind another.

SQLite in WAL mode lets any number of readers run beside the writer, each on its own
connection. One shared read connection (what the store had) made every read queue behind
the one before it: a task's page waited for an admin's full listing. Here each read takes
a free connection on a worker thread; SQLite releases the GIL while it steps, so reads
overlap for real where they spend their time.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote
from typing import Any, Callable, TypeVar

__all__ = ["DEFAULT_READERS", "ReadPool"]

T = TypeVar("T")
DEFAULT_READERS = 4


class ReadPool:
    """``size`` read-only connections to the database at ``path``, one per worker thread."""

    def __init__(self, path: str, size: int = DEFAULT_READERS, busy_timeout_ms: int = 30_000,
                 *, read_only_file: bool = False) -> None:
        """``read_only_file``: open the file itself read-only (a damaged log): such a
        connection never writes, not even the WAL checkpoint of the last one closed."""
        self._free: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        target = f"file:{quote(str(Path(path).resolve()))}?mode=ro" if read_only_file else path
        for _ in range(size):
            conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, uri=read_only_file)
            conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            conn.execute("PRAGMA query_only=ON")  # a read connection never writes
            self._all.append(conn)
            self._free.put(conn)
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="argus-reader")

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on a free connection, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._call, fn)

    async def fetchall(self, sql: str, params: Any = ()) -> list[Any]:
        """The rows of one statement."""
        return await self.run(lambda conn: conn.execute(sql, params).fetchall())

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._free.get()
        try:
            return fn(conn)
        finally:
            if conn.in_transaction:  # a reader that began a snapshot and raised
                conn.execute("ROLLBACK")
            self._free.put(conn)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for conn in self._all:
            conn.close()
