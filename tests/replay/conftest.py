"""The recorded scenario is built once per module (real EventStore, real SQLite file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.replay.scenario import Scenario, copy_db, record


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return record(tmp_path_factory.mktemp("scenario") / "argus.sqlite3")


@pytest.fixture
def db_copy(scenario: Scenario, tmp_path: Path) -> Path:
    """A private copy that a test may damage."""
    return copy_db(scenario.db, tmp_path / "copy.sqlite3")
