"""Guards against preemption churn: which value of each applies to whom.

Three guards (docs/scheduling.md, "Guards against churn"): a running task may be stopped to
make room only once it has run ``preempt_min_run_s``; a waiting task stops or moves no one
before it has waited ``evict_after_s``; a task is stopped at most ``max_preemptions``
times. Each has a global value (``v2.scheduler.*``) and a per-user override
(``v2.scheduler.user_guards``). ``overridden`` is the one place that picks a user's value:
a team's (issue 56) goes there, between the user's and the global one.
"""

from __future__ import annotations

from collections.abc import Mapping

from argus.config import ChurnGuard

__all__ = ["evicts_from", "max_preemptions_by_user", "min_run_by_user", "overridden"]

_FIELDS = ("preempt_min_run_s", "evict_after_s", "max_preemptions")


def overridden(overrides: Mapping[str, ChurnGuard], field: str) -> dict[str, float]:
    """The users whose value of ``field`` (a ``ChurnGuard`` field) is not the global one,
    and theirs."""
    if field not in _FIELDS:
        raise ValueError(f"no churn guard {field!r}; one of {', '.join(_FIELDS)}")
    return {u: v for u, g in overrides.items() if (v := getattr(g, field)) is not None}


def min_run_by_user(overrides: Mapping[str, ChurnGuard]) -> dict[str, float]:
    """The users whose minimum run before a stop is not ``preempt_min_run_s``, and theirs."""
    return overridden(overrides, "preempt_min_run_s")


def max_preemptions_by_user(overrides: Mapping[str, ChurnGuard]) -> dict[str, int]:
    """The users whose cap on stops is not ``max_preemptions``, and theirs."""
    return {u: int(v) for u, v in overridden(overrides, "max_preemptions").items()}


def evicts_from(user: str, waiting_since: float | None, now: float, evict_after_s: float,
                overrides: Mapping[str, ChurnGuard]) -> float | None:
    """When a task of ``user`` waiting since ``waiting_since`` may first stop or move
    running tasks, while that is after ``now``; None: it may now."""
    delay = overridden(overrides, "evict_after_s").get(user, evict_after_s) if overrides else evict_after_s
    if delay <= 0 or waiting_since is None or now >= waiting_since + delay:
        return None
    return waiting_since + delay
