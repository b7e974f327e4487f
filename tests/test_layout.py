"""``argus.layout`` names the shared root's layout once, and imports only the standard
library (without ``typing``): the confining launcher imports it before every Ray worker."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from argus import layout
from argus.confine.registry import registry_dir
from argus.rayjobs import job_dir

LAYOUT = Path(layout.__file__)
# Standard library modules the launcher must not pay for (see tests/confine/test_launcher.py).
SLOW = {"typing", "re", "enum", "json", "collections", "functools"}


def foreign_imports(source: str) -> list[str]:
    """Imports of ``source`` that are not the standard library, or are one the launcher avoids."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                 else ["." * getattr(node, "level", 0)] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            top = name.split(".")[0]
            if name != "__future__" and (top not in sys.stdlib_module_names or top in SLOW):
                found.append(f"{node.lineno}: {name or '.'}")
    return found


def test_layout_imports_only_the_standard_library() -> None:
    assert not foreign_imports(LAYOUT.read_text())


def test_the_import_check_can_fail() -> None:
    assert foreign_imports("import msgspec\nfrom argus import safefs\nfrom . import x\nimport typing\n") == [
        "1: msgspec", "2: argus", "3: .", "4: typing"]
    assert not foreign_imports("from __future__ import annotations\nimport posixpath\nimport os.path\n")


def test_the_paths() -> None:
    assert layout.home("/srv/shared", "alice") == "/srv/shared/users/alice"
    assert layout.job_dir("/srv/shared", "alice", "t-1-a1") == "/srv/shared/users/alice/jobs/t-1-a1"
    assert str(job_dir("/srv/shared/", "alice", "t-1-a1")) == "/srv/shared/users/alice/jobs/t-1-a1"
    assert registry_dir("/srv/shared") == "/srv/shared/ray/confine"
    assert layout.attempts_dir("/srv/shared") == "/srv/shared/ray/attempts"
    assert layout.hub_cache("/srv/shared") == "/srv/shared/hf"
    assert set(layout.COMMON_AREAS.values()) < set(layout.SHARED_READ_ONLY)
