"""Reservations for the first waiting task that does not fit (EASY backfilling, as Slurm's
backfill scheduler and Maui do it).

The first task in line that does not fit now gets a reservation: the earliest time its
gang fits, given when the running tasks are expected to end (their ``expected_end``:
start plus time limit or estimate), and on which nodes. A task behind it may start now
only if it cannot delay that: it fits on nodes the reservation does not need, or it is
expected to end before the reservation starts. Estimates can be wrong: a reservation is
recomputed on every pass, and a gang is still admitted only when it fits per node.

Ray does not say which nodes a running job holds, so where a running task's nodes are not
known its end is assumed to free the nodes with the most GPUs in use that no task of known
placement accounts for; the gang check at admission stays exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import msgspec

from argus.events.catalog import Demand
from argus.scheduler.model import RunningTask

__all__ = ["Ending", "Reservation", "best_fit", "earliest_start", "expected_end", "fmt_clock", "running_endings"]


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


def expected_end(end: float | None, started: float | None, now: float, default_s: float) -> float:
    """When a running task is expected to end: its start plus its time limit or estimate;
    ``now + default_s`` when nothing is known. A task already past that has shown its
    estimate was short: it is expected to run as long again as it has so far (run times
    are heavy-tailed: the longer a job has run, the longer it is likely to run on), not
    to end at once (the simulator saw ETAs of "now" for tasks that waited hours)."""
    if end is None:
        return now + default_s
    if end > now:
        return end
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
    total_gpus: Sequence[float], total_cpus: Sequence[float], endings: Sequence[Ending],
    allowed: frozenset[int] | None = None,
) -> tuple[float, tuple[int, ...], bool] | None:
    """When and where ``d`` first fits as the ``endings`` give their resources back, in
    order of time (an ending already overdue counts as now), and whether every ending
    waited for is an enforced limit on known nodes (``Reservation.firm``); None if it never
    fits. ``allowed``: the nodes of ``d``'s GPU models (None: all)."""
    gpus, cpus = list(free_gpus), list(free_cpus)
    known = [0.0] * len(gpus)  # GPUs in use by endings whose nodes are known
    for ending in endings:
        for i in ending.nodes:
            known[i] += ending.demand.n_gpus_per_node
    g, c = d.n_gpus_per_node, d.cpus_per_node
    # How many nodes fit one member now; it only grows, as endings give resources back, so
    # best-fit is asked only once enough do (it was asked, over every node, per ending).
    fitting = sum(1 for i in range(len(gpus)) if gpus[i] >= g and cpus[i] >= c and (allowed is None or i in allowed))
    firm = True
    for ending in sorted(endings, key=lambda e: e.at):
        firm = firm and ending.limited and bool(ending.nodes)
        e = ending.demand
        for i in ending.nodes:
            known[i] -= e.n_gpus_per_node
        nodes = ending.nodes or _unexplained(e, gpus, known, total_gpus, ids)
        for i in nodes:
            fitted = gpus[i] >= g and cpus[i] >= c
            gpus[i] = min(total_gpus[i], gpus[i] + e.n_gpus_per_node)
            cpus[i] = min(total_cpus[i], cpus[i] + e.cpus_per_node)
            if not fitted and gpus[i] >= g and cpus[i] >= c and (allowed is None or i in allowed):
                fitting += 1
        if fitting >= d.nnodes:
            picked = best_fit(gpus, cpus, ids, d, allowed)
            if picked is not None:
                return max(now, ending.at), picked, firm
    return None


class _EndingMemo(threading.local):
    """Each running entry's ``Ending`` while its expected end is ahead (then it does not
    depend on the time), by entry: the reactor's and the simulator's inputs hand out the
    same entries from plan to plan (``argus.scheduler.inputs.QueueMemo``), so a pass over
    hundreds of running tasks looks most of them up. One per thread (ETAs run in threads)."""

    def __init__(self) -> None:
        self.ids: tuple[str, ...] = ()
        self.made: dict[int, tuple[RunningTask, Ending]] = {}


_ENDING_MEMO = _EndingMemo()


def running_endings(running: Sequence[RunningTask], ids: Sequence[str], now: float, default_s: float) -> list[Ending]:
    """When each running task is expected to give back what it holds, and on which nodes."""
    memo = _ENDING_MEMO
    if memo.ids != tuple(ids) or len(memo.made) > 2 * len(running) + 1024:
        memo.ids, memo.made = tuple(ids), {}
    made = memo.made
    index = {nid: i for i, nid in enumerate(ids)}
    where: dict[tuple[str, ...], tuple[int, ...]] = {}  # node ids -> indices (tasks share nodes)
    out = []
    for r in running:
        hit = made.get(id(r))
        if hit is not None and hit[0] is r and hit[1].at > now:
            out.append(hit[1])
            continue
        nodes = where.get(r.node_ids)
        if nodes is None:
            nodes = where[r.node_ids] = tuple(index[n] for n in r.node_ids if n in index)
        end = r.expected_end
        if r.limited and end is not None:
            at = max(end, now)  # its time limit stops it (past it: being stopped)
        else:
            at = end if end is not None and end > now else expected_end(end, r.started_at, now, default_s)
        ending = Ending(at=at, demand=r.demand, nodes=nodes, limited=r.limited and end is not None)
        if end is not None and end > now:
            made[id(r)] = (r, ending)
        out.append(ending)
    return out
