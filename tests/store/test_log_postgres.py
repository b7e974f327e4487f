"""The event log contract on PostgreSQL (``PostgresEventLog``), on a throwaway server this
module starts (``tests/support/postgres.py``) and stops. Skipped, saying why, only where
PostgreSQL or asyncpg is not installed (``scripts/test.sh`` installs both)."""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import pytest

from tests.store.log_contract import EventLogContract
from tests.support.postgres import PostgresServer, find_postgres_bin

asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    if find_postgres_bin("initdb") is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; scripts/test.sh does it)")
    pg = PostgresServer()
    try:
        yield pg.start()
    finally:
        pg.stop()


class TestPostgresLog(EventLogContract):
    @pytest.fixture
    async def databases(self, server: PostgresServer) -> dict[str, str]:
        return {}

    @pytest.fixture
    async def open_log(self, server: PostgresServer,
                       databases: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        from argus.store.postgres import PostgresEventLog

        opened: list[Any] = []

        async def open_(name: str) -> Any:
            if name not in databases:
                databases[name] = await server.new_database()
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
