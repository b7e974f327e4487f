"""The house's layers, as imports: no module imports a module of a higher layer, and no
import cycle exists anywhere (function-local imports count: they are imports too).

Layers, lowest first (docs/architecture.md draws them):
events → scheduler → store → projections → views → reactor/service → api/cli.
Modules outside the line sit where their imports put them (``LAYERS`` below); a new
top-level module must be placed here, or the test says so.

``argus.scheduler`` is also pure (docs/design.md §5): no module of it imports ``sqlite3``,
reads a clock or imports a projection's reader; ``test_the_scheduler_is_pure`` reads its
source for that, since the import graph cannot see a call of ``time.time()``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

# Lowest first. Packages in one layer may import each other only where ALLOWED_SIDEWAYS says.
LAYERS: list[set[str]] = [
    {"argus.layout"},  # the shared root's layout: stdlib only (tests/test_layout.py)
    {"argus.lifecycle", "argus.config", "argus.config_data", "argus.config_seed", "argus.config_teams", "argus.procs", "argus.ui", "argus.confine", "argus.safefs",
     "argus.gcpause", "argus.proctable"},
    {"argus.events"},
    # The pure decision core owns its input model (argus.scheduler.task, .history): the read
    # side folds the log into what it decides on, never the other way round.
    {"argus.scheduler"},
    {"argus.store"},
    {"projections"},
    {"argus.taskspec", "argus.nodepool", "argus.guardian", "argus.examples"},
    {"argus.rayjobs", "argus.views"},
    {"argus.reactor", "argus.service", "argus.replay", "argus.sim"},
    {"argus.api", "argus.driver", "argus.sftp"},
    {"argus.cli"},
    {"argus.__main__", "argus"},
]
# Sideways imports within one layer that are part of the design (the importer first).
ALLOWED_SIDEWAYS = {
    ("argus.config", "argus.config_data"),  # the whole configuration, re-exported in one place
    ("argus.config", "argus.config_teams"),
    ("argus.config", "argus.config_seed"),  # the seed platform's keys, ignored with a warning
    # the simulator runs the reactor's own state fold and decision core (one decision core)
    ("argus.sim", "argus.reactor"),
    # the SFTP door serves the REST files API's areas, by the same names and limits
    ("argus.sftp", "argus.api"),
}
# procs reaches nodepool's port helpers lazily; nodepool is infrastructure below rayjobs.
ALLOWED_UPWARD = {("argus.procs", "argus.nodepool")}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("argus", "projections", include_external_packages=False)


def _unit(module: str) -> str:
    """The package a module belongs to for layering (``argus.store.log`` → ``argus.store``)."""
    if module.startswith("projections"):
        return "projections"
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _layer(unit: str) -> int:
    for index, members in enumerate(LAYERS):
        if unit in members:
            return index
    raise AssertionError(f"{unit} is in no layer: place it in tests/test_layers.py LAYERS")


def test_no_module_imports_a_higher_layer(graph: grimp.ImportGraph) -> None:
    wrong = back_edges(graph)
    assert not wrong, "layer back-edges:\n" + "\n".join(wrong)


def back_edges(graph: grimp.ImportGraph) -> list[str]:
    """Imports of a module of a higher layer (or of a same-layer sibling not allowed)."""
    wrong = []
    for module in sorted(graph.modules):
        low = _unit(module)
        for imported in graph.find_modules_directly_imported_by(module):
            high = _unit(imported)
            if low == high or (low, high) in ALLOWED_UPWARD:
                continue
            if _layer(high) > _layer(low) or (_layer(high) == _layer(low) and (low, high) not in ALLOWED_SIDEWAYS):
                wrong.append(f"{module} imports {imported} ({high} is not below {low})")
    return wrong


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    """No module reaches itself through its imports (Tarjan's strongly connected components)."""
    assert not import_cycles(graph)


def test_the_checks_can_fail() -> None:
    """A back-edge and a cycle added to a fresh graph are found."""
    bent = grimp.build_graph("argus", "projections", include_external_packages=False, cache_dir=None)
    bent.add_import(importer="argus.store.log", imported="projections.fold")
    assert ["argus.store.log", "projections.fold"] in import_cycles(bent)
    assert back_edges(bent)
    # The scheduler reading the read side's task view again is a back-edge too.
    assert not any(e.startswith("argus.scheduler.") for e in back_edges(bent))
    bent.add_import(importer="argus.scheduler.core", imported="projections.task_view")
    assert [e for e in back_edges(bent) if e.startswith("argus.scheduler.core imports projections.task_view")]


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other, directly or not."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        # Iterative DFS: the graph is a few hundred modules, but recursion depth is not ours to spend.
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return cycles


ROOT = Path(__file__).resolve().parents[1]


def modules_loaded_by(statement: str) -> list[str]:
    """Every module ``python -X importtime -c statement`` loads, in a fresh interpreter
    that imports this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=True)
    rows = [line.rsplit("|", 1)[-1] for line in done.stderr.splitlines() if line.startswith("import time:")]
    return [name.strip() for name in rows if name.strip() != "imported package"]


def store_modules(loaded: list[str]) -> list[str]:
    """Those of ``loaded`` that are SQLite or the log store."""
    return [m for m in loaded if m.split(".")[0] in ("sqlite3", "_sqlite3") or m.startswith("argus.store")]


def test_the_decision_core_loads_no_store() -> None:
    """``import argus.scheduler.core`` brings no database with it: the scheduler owns its
    input model (``argus.scheduler.task``, ``.history``) instead of the read side's."""
    loaded = modules_loaded_by("import argus.scheduler.core")
    assert "argus.scheduler.core" in loaded, loaded[-5:]
    assert not store_modules(loaded), f"import argus.scheduler.core loads {store_modules(loaded)}"
    assert not [m for m in loaded if m.split(".")[0] == "projections"]


def test_the_store_check_can_fail() -> None:
    """A module that does read the database is caught by the same check."""
    found = store_modules(modules_loaded_by("import projections.runtime_stats"))
    assert "sqlite3" in found and "argus.store" in found, found


def test_the_layer_table_knows_every_package(graph: grimp.ImportGraph) -> None:
    for module in graph.modules:
        _layer(_unit(module))


SCHEDULER = Path(__file__).resolve().parents[1] / "argus" / "scheduler"
# Calls that read a clock. ``time.strftime``/``time.gmtime`` of a given time stay allowed:
# they format, they do not read the clock.
CLOCKS = {("time", "time"), ("time", "time_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
          ("time", "perf_counter"), ("time", "perf_counter_ns"),
          ("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today")}


def impurities(source: str, where: str = "<source>") -> list[str]:
    """What makes a scheduler module impure: importing ``sqlite3``, ``from time import``
    (a clock imported by name could be called unseen), a call of a clock, or importing a
    projection's reader (a ``projections.*_read`` module, a ``read_*`` function, or
    anything of ``projections.cluster`` but its types)."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlite3":
                    found.append(f"{where}:{node.lineno}: import {alias.name}")
                elif _is_reader_module(alias.name):
                    found.append(f"{where}:{node.lineno}: import {alias.name} (a projection's reader)")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            module = node.module
            if module.split(".")[0] == "sqlite3":
                found.append(f"{where}:{node.lineno}: from {module} import ...")
            elif module == "time":
                found.append(f"{where}:{node.lineno}: from time import ...")
            elif module.split(".")[0] == "projections":
                for alias in node.names:
                    if (_is_reader_module(module) or alias.name.startswith("read_")
                            or (module == "projections.cluster" and not alias.name[:1].isupper())):
                        found.append(f"{where}:{node.lineno}: from {module} import {alias.name} (a reader)")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in CLOCKS):
            found.append(f"{where}:{node.lineno}: {node.func.value.id}.{node.func.attr}() reads the clock")
    return found


def _is_reader_module(module: str) -> bool:
    """``projections.tasks_read`` and its kind: modules of nothing but database readers."""
    return module.startswith("projections.") and module.split(".")[-1].endswith("_read")


def test_the_scheduler_is_pure() -> None:
    """Same inputs, same decisions: the scheduler reads no database and no clock (the time
    is handed in); what reads the projections for it lives in ``argus.views``."""
    modules = sorted(SCHEDULER.rglob("*.py"))
    assert modules, f"no modules under {SCHEDULER}"
    found = [o for path in modules
             for o in impurities(path.read_text(), str(path.relative_to(SCHEDULER.parents[1])))]
    assert not found, "argus/scheduler is not pure:\n" + "\n".join(found)


def test_the_purity_check_can_fail() -> None:
    """Each kind of impurity, planted in a source string, is found; formatting a given
    time and importing a projection's types are not impurities."""
    planted = "\n".join([
        "import sqlite3",
        "from sqlite3 import Connection",
        "from time import monotonic",
        "import time",
        "from projections.tasks_read import tasks_in_states",
        "from projections.usage import read_usage",
        "from projections.cluster import ClusterView, read_cluster",
        "def f():",
        "    return time.time(), time.monotonic(), time.perf_counter(), time.strftime('%H', time.gmtime(0))",
    ])
    found = impurities(planted)
    assert len(found) == 9, found
    assert not impurities("import time\nfrom projections import TaskView\nfrom projections.cluster import ClusterView\n"
                          "x = time.strftime('%H:%M', time.gmtime(0))\n")


# The decision core and the simulator are read far more than they are written: a function
# that does not fit on a screen hides which stage decides what (issue 34 split a 133-line
# pass into stages).
MAX_FUNCTION_LINES = 60


def long_functions(source: str, where: str = "<source>") -> list[str]:
    """Functions (methods and nested ones too) longer than ``MAX_FUNCTION_LINES``, from
    their ``def`` line to their last line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{where}:{node.lineno}: {node.name} has {lines} lines")
    return found


def test_no_function_of_argus_or_projections_is_over_60_lines() -> None:
    found = [o for package in (ROOT / "argus", ROOT / "projections") for path in sorted(package.rglob("*.py"))
             for o in long_functions(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "split these along their seams:\n" + "\n".join(found)


def test_the_length_check_can_fail() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}\n") and not long_functions("def f():\n    return 1\n")


# The fair-share order's parts: only ``argus.scheduler.fairshare`` puts them together, in
# ``fair_pass``, so the policy, the queue shown, the ETAs and /shares cannot drift apart.
FAIR_PARTS = {"fair_order", "fair_shares"}


def fair_part_uses(source: str, where: str = "<source>") -> list[str]:
    """Imports or uses of the fair order's parts by name (``FAIR_PARTS``)."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.ImportFrom):
            found += [f"{where}:{node.lineno}: imports {a.name}" for a in node.names if a.name in FAIR_PARTS]
        elif isinstance(node, ast.Attribute) and node.attr in FAIR_PARTS:
            found.append(f"{where}:{node.lineno}: uses {node.attr}")
    return found


def test_one_fair_order() -> None:
    """Outside ``argus/scheduler/fairshare.py`` the fair order is made by ``fair_pass`` only."""
    home = SCHEDULER / "fairshare.py"
    paths = [p for root in (SCHEDULER.parent, ROOT / "projections") for p in sorted(root.rglob("*.py")) if p != home]
    found = [o for path in paths for o in fair_part_uses(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "call argus.scheduler.fairshare.fair_pass instead:\n" + "\n".join(found)


def test_the_fair_order_check_can_fail() -> None:
    planted = "from argus.scheduler.fairshare import fair_pass, fair_shares\nimport argus\nargus.x.fair_order(1)\n"
    assert len(fair_part_uses(planted)) == 2
    assert not fair_part_uses("from argus.scheduler.fairshare import fair_pass\nfair_pass()\n")


# A raw connection stays inside the read side: consumers ask the typed faces
# (``projections.reads.ProjectionReads``, ``argus.views.reads.ViewReads``), never
# ``read_snapshot(lambda db: ...)``; only ``argus.views`` assembles its own read transactions
# (``read_view``).
RAW_READS = {"read_snapshot": ("argus/store/", "projections/"), "read_view": ("argus/views/", "projections/")}


def raw_reads(source: str, where: str) -> list[str]:
    """Uses of ``RAW_READS``' names in a module outside the folders each is allowed in."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in RAW_READS and not where.startswith(RAW_READS[name]):
            found.append(f"{where}:{node.lineno}: {name} (use a typed read of projections.reads or argus.views.reads)")
    return found


def test_no_raw_reads_outside_the_read_side() -> None:
    paths = [p for root in (SCHEDULER.parent, ROOT / "projections") for p in sorted(root.rglob("*.py"))]
    found = [o for path in paths for o in raw_reads(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert not found, "\n".join(found)


def test_the_raw_read_check_can_fail() -> None:
    planted = "async def f(store, reads):\n    await store.read_snapshot(lambda db: 1)\n    await reads.read_view(g)\n"
    assert len(raw_reads(planted, "argus/service/x.py")) == 2
    assert len(raw_reads(planted, "argus/views/x.py")) == 1  # views assemble, through read_view only
    assert not raw_reads(planted, "projections/reads.py")
    assert not raw_reads("async def f(reads):\n    return await reads.task('t')\n", "argus/service/x.py")
