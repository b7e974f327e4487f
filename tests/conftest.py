"""Shared test configuration. Fixture modules live in tests/support/ and are listed here."""

import os

import pytest

# The tests run argus.examples' CPU trainer, as `argus up` does: allowed in every config
# they build, here and in the stacks they start (production: off; argus.config).
os.environ.setdefault("ARGUS_V2__TASKSPEC__ALLOW_EXAMPLES", "true")

pytest_plugins: list[str] = ["tests.support.ray_cluster", "tests.support.stack", "tests.support.postgres"]

# The session-scoped servers, each started once per test process: a test that uses one
# joins that server's group, so that under pytest-xdist one worker starts it, not each.
SHARED_SERVERS = ("ray_cluster", "postgres_server")


def xdist_group_of(item: pytest.Item) -> str:
    """The group a test runs in under ``--dist loadgroup``: the first shared server it
    uses, else its module (whose module-scoped fixtures are then started once)."""
    for server in SHARED_SERVERS:
        if server in getattr(item, "fixturenames", ()):
            return server
    return item.nodeid.split("::", 1)[0]


def pytest_itemcollected(item: pytest.Item) -> None:
    """Group the tests for pytest-xdist (``scripts/test.sh`` runs two workers). Marked as
    each is collected: the worker reads the groups in its ``pytest_collection_modifyitems``,
    which may run before ours."""
    item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Run the browser tests last: Playwright's sync API keeps an event loop running in the
    main thread while its browser is open, which pytest-asyncio tests cannot share."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
