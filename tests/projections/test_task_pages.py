"""Task lists page by cursor (keyset): walking every page gives exactly the filtered list,
newest first, with no row twice or missed, for every filter; an offset gives the same rows."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import msgspec
import pytest

from argus.lifecycle import TaskState
from argus.store import migrate
from projections import TasksProjection
from projections.user_views import UserViewsProjection
from projections.tasks_read import PageCursor, task_page
from tests.events import factories as f

STATES = [TaskState.QUEUED, TaskState.SUCCEEDED, TaskState.FAILED]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = Path(tmp_path_factory.mktemp("pages")) / "tasks.sqlite3"
    migrate(str(path))
    conn = sqlite3.connect(path)
    rng = random.Random(7)
    # Few distinct creation times: many ties, which only the task id breaks.
    views = {}
    for i in range(237):
        v = f.folded_submission(f"t{rng.randint(0, 10**6):07d}-{i}", i + 1, user=rng.choice("ab"))
        views[v.task_id] = msgspec.structs.replace(v, created_at=float(rng.randint(0, 50)), state=rng.choice(STATES))
    TasksProjection().write_all(conn, views)
    UserViewsProjection().write_all(conn, views)  # the totals come from its per-user counts
    conn.commit()
    return conn


@pytest.mark.parametrize("user", [None, "a"])
@pytest.mark.parametrize("states", [(), (TaskState.QUEUED,), (TaskState.SUCCEEDED, TaskState.FAILED)])
def test_cursor_pages_walk_the_whole_list_in_order(db: sqlite3.Connection, user, states) -> None:
    everything = [msgspec.json.decode(v, type=dict) for (v,) in db.execute("SELECT view FROM tasks")]
    expected = sorted(
        (t for t in everything if (user is None or t["user"] == user) and (not states or t["state"] in {s.value for s in states})),
        key=lambda t: (t["created_at"], t["task_id"]), reverse=True)
    seen, cursor = [], None
    while True:
        page, total, cursor = task_page(db, user=user, states=states, limit=20, after=cursor)
        assert total == len(expected)
        seen += [v.task_id for v in page]
        if cursor is None:
            break
        cursor = PageCursor.decode(cursor.encode())  # as a client passes it back
    assert seen == [t["task_id"] for t in expected]
    for offset in (1, 19, 40, len(seen) - 1, len(seen), len(seen) + 5):
        by_offset, total, nxt = task_page(db, user=user, states=states, limit=20, offset=offset)
        assert [v.task_id for v in by_offset] == seen[offset:offset + 20], offset
        assert total == len(expected)
        assert (nxt is not None) == (offset + 20 < len(seen)), offset


@pytest.mark.parametrize("text", ["", "xyz", "W10", "WzEsMl0"])
def test_a_cursor_not_made_here_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        PageCursor.decode(text)
