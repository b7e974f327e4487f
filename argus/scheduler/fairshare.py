"""Fair share: users are served in order of their recent GPU use per share (Slurm's
fair-share factor), guaranteed quotas first.

A user's *usage* is their GPU-seconds, each decayed by half every ``half_life_s`` (so last
week counts half as much as today with the default half-life of 7 days), as the log says
(``projections.usage``). Each user has a *share* (1 unless configured); the fair-share
order serves first the user whose usage per share is lowest. Within a pass, the work a
user already runs and the tasks the order hands them count too, by their expected
remaining run time: ``key = (usage + Σ GPUs × expected seconds) / share``. So two users
with equal shares and no history alternate, and a user who ran 8 GPUs all week waits
behind one who ran none.

An optional *quota* (GPUs) is a guarantee: a task that keeps its user within their quota
comes before every task that would borrow beyond one. Borrowing is allowed whenever GPUs
are idle; borrowed GPUs are what preemption reclaims first (``argus.scheduler.preempt``).
With preemption, a task that keeps its user within their *fair share* (the cluster's GPUs
divided among the users with work, by share) comes next, before the rest: the order must
not hand out a GPU that the next pass would stop again for a user within theirs.

The order is computed per pass (it depends on usage and on what runs): each user's own
line (priority, then arrival) gets its keys from running sums, and a sort by those keys
merges the lines: O(n log n), about 3 ms for 10,000 waiting tasks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import NamedTuple

import msgspec

from argus.scheduler.model import PolicyConfig, QueuedTask, RunningTask
from argus.scheduler.order import queue_order

__all__ = ["FairPass", "FairShares", "fair_order", "fair_pass", "fair_shares", "share_of"]

_USER = attrgetter("user")


class FairShares(msgspec.Struct, kw_only=True):
    """Each user's entitlement in a pass: GPUs held now, quota, and fair share of GPUs."""

    held: dict[str, float]  # GPUs of running tasks not being stopped (and this pass's grants)
    quota: dict[str, float]
    fair: dict[str, float]  # total GPUs × share / Σ shares of users with work

    def grant(self, user: str, gpus: float) -> None:
        """``user`` holds ``gpus`` more (fewer, when negative) from now in this pass."""
        self.held[user] = self.held.get(user, 0.0) + gpus

    def under_quota(self, user: str, gpus: float) -> bool:
        """Would ``gpus`` more keep ``user`` within a configured quota?"""
        return self.held.get(user, 0.0) + gpus <= self.quota.get(user, 0.0)

    def over_quota(self, user: str) -> bool:
        return self.held.get(user, 0.0) > self.quota.get(user, 0.0)

    def within_fair(self, user: str, gpus: float) -> bool:
        """Would ``gpus`` more keep ``user`` within their fair share of the cluster?"""
        return self.held.get(user, 0.0) + gpus <= self.fair.get(user, 0.0) + 1e-9

    def over_fair(self, user: str) -> bool:
        return self.held.get(user, 0.0) > self.fair.get(user, 0.0) + 1e-9


def share_of(user: str, shares: Mapping[str, float]) -> float:
    return max(1e-9, float(shares.get(user, 1.0)))


def held_gpus(running: Sequence[RunningTask]) -> dict[str, float]:
    """GPUs each user holds in running tasks that are not being stopped."""
    held: dict[str, float] = {}
    for r in running:  # (called every plan over every running task: ``total_gpus`` inlined)
        if not r.stopping:
            d = r.demand
            held[r.user] = held.get(r.user, 0.0) + d.nnodes * d.n_gpus_per_node
    return held


def fair_shares(queue: Sequence[QueuedTask], running: Sequence[RunningTask], total_gpus: float, shares: Mapping[str, float],
                quotas: Mapping[str, float]) -> FairShares:
    """Who holds what, and each active user's fair share of ``total_gpus``."""
    held = held_gpus(running)
    active = set(map(_USER, queue)) | set(map(_USER, running))
    weight = sum(share_of(u, shares) for u in active) or 1.0
    fair = {u: total_gpus * share_of(u, shares) / weight for u in active}
    return FairShares(held=held, quota={u: float(q) for u, q in quotas.items()}, fair=fair)


class FairPass(NamedTuple):
    """One pass's fair-share order and the shares it was made with (``FairShares``: the
    ``fairshare`` policy then grants and preempts against them)."""

    order: list[QueuedTask]
    shares: FairShares


def fair_pass(queue: Sequence[QueuedTask], running: Sequence[RunningTask], now: float, config: PolicyConfig,
              total_gpus: float | None, *, in_line_order: bool = False) -> FairPass:
    """The one fair-share order: what the ``fairshare`` policy passes in, the queue users
    are shown (``argus.views.queue``), the ETAs and a dry run's place (``argus.views.eta``),
    and each user's standing (``argus.views.standing``, ``GET /shares``) are all made by it.
    ``config``: the policy's settings (usage, shares, quotas, preemption, max wait);
    ``total_gpus``: the cluster's GPUs, None while its size is unknown (then no fair share
    of it orders the line). ``in_line_order``: ``queue`` is already in
    ``queue_order("fairshare")``."""
    shares = fair_shares(queue, running, total_gpus or 0.0, config.shares, config.quotas)
    known = shares if total_gpus is not None else None
    order = fair_order(queue, running, now, usage=config.usage, shares=config.shares, quotas=config.quotas,
                       default_runtime_s=config.default_runtime_s, max_wait_s=config.max_wait_s,
                       fair=known.fair if config.preemption and known is not None else None,
                       in_line_order=in_line_order, held=dict(known.held) if known is not None else None)
    return FairPass(order=order, shares=shares)


def fair_order(queue: Sequence[QueuedTask], running: Sequence[RunningTask], now: float, *,
               usage: Mapping[str, float], shares: Mapping[str, float], quotas: Mapping[str, float],
               default_runtime_s: float, fair: Mapping[str, float] | None = None,
               in_line_order: bool = False, max_wait_s: float = 0.0,
               held: Mapping[str, float] | None = None) -> list[QueuedTask]:
    """``queue`` in fair-share order (tasks still in a retry's backoff last, as they are
    deferred anyway and must not count as handed out). ``fair``: each user's fair share
    in GPUs (``fair_shares``), given with preemption: work within it comes before the rest.
    ``in_line_order``: ``queue`` is already sorted as ``queue_order("fairshare")`` (the
    policy gets it so from ``decide``): not sorted again. ``max_wait_s`` > 0: tasks that
    have waited that long go right after the rooms being made, oldest first (an age term:
    the first of them that does not fit gets the reservation). ``held``: ``held_gpus(running)``,
    when the caller has it."""
    committed = _committed(usage, running, now, default_runtime_s)
    later: list[QueuedTask] = []
    ready: list[QueuedTask] = []
    for t in queue:
        (later if t.next_run_at is not None and t.next_run_at > now else ready).append(t)
    if not in_line_order:
        ready = queue_order("fairshare", ready)  # each user's own line: priority, then arrival
    keys, (first, within, fair_part, borrowing) = _grouped(
        ready, committed, held_gpus(running) if held is None else held, shares=shares, quotas=quotas, fair=fair,
        default_runtime_s=default_runtime_s)
    out: list[QueuedTask] = []
    for group in (first, within, fair_part, borrowing):
        group.sort()
        group.sort(key=keys.__getitem__)
    # Rooms go out in the order they were made (usage breaks ties): one made for a task
    # given to a later one would leave the first waiting beyond its grace period.
    first.sort(key=lambda i: ready[i].preempting_since)  # type: ignore[arg-type,return-value]
    aged = _aged(ready, now - max_wait_s) if max_wait_s > 0 else []
    if aged:
        old = set(aged)
        within, fair_part, borrowing = ([i for i in g if i not in old] for g in (within, fair_part, borrowing))
    for group in (first, aged, within, fair_part, borrowing):
        out.extend(map(ready.__getitem__, group))
    return out + later


def _aged(ready: Sequence[QueuedTask], cutoff: float) -> list[int]:
    """Positions in ``ready`` of the tasks waiting since ``cutoff`` or earlier (no room is
    being made for them: those go first anyway), oldest first."""
    old = [i for i, t in enumerate(ready)
           if t.preempting_since is None and t.waiting_since is not None and t.waiting_since <= cutoff]
    return sorted(old, key=lambda i: (ready[i].waiting_since, i))


def _committed(usage: Mapping[str, float], running: Sequence[RunningTask], now: float,
               default_runtime_s: float) -> dict[str, float]:
    """Each user's usage plus the GPU-seconds their running tasks (not being stopped) are
    still expected to take."""
    committed: dict[str, float] = dict(usage)
    for r in running:
        if r.stopping:
            continue
        # ``expected_end`` inlined, with the same arithmetic (this runs every plan over
        # every running task, and the call was a sixth of a fair-share simulation)
        end = r.expected_end
        if end is None:
            end = now + default_runtime_s
        elif end <= now and r.by_progress:
            end = now  # past an end from its own progress: any moment
        elif end <= now:
            s = r.started_at
            ran = now - s if s is not None and s < now else 0.0
            end = now + (ran if ran >= 60.0 else 60.0)  # max(ran, 60.0), without a call
        d, left = r.demand, end - now
        committed[r.user] = committed.get(r.user, 0.0) + d.nnodes * d.n_gpus_per_node * (left if left > 0.0 else 0.0)
    return committed


def _grouped(ready: list[QueuedTask], committed: Mapping[str, float], held: Mapping[str, float], *,
             shares: Mapping[str, float], quotas: Mapping[str, float], fair: Mapping[str, float] | None,
             default_runtime_s: float) -> tuple[list[float], tuple[list[int], list[int], list[int], list[int]]]:
    """Each task's sort key (by its position in ``ready``), and the positions in the four
    groups that go in turn: tasks others were stopped for, then within quota, then (with
    ``fair``) within fair share, then the rest."""
    lines: defaultdict[str, list[int]] = defaultdict(list)  # positions in ready, by user
    for i, t in enumerate(ready):
        lines[t.user].append(i)
    # Each task's key is its user's usage per share once the tasks ahead of it in its
    # user's line are counted (keys only grow along a line, so the merge keeps each line's
    # order). Tasks others were stopped for go first, to the rooms made for them; then tasks
    # within their user's quota; then (with preemption) within their fair share; then the
    # rest. Each group is sorted by its float keys alone: a stable sort of positions already
    # in line order breaks ties by priority, then arrival, with no tuple built or compared
    # per task.
    keys = [0.0] * len(ready)
    first: list[int] = []
    within: list[int] = []
    fair_part: list[int] = []
    borrowing: list[int] = []
    for user, line in lines.items():
        share, quota = share_of(user, shares), quotas.get(user, 0.0)
        fair_gpus = fair.get(user, 0.0) + 1e-9 if fair is not None else -1.0
        used, holds = committed.get(user, 0.0), held.get(user, 0.0)
        for i in line:
            t = ready[i]
            d = t.demand
            gpus = d.nnodes * d.n_gpus_per_node
            holds += gpus
            keys[i] = used / share
            if t.preempting_since is not None:
                first.append(i)
            elif holds <= quota:
                within.append(i)
            elif holds <= fair_gpus:
                fair_part.append(i)
            else:
                borrowing.append(i)
            used += gpus * (t.estimate_s or default_runtime_s)
    return keys, (first, within, fair_part, borrowing)
