"""Where a gang fits in one pass: the free resources per node, best-fit placement, and
why a gang does not fit (in words, with the numbers)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler.fragmentation import ShapeMix
from argus.scheduler.freeindex import FreeIndex
from argus.scheduler.gpumodel import allowed_nodes, except_nodes, models_of, models_present, wants
from argus.scheduler.model import Defer, QueuedTask, Reason
from argus.scheduler.per_model import scarce_nodes
from argus.scheduler.reserve import Endings, Reservation, earliest_start

__all__ = ["Pool", "fmt_amount", "needs", "node_label"]


def fmt_amount(x: float) -> str:
    """A resource amount as people write it: 4, not 4.0; 0.5 stays 0.5."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _list(values: Sequence[float], limit: int = 16) -> str:
    shown = ", ".join(fmt_amount(v) for v in values[:limit])
    more = f", …(+{len(values) - limit} more)" if len(values) > limit else ""
    return f"[{shown}{more}]"


class _Totals(tuple[tuple[float, float], ...]):
    """The nodes' (GPUs, CPUs) totals as a cache key hashed once (a pass asks
    ``_big_nodes`` for every shape in line, and hashing 60 pairs each time showed)."""

    _hash: int

    def __new__(cls, totals: Sequence[tuple[float, float]]) -> "_Totals":
        made = super().__new__(cls, totals)
        made._hash = tuple.__hash__(made)
        return made

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or tuple.__eq__(self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        return not self == other


_SEEN_TOTALS: dict[_Totals, _Totals] = {}


def _interned(totals: _Totals) -> _Totals:
    """The one ``_Totals`` equal to ``totals`` (then ``_big_nodes``' cache compares keys by
    identity, not node by node)."""
    if len(_SEEN_TOTALS) > 64:  # clusters change rarely: forget them all now and then
        _SEEN_TOTALS.clear()
    return _SEEN_TOTALS.setdefault(totals, totals)


@functools.lru_cache(maxsize=1024)
def _big_nodes(totals: tuple[tuple[float, float], ...], gpus: int, cpus: float,
               allowed: frozenset[int] | None) -> tuple[int, tuple[float, float]]:
    """How many nodes (of ``allowed``, None: all) could hold one gang member if idle, and
    the largest of them: asked once per shape and cluster (every pass asks it for every
    shape in line)."""
    mine = totals if allowed is None else [totals[i] for i in sorted(allowed)]
    big = sum(1 for g, c in mine if g >= gpus and c >= cpus)
    return big, max(mine, default=(0.0, 0.0))


@functools.lru_cache(maxsize=1024)
def homes_of(totals: tuple[tuple[float, float], ...], gpus: int, cpus: float,
             allowed: frozenset[int] | None) -> frozenset[int]:
    """The nodes (indices; of ``allowed``, None: all) that could hold one member of a gang
    of this shape if idle."""
    return frozenset(i for i, (g, c) in enumerate(totals) if g >= gpus and c >= cpus
                     and (allowed is None or i in allowed))


@functools.lru_cache(maxsize=64)
def rare_nodes(totals: tuple[tuple[float, float], ...], types: tuple[str, ...]) -> frozenset[int]:
    """The nodes few others match: at most 5 % of the nodes (of its GPU model) have as many
    GPUs and as many CPUs. A gang member that needs what only they have waits for them
    alone. None on a cluster of fewer than 20 nodes (keeping one of a few nodes for larger
    work would cost a large part of it) or of equal nodes."""
    few = len(totals) // 20
    if few == 0 or len(set(zip(totals, types))) == 1:
        return frozenset()
    return frozenset(i for i, (g, c) in enumerate(totals)
                     if sum(1 for j, (g2, c2) in enumerate(totals) if g2 >= g and c2 >= c and types[j] == types[i]) <= few)


def node_label(node_id: str, ip: str) -> str:
    """A node as a message names it: its address and the first 8 characters of Ray's
    56-character id (the cluster page shows the id's start beside the address)."""
    short = node_id[:8] if len(node_id) > 16 else node_id
    return f"{ip} (node {short})" if ip else f"node {short}"


def needs(d: Demand) -> str:
    model = f"{models_of(d)} " if d.gpu_types else ""
    return (f"needs {d.nnodes} node{'s' if d.nnodes != 1 else ''} × {d.n_gpus_per_node} {model}GPUs "
            f"(+{fmt_amount(d.cpus_per_node)} CPUs each)")


_NO_NODES: frozenset[int] = frozenset()

# What ``Pool.never_known`` gives for a shape never_fits has not answered for yet in this
# pass (a Defer, so that a lookup keeps its type).
NOT_ASKED = Defer(task_id="", reason="", message="")


class Pool:
    """Mutable free-resource view for one pass (arrays indexed like ``ids``). Gangs are
    placed fragmentation-aware against ``mix`` (made on first need), else best-fit."""

    def __init__(self, nodes: Sequence[NodeCapacity], mix: Callable[[], ShapeMix] | None = None,
                 waiting: Callable[[], Iterable[Demand]] | None = None, minor_last: bool = True) -> None:
        ordered = sorted(nodes, key=lambda n: n.node_id)
        self.ids = [n.node_id for n in ordered]
        self.labels = [node_label(n.node_id, n.ip) for n in ordered]  # how messages name them
        self.gpus = [max(0.0, n.free_gpus) for n in ordered]
        self.cpus = [max(0.0, n.free_cpus) for n in ordered]
        # placements by shape (and nodes to avoid), forgotten when resources are taken;
        # shapes that did not fit, kept (free resources only shrink within a pass)
        self._cache: dict[tuple[object, ...], tuple[int, ...]] = {}
        self._unplaced: set[tuple[object, ...]] = set()
        self._snapshot: tuple[float, ...] | None = None
        self.totals = [(n.total_gpus, n.total_cpus) for n in ordered]
        self._totals_key = _interned(_Totals(self.totals))  # hashed and compared once per pass
        self.types = tuple(n.gpu_type for n in ordered)  # each node's GPU model ("" unlabelled)
        # never_fits' answers by shape (the pass asks it only of shapes that have not
        # failed yet in it: once per shape, and per task of a shape that never fits)
        self.never_known: dict[tuple[object, ...], Defer | None] = {}
        self._make_mix = mix
        self._mix: ShapeMix | None = None
        self._waiting = waiting
        self._spared: frozenset[int] | None = None  # made on the first placement
        # best-fit order per GPU models asked for (``FreeIndex``), made on the first
        # placement of each and kept in order by ``take``
        self._indexes: dict[tuple[str, ...], FreeIndex] = {}
        self._cands: dict[tuple[str, ...], Sequence[int]] = {}  # _candidates' answers by GPU models
        self._free_sums: dict[tuple[str, ...], float] = {}  # free GPUs on them, until the next take
        self._rare: frozenset[int] | None = None  # made when a task that may not be preempted asks
        # a task of any model goes on the nodes of minor GPU models last (argus.scheduler.per_model)
        self._minor = scarce_nodes(self.types) if minor_last else _NO_NODES

    def spared(self) -> frozenset[int]:
        """The nodes that are every home a waiting gang's shape has (the only nodes with
        the GPUs, CPUs or model for it, and no more of them than it needs): a gang that
        fits elsewhere is placed off them. On the openb trace a shape of 8 GPUs and 120
        CPUs fits one node of 60; other users' tasks placed there, when they fitted
        elsewhere, made such tasks wait 40-57 h under fair share (docs/evaluation/2026-11-27-policy-comparison.md)."""
        if self._spared is None:
            spared: set[int] = set()
            # Distinct demands first (hashed in C: 10,000 waiting tasks have a few dozen),
            # then their shapes: a Demand is equal to another exactly when these are.
            demands = set(self._waiting()) if self._waiting is not None else set()
            shapes = {(d.nnodes, d.n_gpus_per_node, d.cpus_per_node, d.gpu_types) for d in demands}
            for nnodes, gpus, cpus, types in shapes:
                homes = homes_of(self._totals_key, gpus, cpus, allowed_nodes(types, self.types) if types else None)
                if len(homes) <= nnodes:
                    spared |= homes
            self._spared = frozenset(spared)
        return self._spared

    def _order(self, fits: list[int], d: Demand) -> list[int]:
        """Where to put a gang's members first, among the nodes that fit one, by
        fragmentation (best-fit, the only homes of a waiting shape last, is ``_index``'s
        order)."""
        assert self._make_mix is not None
        if self._mix is None:
            self._mix = self._make_mix()
        return self._mix.order(fits, self.gpus, self.cpus, self.ids, d)

    def keeps_off(self, d: Demand) -> frozenset[int]:
        """The nodes a task of ``d`` that may not be preempted keeps off: the rare nodes
        (``rare_nodes``), unless too few others could ever hold its gang. Such a task
        cannot be moved once it runs: on the trace (seed 1, half the tasks preemptible) a
        1-GPU task of 287 h took a GPU of the one 128-CPU node of 60, and the 8-GPU tasks
        with 120 CPUs that arrived next waited up to 284 h (docs/evaluation/2026-11-27-policy-comparison.md)."""
        if self._rare is None:
            self._rare = rare_nodes(self._totals_key, self.types)
        rare = self._rare
        if not rare:
            return rare
        homes = homes_of(self._totals_key, d.n_gpus_per_node, d.cpus_per_node, self.allowed(d))
        return frozenset() if len(homes - rare) < d.nnodes else rare

    def allowed(self, d: Demand) -> frozenset[int] | None:
        """The nodes (indices) whose GPU model ``d`` accepts; None: every node."""
        return allowed_nodes(d.gpu_types, self.types) if d.gpu_types else None

    def never_fits(self, d: Demand, key: tuple[object, ...]) -> Defer | None:
        """Why ``d`` could not be placed even on idle nodes (by their totals), or None.
        ``key``: the shape, ``(nnodes, n_gpus_per_node, cpus_per_node, gpu_types)`` (the pass has it)."""
        found = self.never_known.get(key, NOT_ASKED)
        if found is not NOT_ASKED:
            return found
        allowed = self.allowed(d)
        big, largest = _big_nodes(self._totals_key, d.n_gpus_per_node, d.cpus_per_node, allowed)
        if big >= d.nnodes:
            found = None
        else:
            where = f"the {len(self.totals)} alive worker node(s)"
            if allowed is not None:
                where = (f"{wants(d)}: {len(allowed)} of the {len(self.totals)} alive worker node(s) have it "
                         f"({models_present(self.types)}), and they")
            found = Defer(task_id="", reason=Reason.NEVER_FITS, free_gpus_per_node=self.free_gpus(), message=(
                f"{needs(d)}; {where} could not hold it even if idle: {big} of them have "
                f"≥ {d.n_gpus_per_node} GPUs and ≥ {fmt_amount(d.cpus_per_node)} CPUs in all (largest: "
                f"{fmt_amount(largest[0])} GPUs, {fmt_amount(largest[1])} CPUs); it holds no one back and "
                f"starts when big enough nodes join"))
        self.never_known[key] = found
        return found

    def free_gpus(self) -> tuple[float, ...]:
        if self._snapshot is None:
            self._snapshot = tuple(self.gpus)
        return self._snapshot

    def place_avoiding(self, d: Demand, avoid: frozenset[int]) -> tuple[int, ...] | None:
        """Nodes for the gang among the nodes not in ``avoid`` (as ``place``), or None."""
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node, d.gpu_types, avoid)
        if key in self._unplaced:
            return None
        if key in self._cache:  # (behind a reservation, every task that fits asks)
            return self._cache[key]
        g, c = d.n_gpus_per_node, d.cpus_per_node
        if self._make_mix is None:  # best-fit: walk the index
            result = self._index(d).pick(d.nnodes, g, c, avoid)
        else:
            fits = [i for i in self._candidates(d) if i not in avoid and self.gpus[i] >= g and self.cpus[i] >= c]
            result = None if len(fits) < d.nnodes or d.nnodes <= 0 else tuple(self._order(fits, d)[: d.nnodes])
        self._remember(key, result)
        return result

    def reservation(self, t: QueuedTask, endings: Endings, now: float,
                    avoid: frozenset[int] = frozenset()) -> Reservation | None:
        """The earliest start of ``t``'s gang as ``endings`` free resources (see reserve.py)."""
        found = earliest_start(
            t.demand, now=now, ids=self.ids, free_gpus=self.gpus, free_cpus=self.cpus,
            total_gpus=[g for g, _ in self.totals], total_cpus=[c for _, c in self.totals], endings=endings,
            allowed=except_nodes(self.allowed(t.demand), len(self.ids), avoid))
        return None if found is None else Reservation(task_id=t.task_id, start=found[0], nodes=found[1],
                                                      firm=found[2])

    def place(self, d: Demand) -> tuple[int, ...] | None:
        """Nodes for the gang (least fragmentation growth, else fewest free GPUs first), or None."""
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node, d.gpu_types)
        if key in self._unplaced:
            return None
        if key in self._cache:
            return self._cache[key]
        g, c = d.n_gpus_per_node, d.cpus_per_node
        result: tuple[int, ...] | None = None
        if self._make_mix is None:  # best-fit: walk the index
            result = self._index(d).pick(d.nnodes, g, c)
        else:
            gpus, cpus = self.gpus, self.cpus
            fits = [i for i in self._candidates(d) if gpus[i] >= g and cpus[i] >= c]
            if len(fits) >= d.nnodes > 0:
                result = tuple(self._order(fits, d)[: d.nnodes])
        self._remember(key, result)
        return result

    def _remember(self, key: tuple[object, ...], placed: tuple[int, ...] | None) -> None:
        if placed is None:
            self._unplaced.add(key)
        else:
            self._cache[key] = placed

    def _index(self, d: Demand) -> FreeIndex:
        """The nodes of ``d``'s GPU models in best-fit order (fewest free GPUs, then CPUs,
        then id), the ``spared`` nodes after the others and, for a task of any model, the
        minor models' nodes after those (argus.scheduler.per_model); kept in order by ``take``."""
        index = self._indexes.get(d.gpu_types)
        if index is None:
            spared, minor = self.spared(), self._minor if not d.gpu_types else _NO_NODES
            index = self._indexes[d.gpu_types] = FreeIndex(
                self.gpus, self.cpus, self.ids, self.allowed(d), lambda i: 2 * (i in minor) + (i in spared))
        return index

    def _candidates(self, d: Demand) -> Sequence[int]:
        """The nodes to try for ``d``: those of its GPU models, in index order."""
        found = self._cands.get(d.gpu_types)
        if found is None:
            allowed = self.allowed(d)
            found = self._cands[d.gpu_types] = range(len(self.gpus)) if allowed is None else sorted(allowed)
        return found

    def take(self, picked: tuple[int, ...], d: Demand) -> None:
        gpus, cpus, indexes = self.gpus, self.cpus, self._indexes.values()
        for i in picked:
            before = (gpus[i], cpus[i])
            gpus[i] -= d.n_gpus_per_node
            cpus[i] -= d.cpus_per_node
            for index in indexes:
                index.moved(i, before, (gpus[i], cpus[i]))
        # Free resources only shrink within a pass: a shape that did not fit still does not,
        # so only the successful placements are forgotten.
        self._cache.clear()
        self._snapshot = None
        self._free_sums.clear()

    def explain(self, d: Demand, words: bool = True) -> Defer:
        """Why ``d`` does not fit: not even in total, or only not per node (on the nodes
        of its GPU models, when it names them). ``words`` False: the reason without a
        message (a quiet pass, whose messages nobody reads: they were a tenth of its time)."""
        free = self.free_gpus()
        mine = self._candidates(d)
        total = self._free_sums.get(d.gpu_types)  # (asked per shape that fails: the same sum for one models)
        if total is None:
            total = self._free_sums[d.gpu_types] = sum(map(free.__getitem__, mine))  # (C-level)
        if not words:
            reason = Reason.INSUFFICIENT_GPUS if total < d.total_gpus else Reason.NO_CAPACITY_PER_NODE
            return Defer(task_id="", reason=reason, free_gpus_per_node=free, message="")
        where = f"{len(free)} worker node(s)"
        if d.gpu_types:
            where = f"the {len(mine)} node(s) with {models_of(d)} (of {len(free)})"
        if total < d.total_gpus:  # however they lie across nodes: the total says why
            return Defer(task_id="", reason=Reason.INSUFFICIENT_GPUS, free_gpus_per_node=free, message=(
                f"{needs(d)} = {d.total_gpus} GPUs; only {fmt_amount(total)} GPUs free in total on {where}"))
        on = f" on {where}" if d.gpu_types else ""
        if self._make_mix is None:  # (the index has them in order: no scan of every node)
            ok = self._index(d).count(d.n_gpus_per_node, d.cpus_per_node)
        else:
            ok = sum(1 for i in mine if free[i] >= d.n_gpus_per_node and self.cpus[i] >= d.cpus_per_node)
        return Defer(task_id="", reason=Reason.NO_CAPACITY_PER_NODE, free_gpus_per_node=free, message=(
            f"{needs(d)}; fits in total{on} ({fmt_amount(total)} ≥ {d.total_gpus} GPUs free) but not per node: "
            f"only {ok} node(s) have ≥ {d.n_gpus_per_node} free GPUs and ≥ {fmt_amount(d.cpus_per_node)} "
            f"free CPUs; free GPUs per node: {_list(free)}; free CPUs per node: {_list(self.cpus)}"))


