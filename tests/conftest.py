"""Shared test configuration. Fixture modules live in tests/support/ and are listed here."""

import os

# The tests run argus.examples' CPU trainer, as `argus up` does: allowed in every config
# they build, here and in the stacks they start (production: off; argus.config).
os.environ.setdefault("ARGUS_V2__TASKSPEC__ALLOW_EXAMPLES", "true")

pytest_plugins: list[str] = ["tests.support.ray_cluster", "tests.support.stack", "tests.support.postgres"]


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Run the browser tests last: Playwright's sync API keeps an event loop running in the
    main thread while its browser is open, which pytest-asyncio tests cannot share."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
