"""The event log contract on PostgreSQL (``PostgresEventLog``), on the session's throwaway
server (``tests/support/postgres.py``). Skipped, saying why, only where PostgreSQL or
asyncpg is not installed (``scripts/test.sh`` installs both)."""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from tests.store.log_contract import EventLogContract
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
