"""``PathPolicy._realpath`` (a component walk that remembers resolved prefixes) answers what
``os.path.realpath`` answers, on random trees of directories, files and symlinks: absolute,
relative, dangling, out of the shared root, and loops."""

from __future__ import annotations

import os
import posixpath
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.taskspec import paths
from argus.taskspec.paths import PathPolicy

NAMES = ["a", "b", "c", "users", "alice", "datasets", "x"]
REL_TARGETS = ["..", "../..", "a", "../a/b", ".", "../../users", "b/../c", "/nonexistent"]

# (parent, name, what, target): parent and target pick among the nodes made so far.
_op = st.tuples(
    st.integers(0, 63), st.sampled_from(NAMES),
    st.sampled_from(["dir", "dir", "file", "link", "rel-link"]),
    st.integers(0, 63) | st.sampled_from(REL_TARGETS),
)
# (node, more, normalise): a node made (often through a link), then components that may
# not exist, '..' and '.' included; normalise as the policy does, or leave as written.
_query = st.tuples(st.integers(0, 63), st.lists(st.sampled_from([*NAMES, "..", "."]), max_size=4),
                   st.booleans())


def _grow(root: str, ops: list[tuple[int, str, str, int | str]]) -> list[str]:
    """Make ``ops`` under ``root``/shared; links may point anywhere made so far, or outside.
    Returns the paths made (as written)."""
    shared = f"{root}/shared"
    os.makedirs(f"{shared}/users/alice/datasets")
    nodes = [shared, f"{shared}/users", f"{shared}/users/alice", f"{shared}/users/alice/datasets"]
    outside = [root, "/nonexistent"]
    for parent, name, what, target in ops:
        path = f"{nodes[parent % len(nodes)]}/{name}"
        if os.path.lexists(path):
            continue
        try:
            if what == "dir":
                os.mkdir(path)
            elif what == "file":
                Path(path).touch()
                continue
            elif isinstance(target, str):
                os.symlink(target, path)
            else:
                choices = [*nodes, *outside, path]  # path itself: a link to itself (a loop)
                os.symlink(choices[target % len(choices)], path)
        except OSError:
            continue  # the parent is a file or a dangling link: nothing made
        nodes.append(path)
    return nodes


@settings(max_examples=300, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(_op, max_size=25), queries=st.lists(_query, min_size=1, max_size=30),
       memo_depth=st.sampled_from([paths._MEMO_DEPTH, 2]))
def test_realpath_matches_os_realpath(tmp_path: Path, ops: list[tuple[int, str, str, int | str]],
                                      queries: list[tuple[int, list[str], bool]], memo_depth: int) -> None:
    root = tempfile.mkdtemp(dir=tmp_path)  # a fresh tree per example
    nodes = _grow(root, ops)
    shared = f"{root}/shared"
    # memo_depth 2: most components are walked without the memo (the bounded-depth branch)
    with mock.patch.object(paths, "_MEMO_DEPTH", memo_depth):
        policy = PathPolicy(shared_root=shared, user="alice")
        for _round in range(2):  # the second round answers from the memo
            for node, more, normalise in queries:
                path = "/".join([nodes[node % len(nodes)], *more])
                if normalise:
                    path = posixpath.normpath(path)
                assert policy._realpath(path) == os.path.realpath(path), path
