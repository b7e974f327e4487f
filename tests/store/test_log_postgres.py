"""The event log contract on PostgreSQL (``PostgresEventLog``), on the session's throwaway
server (``tests/support/postgres.py``). Skipped, saying why, only where PostgreSQL or
asyncpg is not installed (``scripts/test.sh`` installs both)."""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from argus.events import task_stream
from tests.events import factories as f
from tests.store.log_contract import EventLogContract, follow_appends
from tests.support.postgres import PostgresServer

asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")


class TestPostgresLog(EventLogContract):
    @pytest.fixture
    async def databases(self, postgres_server: PostgresServer) -> dict[str, str]:
        return {}

    @pytest.fixture
    async def open_log(self, postgres_server: PostgresServer,
                       databases: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        from argus.store.postgres import PostgresEventLog

        opened: list[Any] = []

        async def open_(name: str) -> Any:
            if name not in databases:
                databases[name] = await postgres_server.new_database()
            opened.append(await PostgresEventLog.open(databases[name]))
            return opened[-1]

        yield open_
        for log in opened:
            await log.close()

    @pytest.fixture
    def raw_sql(self, databases: dict[str, str]) -> Callable[[str, str], Awaitable[None]]:
        async def run(name: str, sql: str) -> None:
            conn = await asyncpg.connect(databases[name])
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        return run

    @pytest.fixture
    def storm_target(self, databases: dict[str, str]) -> Callable[[str], str]:
        return lambda name: databases[name]


async def test_subscribers_are_woken_by_the_database_not_by_polling(postgres_server: PostgresServer) -> None:
    """With a poll every 60 s, only the database's notification of each append can deliver
    six events appended 50 ms apart from another connection within 5 s."""
    from argus.store.postgres import PostgresEventLog

    url = await postgres_server.new_database()
    async with await PostgresEventLog.open(url) as reader, await PostgresEventLog.open(url) as writer:
        await writer.append(task_stream("x"), 0, [f.submitted("x")])
        started = time.monotonic()
        assert await follow_appends(reader, writer, count=6, poll_interval=60.0) == [1, 2, 3, 4, 5, 6]
        assert time.monotonic() - started < 5
