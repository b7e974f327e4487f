"""Fixtures for the node pool tests; the harness itself is in ``cluster.py``."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from tests.nodepool.cluster import Cluster, cluster_factory


@pytest.fixture(scope="module")
def make_cluster() -> Iterator[Callable[[str], Cluster]]:
    """Module-scoped: tests of one module share a cluster and run in file order."""
    with cluster_factory() as factory:
        yield factory
