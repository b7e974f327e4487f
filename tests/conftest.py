"""Shared test configuration. Fixture modules live in tests/support/ and are listed here."""

pytest_plugins: list[str] = ["tests.support.ray_cluster"]
