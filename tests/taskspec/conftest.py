"""Fixtures: a real shared root in a tmp dir, with two users' homes and the shared folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from argus.taskspec import PreparedTask, prepare_task
from tests.taskspec.support import Prepare


@pytest.fixture
def shared_root(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    for sub in (
        "users/alice/datasets/gsm8k",
        "users/alice/code",
        "users/alice/models/m1",
        "users/alice/jobs",
        "users/bob/datasets",
        "users/bob/code",
        "datasets/gsm8k",
        "common/datasets",
        "hf",
    ):
        (root / sub).mkdir(parents=True)
    # The input files the tests name: prepare_task refuses data, model and reward paths
    # that do not exist (tests of that refusal name other files).
    for path in (
        "users/alice/datasets/gsm8k/train.parquet",
        "users/alice/datasets/gsm8k/test.parquet",
        "users/alice/datasets/a.parquet",
        "users/alice/datasets/a",
        "datasets/gsm8k/train.parquet",
        "datasets/gsm8k/test.parquet",
        "datasets/b.parquet",
        "common/datasets/x.parquet",
        "users/bob/datasets/secret.parquet",
    ):
        (root / path).write_bytes(b"PAR1")
    (root / "hf/Qwen2.5").mkdir()
    for code in ("users/alice/code/reward.py", "users/bob/code/reward.py"):
        (root / code).write_text("def compute_score(**kw): return 0\n")
    return root


@pytest.fixture
def prepare(shared_root: Path) -> Prepare:
    """prepare_task for alice under the tmp shared root."""

    def run(document: Any, **kwargs: Any) -> PreparedTask:
        kwargs.setdefault("user", "alice")
        kwargs.setdefault("task_id", "alice-ppo-20250101-000000-abcd")
        return prepare_task(document, shared_root=shared_root, **kwargs)

    return run
