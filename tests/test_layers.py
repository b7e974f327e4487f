"""The house's layers, as imports: no module imports a module of a higher layer, and no
import cycle exists anywhere (function-local imports count: they are imports too).

Layers, lowest first (docs/architecture.md draws them):
events → store → projections → scheduler → reactor/service → api/cli.
Modules outside the line sit where their imports put them (``LAYERS`` below); a new
top-level module must be placed here, or the test says so.
"""

from __future__ import annotations

import grimp
import pytest

# Lowest first. Packages in one layer may import each other only where ALLOWED_SIDEWAYS says.
LAYERS: list[set[str]] = [
    {"argus.lifecycle", "argus.config", "argus.procs", "argus.ui"},
    {"argus.events"},
    {"argus.store"},
    {"projections"},
    {"argus.scheduler", "argus.taskspec", "argus.nodepool", "argus.guardian", "argus.examples"},
    {"argus.rayjobs"},
    {"argus.reactor", "argus.service", "argus.replay", "argus.sim"},
    {"argus.api", "argus.driver"},
    {"argus.cli"},
    {"argus.__main__", "argus"},
]
# Sideways imports within one layer that are part of the design (the importer first).
ALLOWED_SIDEWAYS = {
    ("argus.taskspec", "argus.scheduler"),  # a spec's demand is checked against the cluster shape
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


def test_the_layer_table_knows_every_package(graph: grimp.ImportGraph) -> None:
    for module in graph.modules:
        _layer(_unit(module))
