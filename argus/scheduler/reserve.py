"""Reservations for the first waiting task that does not fit (EASY backfilling, as Slurm's
backfill scheduler and Maui do it).

The first task in line that does not fit now gets a reservation: the earliest time its
gang fits, given when the running tasks are expected to end (their ``expected_end``:
``argus.scheduler.running_end``, from their progress, time limit or estimate), and on
which nodes. A task behind it may start now
only if it cannot delay that: it fits on nodes the reservation does not need, or it is
expected to end before the reservation starts. Estimates can be wrong: a reservation is
recomputed on every pass, and a gang is still admitted only when it fits per node.

Ray does not say which nodes a running job holds, so where a running task's nodes are not
known its end is assumed to free the nodes with the most GPUs in use that no task of known
placement accounts for; the gang check at admission stays exact.
"""

from __future__ import annotations

import heapq
import operator
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from operator import itemgetter

import msgspec

from argus.events.catalog import Demand
from argus.scheduler.model import RunningTask

__all__ = ["Ending", "Endings", "Reservation", "Step", "best_fit", "earliest_start", "expected_end", "fmt_clock"]


class Ending(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Resources a running (or just admitted) task gives back when it is expected to end;
    ``nodes``: indices into the pool's nodes, empty when not known."""

    at: float
    demand: Demand
    nodes: tuple[int, ...] = ()
    limited: bool = False  # ``at`` is an enforced time limit: it ends by then at the latest


class Reservation(msgspec.Struct, frozen=True, kw_only=True):
    """The head's gang on ``nodes`` (indices) from ``start``. ``firm``: every ending it
    waits for is an enforced time limit on known nodes, so it starts by ``start`` (plus the
    time a stop takes) at the latest, whatever the estimates: tasks behind it pass only if
    they cannot delay it (backfill), and ends come earlier, never later."""

    task_id: str
    start: float
    nodes: tuple[int, ...]
    firm: bool = False


def expected_end(end: float | None, started: float | None, now: float, default_s: float,
                 by_progress: bool = False) -> float:
    """When a running task is expected to end, at ``now``: ``end``
    (``argus.scheduler.running_end``: its progress, time limit or estimate);
    ``now + default_s`` when nothing is known. Past an end from its own progress
    (``by_progress``) it ends any moment: now. Past an estimate, it has shown the estimate
    was short: it is expected to run as long again as it has so far (run times are
    heavy-tailed: the longer a job has run, the longer it is likely to run on), not to end
    at once (the simulator saw ETAs of "now" for tasks that waited hours)."""
    if end is None:
        return now + default_s
    if end > now:
        return end
    if by_progress:
        return now
    ran = now - started if started is not None and started < now else 0.0
    return now + max(ran, 60.0)


def fmt_clock(t: float) -> str:
    """A time of day for messages (UTC, to the minute): reservations are estimates."""
    return time.strftime("%H:%M", time.gmtime(t)) + " UTC"


def best_fit(gpus: Sequence[float], cpus: Sequence[float], ids: Sequence[str], d: Demand,
             allowed: frozenset[int] | None = None) -> tuple[int, ...] | None:
    """Best-fit nodes (fewest free GPUs first), like the policy's placement; only among
    ``allowed`` (the nodes of ``d``'s GPU models) when given."""
    fits = [i for i in range(len(gpus)) if gpus[i] >= d.n_gpus_per_node and cpus[i] >= d.cpus_per_node
            and (allowed is None or i in allowed)]
    if len(fits) < d.nnodes or d.nnodes <= 0:
        return None
    fits.sort(key=lambda i: (gpus[i], cpus[i], ids[i]))
    return tuple(fits[: d.nnodes])


def _unexplained(e: Demand, gpus: Sequence[float], known: Sequence[float], total_gpus: Sequence[float],
                 ids: Sequence[str]) -> tuple[int, ...]:
    """Where an ending of unknown placement is taken to free ``e``: the nodes with the most
    GPUs in use that no task of known placement accounts for."""
    unexplained = [total_gpus[i] - gpus[i] - known[i] for i in range(len(gpus))]
    return tuple(sorted((i for i in range(len(gpus)) if unexplained[i] >= e.n_gpus_per_node),
                        key=lambda i: (-unexplained[i], ids[i]))[: e.nnodes])


def earliest_start(
    d: Demand, *, now: float, ids: Sequence[str], free_gpus: Sequence[float], free_cpus: Sequence[float],
    total_gpus: Sequence[float], total_cpus: Sequence[float], endings: "Endings | Sequence[Ending]",
    allowed: frozenset[int] | None = None,
) -> tuple[float, tuple[int, ...], bool] | None:
    """When and where ``d`` first fits as the ``endings`` give their resources back, in
    order of time (an ending already overdue counts as now; ties in the order given), and
    whether every ending waited for is an enforced limit on known nodes
    (``Reservation.firm``); None if it never fits. ``allowed``: the nodes of ``d``'s GPU
    models (None: all)."""
    if not isinstance(endings, Endings):
        endings = Endings(extra=endings)
    gpus, cpus = list(free_gpus), list(free_cpus)
    known: list[float] | None = None  # GPUs in use by endings whose nodes are known (asked only without)
    if endings.nodeless(ids):
        known = [0.0] * len(gpus)
        for freed, nodes in endings.placed(ids):
            for i in nodes:
                known[i] += freed.n_gpus_per_node
    g, c = d.n_gpus_per_node, d.cpus_per_node
    # How many nodes fit one member now; it only grows, as endings give resources back, so
    # best-fit is asked only once enough do (it was asked, over every node, per ending).
    fitting = sum(1 for i in range(len(gpus)) if gpus[i] >= g and cpus[i] >= c and (allowed is None or i in allowed))
    firm = True
    for at, _, e, nodes, limited in endings.in_order(now, ids):
        firm = firm and limited and bool(nodes)
        if known is not None:
            for i in nodes:
                known[i] -= e.n_gpus_per_node
            nodes = nodes or _unexplained(e, gpus, known, total_gpus, ids)
        for i in nodes:
            fitted = gpus[i] >= g and cpus[i] >= c
            gpus[i] = min(total_gpus[i], gpus[i] + e.n_gpus_per_node)
            cpus[i] = min(total_cpus[i], cpus[i] + e.cpus_per_node)
            if not fitted and gpus[i] >= g and cpus[i] >= c and (allowed is None or i in allowed):
                fitting += 1
        if fitting >= d.nnodes:
            picked = best_fit(gpus, cpus, ids, d, allowed)
            if picked is not None:
                return max(now, at), picked, firm
    return None


# An ending as a reservation walks them: (when, its place in the order the endings came in
# (ties in time are taken in that order), what it frees, on which nodes (indices), whether
# its time is an enforced limit).
Step = tuple[float, int, Demand, tuple[int, ...], bool]


class _Grouped:
    """The running tasks' endings grouped by how their time moves with the clock, so that
    a plan puts them in order without making each again (most running tasks are past their
    estimate, and their expected end moves with the clock: ``expected_end``):

    - ``due``: a time limit already passed (being stopped), or an end from progress
      (any moment): now, in their order;
    - ``fixed``: an expected end or limit ahead, by time;
    - ``unknown``: nothing known: now + the default run time, in their order;
    - ``overdue``: past their estimate: now + as long again as they have run (at least a
      minute): latest started first, in a fixed order.

    Made for one list of running entries and node ids; it holds until ``now`` reaches the
    first fixed end (that ending then becomes due or overdue)."""

    __slots__ = ("entries", "ids", "default_s", "since", "until", "due", "fixed", "unknown", "overdue",
                 "overdue_key", "nodeless")

    def __init__(self, running: Sequence[RunningTask], ids: tuple[str, ...], now: float, default_s: float) -> None:
        self.entries, self.ids, self.default_s, self.since = list(running), ids, default_s, now
        where = _where(ids)
        self.due: list[Step] = []
        self.fixed: list[Step] = []
        self.unknown: list[tuple[int, Demand, tuple[int, ...]]] = []
        overdue: list[tuple[float, int, Demand, tuple[int, ...]]] = []
        self.nodeless = False
        for k, r in enumerate(running):
            nodes = where.get(r.node_ids)
            if nodes is None:
                nodes = where[r.node_ids] = tuple(where.index[n] for n in r.node_ids if n in where.index)
            self.nodeless = self.nodeless or not nodes
            end = r.expected_end
            if end is None:
                self.unknown.append((k, r.demand, nodes))
            elif end > now:
                self.fixed.append((end, k, r.demand, nodes, r.limited))
            elif r.limited or r.by_progress:  # its time limit stops it; its steps are done
                self.due.append((now, k, r.demand, nodes, r.limited))
            else:  # run as long again: the latest started end first (None: counts as just started)
                started = r.started_at if r.started_at is not None else float("inf")
                overdue.append((-started, k, r.demand, nodes))
        self.fixed.sort()  # (ends, then places: never compares demands)
        overdue.sort()
        self.overdue = overdue
        self.overdue_key = [o[0] for o in overdue]
        self.until = min((f[0] for f in self.fixed), default=float("inf"))

    def holds(self, running: Sequence[RunningTask], ids: tuple[str, ...], now: float, default_s: float) -> bool:
        return (self.since <= now < self.until and ids == self.ids and default_s == self.default_s
                and len(running) == len(self.entries) and all(map(operator.is_, running, self.entries)))

    def streams(self, now: float) -> list[Iterator[Step]]:
        """The groups in order of time at ``now``, each as a stream of steps."""
        out: list[Iterator[Step]] = []
        if self.due:
            out.append(iter([(now, k, e, nodes, limited) for _, k, e, nodes, limited in self.due]))
        if self.fixed:
            out.append(iter(self.fixed))
        if self.unknown:
            at = now + self.default_s
            out.append(iter([(at, k, e, nodes, False) for k, e, nodes in self.unknown]))
        if self.overdue:
            out.append(self._overdue(now))
        return out

    def _overdue(self, now: float) -> Iterator[Step]:
        # Those that ran at most a minute all end a minute from now: in their order.
        floor = bisect_right(self.overdue_key, 60.0 - now)
        for _, k, e, nodes in sorted(self.overdue[:floor], key=itemgetter(1)):
            yield now + 60.0, k, e, nodes, False
        for minus_started, k, e, nodes in self.overdue[floor:]:
            yield now + (now + minus_started), k, e, nodes, False


class _Where(dict[tuple[str, ...], tuple[int, ...]]):
    """Node ids -> their indices among ``ids`` (tasks share nodes, and plans share ids)."""

    def __init__(self, ids: tuple[str, ...]) -> None:
        super().__init__()
        self.ids = ids
        self.index = {nid: i for i, nid in enumerate(ids)}


def _where(ids: tuple[str, ...]) -> _Where:
    last = _GROUPING.where
    if last is None or last.ids != ids or len(last) > 4096:
        last = _GROUPING.where = _Where(ids)
    return last


class _Grouping(threading.local):
    """The last grouping made, reused while it holds: a reactor or a simulation plans again
    and again over the same running entries (``argus.scheduler.inputs.QueueMemo`` hands out
    the same ones). One per thread (ETAs run in threads)."""

    last: _Grouped | None = None
    where: _Where | None = None


_GROUPING = _Grouping()


class Endings:
    """Every ending a pass may wait for: the running tasks' (``running``, grouped when first
    asked), then ``extra`` ones (gangs the ledger releases now, tasks admitted in the pass),
    which come after them in ties."""

    def __init__(self, running: Sequence[RunningTask] = (), now: float = 0.0, default_s: float = 0.0,
                 extra: Sequence[Ending] = ()) -> None:
        self.running, self.now, self.default_s = running, now, default_s
        self.extra: list[Ending] = list(extra)

    def add(self, ending: Ending) -> None:
        self.extra.append(ending)

    def _grouped(self, ids: Sequence[str]) -> _Grouped:
        key = tuple(ids)
        last = _GROUPING.last
        if last is None or not last.holds(self.running, key, self.now, self.default_s):
            last = _GROUPING.last = _Grouped(self.running, key, self.now, self.default_s)
        return last

    def in_order(self, now: float, ids: Sequence[str]) -> Iterator[Step]:
        """Every ending in order of time at ``now`` (an overdue one counting as now)."""
        base = len(self.running)
        extra = sorted((e.at, base + k, e.demand, e.nodes, e.limited) for k, e in enumerate(self.extra))
        streams = self._grouped(ids).streams(now) if self.running else []
        if extra:
            streams.append(iter(extra))
        return streams[0] if len(streams) == 1 else heapq.merge(*streams)

    def nodeless(self, ids: Sequence[str]) -> bool:
        """Some ending's nodes are not known (``_unexplained`` then guesses them)."""
        return any(not e.nodes for e in self.extra) or (bool(self.running) and self._grouped(ids).nodeless)

    def placed(self, ids: Sequence[str]) -> Iterator[tuple[Demand, tuple[int, ...]]]:
        """What every ending frees, and where (in no particular order)."""
        if self.running:
            g = self._grouped(ids)
            for _, _, e, nodes, _ in g.due + g.fixed:
                yield e, nodes
            for _, e, nodes in g.unknown:
                yield e, nodes
            for _, _, e, nodes in g.overdue:
                yield e, nodes
        for x in self.extra:
            yield x.demand, x.nodes


