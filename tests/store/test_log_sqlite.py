"""The event log contract on SQLite: ``EventStore`` keeping no projections."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from projections import open_store
from tests.store.log_contract import EventLogContract


class TestSqliteLog(EventLogContract):
    @pytest.fixture
    async def open_log(self, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        opened: list[Any] = []

        async def open_(name: str) -> Any:
            opened.append(await open_store(tmp_path / f"{name}.sqlite3", projections=[]))
            return opened[-1]

        yield open_
        for log in opened:
            await log.close()

    @pytest.fixture
    def raw_sql(self, tmp_path: Path) -> Callable[[str, str], Awaitable[None]]:
        async def run(name: str, sql: str) -> None:
            conn = sqlite3.connect(tmp_path / f"{name}.sqlite3", isolation_level=None)
            try:
                conn.execute(sql)
            finally:
                conn.close()

        return run

    @pytest.fixture
    def storm_target(self, tmp_path: Path) -> Callable[[str], str]:
        return lambda name: str(tmp_path / f"{name}.sqlite3")
