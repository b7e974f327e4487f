"""No SQL outside the store and the projections: everything else reads through typed
readers (``projections.*``) or the store's functions (``argus.store``), so a table's shape
is known in one place. The scan looks at every module of ``argus`` but ``argus.store``:
string constants that read as SQL, and calls of ``execute``/``executemany``/``query``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ARGUS = Path(__file__).resolve().parents[1] / "argus"
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|PRAGMA|BEGIN|COMMIT|ROLLBACK|ATTACH)\b")
CALLS = {"execute", "executemany", "executescript", "query"}


def offences(path: Path) -> list[str]:
    where = path.relative_to(ARGUS.parent) if path.is_relative_to(ARGUS.parent) else path
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
            found.append(f"{where}:{node.lineno}: SQL text {node.value[:60]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS:
            found.append(f"{where}:{node.lineno}: .{node.func.attr}(...)")
    return found


def test_no_sql_outside_the_store_and_the_projections() -> None:
    found = [o for path in sorted(ARGUS.rglob("*.py")) if "store" not in path.relative_to(ARGUS).parts[:1]
             for o in offences(path)]
    assert not found, "SQL outside argus/store and projections/:\n" + "\n".join(found)


def test_the_scan_finds_sql(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('def f(db):\n    return db.execute("SELECT 1 FROM tasks")\n')
    assert len(offences(planted)) == 2
