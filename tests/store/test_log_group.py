"""The event log contract on group commit: ``GroupCommitLog`` over SQLite's ``EventStore``
(keeping no projections). Group commit is an event log like any other: whatever the
contract asks of the log beneath, it asks of the log with group commit in front."""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from argus.store import GroupCommitLog
from projections import open_store
from tests.store import test_log_sqlite


# The module, not the class: a Test class imported by name is collected here a second time.
class TestGroupCommitLog(test_log_sqlite.TestSqliteLog):
    @pytest.fixture
    async def open_log(self, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        opened: list[tuple[Any, GroupCommitLog]] = []

        async def open_(name: str) -> GroupCommitLog:
            store = await open_store(tmp_path / f"{name}.sqlite3", projections=[])
            opened.append((store, GroupCommitLog(store)))
            return opened[-1][1]

        yield open_
        for store, log in opened:
            await log.close()
            await store.close()
