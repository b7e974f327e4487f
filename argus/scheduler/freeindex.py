"""The nodes in best-fit order, kept in order as a pass takes resources: where a gang
fits is a walk from the first node with enough free GPUs, not a scan and a sort of every
node after each admission.

``Pool.place`` asked, for every shape after every admission, which of all the nodes fit
and sorted them: on the whole openb cluster (1,213 nodes) with 10,000 waiting tasks that
scan and sort were two thirds of a pass (docs/evaluation/2026-12-03-pass-scale.md). An
index answers the same question, with the same nodes in the same order: by tier (the
caller's ranking of nodes to use later, e.g. the only homes of a waiting shape), then
best-fit (fewest free GPUs, then CPUs, then node id).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Sequence

__all__ = ["FreeIndex"]

# (free GPUs, free CPUs, node id, index): sorts as best-fit does; ids are distinct, so the
# index never decides an order
_Entry = tuple[float, float, str, int]


class FreeIndex:
    """The ``members`` nodes (indices into ``gpus``, ``cpus``, ``ids``) sorted by
    ``tier_of`` (lowest first), then best-fit. ``moved`` keeps it in order when a node's
    free resources change; a node's tier does not change."""

    __slots__ = ("ids", "members", "tier_of", "tiers", "groups")

    def __init__(self, gpus: Sequence[float], cpus: Sequence[float], ids: Sequence[str],
                 members: Collection[int] | None, tier_of: Callable[[int], int] = lambda i: 0) -> None:
        self.ids = ids
        self.members = members  # None: every node
        self.tier_of = tier_of
        nodes = range(len(ids)) if members is None else members
        tiers: dict[int, list[_Entry]] = {}
        for i in nodes:
            tiers.setdefault(tier_of(i), []).append((gpus[i], cpus[i], ids[i], i))
        self.tiers = {tier: sorted(entries) for tier, entries in tiers.items()}
        self.groups: tuple[list[_Entry], ...] = tuple(self.tiers[tier] for tier in sorted(self.tiers))

    def pick(self, n: int, gpus: float, cpus: float, avoid: Collection[int] = ()) -> tuple[int, ...] | None:
        """The first ``n`` nodes in order with at least ``gpus`` and ``cpus`` free, not in
        ``avoid``; None when fewer than ``n`` (or ``n`` < 1) have them."""
        if n <= 0:
            return None
        out: list[int] = []
        for group in self.groups:
            # (gpus,) sorts before every entry with that many GPUs: the first that has enough
            for k in range(bisect_left(group, (gpus,)), len(group)):
                _, c, _, i = group[k]
                if c >= cpus and i not in avoid:
                    out.append(i)
                    if len(out) == n:
                        return tuple(out)
        return None

    def count(self, gpus: float, cpus: float) -> int:
        """How many of the nodes have at least ``gpus`` and ``cpus`` free."""
        return sum(1 for group in self.groups for k in range(bisect_left(group, (gpus,)), len(group))
                   if group[k][1] >= cpus)

    def moved(self, i: int, before: tuple[float, float], after: tuple[float, float]) -> None:
        """Node ``i``'s free (GPUs, CPUs) went from ``before`` to ``after``."""
        if self.members is not None and i not in self.members:
            return
        group = self.tiers[self.tier_of(i)]
        old = (before[0], before[1], self.ids[i], i)
        at = bisect_left(group, old)
        if at == len(group) or group[at] != old:  # (a caller's bug: the index would drift)
            raise ValueError(f"node {self.ids[i]} is not in the index at {before}")
        del group[at]
        insort(group, (after[0], after[1], self.ids[i], i))
