"""A reservation per GPU model, beside the head's (``v2.scheduler.reserve_per_model``).

EASY backfilling gives one reservation, to the first task that does not fit. On a cluster
of mixed GPU models a task that needs a scarce model is seldom that task: tasks that
accept any model kept landing on the scarce model's nodes as they freed up, and on an openb
variant (a third of the tasks naming a model) a task waited 110 days under
``reserve-backfill`` (docs/evaluation/2026-12-03-gpu-models-and-churn.md). So the first
waiting task that names a set of models and does not fit gets a reservation of its own, on
nodes no other reservation holds; a task behind it passes only if it cannot delay any of
them (``backfill``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

from argus.scheduler.model import PolicyConfig, QueuedTask
from argus.scheduler.reserve import Reservation, fmt_clock

__all__ = ["ModelHolds", "backfill", "scarce_nodes"]


@functools.lru_cache(maxsize=64)
def scarce_nodes(types: tuple[str, ...]) -> frozenset[int]:
    """The nodes (indices) of the GPU models few nodes have: fewer than an even split of
    the nodes between the models would give each (on a cluster of two models or more).
    A task that accepts any model is placed on them last. Best-fit put the trace's first
    tasks, 1 GPU for up to 145 days each, on the small nodes of the minor models while the
    cluster was nearly idle, and those models' tasks then waited for them for months
    (docs/evaluation/2026-12-03-gpu-models-and-churn.md)."""
    counts = Counter(t.casefold() for t in types if t)
    if len(counts) < 2:
        return frozenset()
    even = len(types) / (len(counts) + (1 if "" in types else 0))
    return frozenset(i for i, t in enumerate(types) if t and counts[t.casefold()] < even)


class ModelHolds:
    """The pass's reservations: the head's (``main``, set by the pass) and one per set of
    GPU models for the first task naming it that does not fit."""

    __slots__ = ("by_models", "extra", "_avoid", "_models")

    def __init__(self) -> None:
        self.by_models: set[tuple[str, ...]] = set()  # model sets that hold a reservation (the head's included)
        self.extra: list[Reservation] = []
        self._avoid: frozenset[int] = frozenset()
        self._models: dict[str, tuple[str, ...]] = {}  # task id of each extra reservation -> its models

    def wants(self, t: QueuedTask) -> bool:
        """Whether ``t`` (which does not fit) is the first of its models without one."""
        return bool(t.demand.gpu_types) and t.demand.gpu_types not in self.by_models

    def covered(self, t: QueuedTask) -> None:
        """``t`` holds the head's reservation: its models have one."""
        if t.demand.gpu_types:
            self.by_models.add(t.demand.gpu_types)

    def add(self, t: QueuedTask, found: Reservation | None) -> None:
        """``t``'s models asked once in this pass; ``found`` is its reservation, if any."""
        self.by_models.add(t.demand.gpu_types)
        if found is not None:
            self.extra.append(found)
            self._models[found.task_id] = t.demand.gpu_types
            self._avoid = self._avoid | frozenset(found.nodes)

    def avoid(self, main: Reservation | None) -> frozenset[int]:
        """The nodes every reservation so far holds (a new one keeps off them)."""
        return self._avoid | frozenset(main.nodes) if main is not None else self._avoid

    def all(self, main: Reservation | None, t: QueuedTask) -> list[Reservation]:
        """The reservations ``t`` must not delay, the head's first: not a model's own, for a
        task of the same models. Those keep other work off a model's nodes; a task of the
        model may still use them (on the trace a 2 x 8 gang of a model with 2 nodes, one of
        them held by a task of 114 days, otherwise idled the other node for as long)."""
        mine = t.demand.gpu_types
        extra = [r for r in self.extra if self._models[r.task_id] != mine] if mine else self.extra
        return ([main] if main is not None else []) + extra


def backfill(t: QueuedTask, picked: tuple[int, ...], held: Sequence[Reservation], now: float,
             config: PolicyConfig, elsewhere: tuple[int, ...] | None
             ) -> tuple[tuple[int, ...] | None, str, Reservation]:
    """May ``t``, which fits now on ``picked`` (or on ``elsewhere``, off every reserved
    node), start without delaying any reservation in ``held``? Off their nodes, yes; on
    them, only if its enforced time limit ends it before each it would run on starts.
    Returns its nodes (None: it waits), why, and the reservation that holds it back."""
    blocking = next((r for r in held if not set(r.nodes).isdisjoint(picked)), held[0])
    if elsewhere is not None:
        return elsewhere, f"backfilled on nodes the reservation of {blocking.task_id} does not need", blocking
    estimate = t.estimate_s or config.default_runtime_s
    on = [r for r in held if not set(r.nodes).isdisjoint(picked)] or [blocking]
    first = min(on, key=lambda r: r.start)
    if t.limited and now + estimate <= first.start:
        return picked, (f"backfilled: its time limit ends it by ~{fmt_clock(now + estimate)}, before the "
                        f"reservation of {first.task_id} from ~{fmt_clock(first.start)}"), first
    return None, "", first
