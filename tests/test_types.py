"""The package type-checks: mypy over ``argus`` and ``projections`` finds no error.

Run as a subprocess with the settings in pyproject.toml ([tool.mypy]), so the check is the
one a developer runs by hand (``mypy``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_finds_no_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
