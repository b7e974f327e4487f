"""What a policy did to a workload, in the numbers the scheduling literature uses."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from argus.sim.engine import SimResult

__all__ = ["PolicyMetrics", "big_shapes", "measure"]

# Bounded slowdown's floor on run time (seconds): a 1-second task that waited a minute is not
# a 60x slowdown worth averaging (Feitelson's bounded slowdown, tau = 10 s).
SLOWDOWN_FLOOR_S = 10.0


class PolicyMetrics(msgspec.Struct, frozen=True, kw_only=True):
    policy: str
    tasks: int
    never_admitted: int
    gpu_utilization: float  # GPU-seconds used / (GPUs x busy period)
    # GPU-seconds used / offered while some task was waiting: the busy period above is set by
    # the longest tasks and is the same under every policy on a trace where all finish
    contended_utilization: float = 0.0
    # The same until the last task arrived. After it the cluster drains, and a few tasks
    # that fit only on one busy node (8 GPUs with 120 CPUs, on the trace's one 128-CPU
    # node) can leave most GPUs idle for a day while they wait: the figure above then
    # says more about that tail than about the policy.
    contended_utilization_arriving: float = 0.0
    makespan_s: float  # first arrival to last end
    wait_p50_s: float
    wait_p90_s: float
    wait_p99_s: float
    wait_max_s: float
    # The tasks of the largest shapes present (whole-gang GPUs): see big_shapes.
    big_gang_wait_p99_s: float
    big_gang_wait_max_s: float
    big_gang_gpus: tuple[int, ...] = ()  # the shapes (GPUs per gang) counted as big
    big_gang_tasks: int = 0
    bounded_slowdown_avg: float
    jain_fairness: float  # over users' GPU-hours: 1 = equal shares
    # over users' mean bounded slowdown: 1 = every user is slowed down alike (GPU-hours are
    # the same under every policy once every task has run; who waited is not)
    jain_slowdown: float = 1.0
    # over users' slowdown of their work as a whole, sum(wait + run) / sum(run): what each
    # user's work took against what it ran. The mean above is set by a few tasks of seconds
    # that waited hours (one such task of 10 s that waited a day is a slowdown of 8,640);
    # here a task counts by its run time. 1 = every user's work slowed alike.
    jain_user_slowdown: float = 1.0
    worst_user_slowdown: float = 1.0  # the most slowed user's sum(wait + run) / sum(run)
    worst_user_mean_wait_s: float = 0.0  # the most starved user's mean wait
    decisions: int
    preemptions: int = 0  # stops to make room
    # GPU-hours of work those stops threw away (run again from the last checkpoint: 0 when
    # every stop saves, the simulator's default; argus sim --checkpoint-every)
    lost_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0  # the tasks' own work, each counted once
    eta_samples: int = 0  # waiting tasks given an ETA at arrival (argus sim --eta N)
    eta_abs_error_p50_s: float | None = None
    eta_abs_error_p90_s: float | None = None
    eta_unknown: int = 0  # sampled waiting tasks that got no estimate
    eta_rel_error_p50: float | None = None  # |ETA - start| / actual wait (waits under a minute count as one)
    eta_coarse_samples: int = 0  # of eta_samples, those past the forward run's horizon (the coarse estimate)
    eta_coarse_rel_error_p50: float | None = None
    # The 80 % intervals (argus.scheduler.eta_calibration): of the sampled tasks that got
    # one, the share whose real start fell inside (target 0.75-0.85), the median width and
    # the median width over the real wait (waits under a minute count as one).
    eta_range_samples: int = 0
    eta_range_coverage: float | None = None
    eta_range_width_p50_s: float | None = None
    eta_range_width_rel_p50: float | None = None
    # "At the latest" bounds (reservations waiting only for enforced time limits): given to
    # tasks that then started, and how many of them started later than said (target 0).
    at_latest_given: int = 0
    at_latest_broken: int = 0


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def _jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    return (sum(values) ** 2 / (len(values) * sum(x * x for x in values))) if values and any(values) else 1.0


def big_shapes(gpus: list[int], share: float = 0.1) -> frozenset[int]:
    """The gang sizes counted as big: the largest sizes present, largest first, until they
    hold ``share`` of the tasks, never the most common size (a trace of mostly 1-GPU tasks
    would make "big" mean everything). Before, big was "at or above the 90th percentile of
    GPUs", which on openb is 1 GPU: the p99 of all tasks."""
    counts: dict[int, int] = {}
    for g in gpus:
        counts[g] = counts.get(g, 0) + 1
    if len(counts) < 2:
        return frozenset()
    common = max(counts, key=lambda g: (counts[g], -g))
    chosen: set[int] = set()
    held = 0
    for size in sorted((g for g in counts if g > common), reverse=True):
        chosen.add(size)
        held += counts[size]
        if held >= share * len(gpus):
            break
    return frozenset(chosen)


def measure(result: SimResult) -> PolicyMetrics:
    done = [(o, o.start) for o in result.outcomes if o.start is not None]  # admitted, with start
    waits = [start - o.arrival for o, start in done]
    first = min((o.arrival for o in result.outcomes), default=0.0)
    last = max((o.end or o.start or o.arrival for o in result.outcomes), default=0.0)
    busy = max(last - first, 1e-9)
    # ETA errors as a share of the actual wait (waits under a minute count as one)
    relative = [e / max(w, 60.0) for e, w in zip(result.eta_errors, result.eta_waits)]
    coarse = [r for r, past in zip(relative, result.eta_coarse) if past]
    # A preempted task's span holds its time back in line: it used only its run time.
    used = sum(o.gpus * min(o.runtime, (o.end if o.end is not None else last) - start) for o, start in done)
    shapes = big_shapes([o.gpus for o in result.outcomes])
    big = [start - o.arrival for o, start in done if o.gpus in shapes]
    slowdowns = [max(1.0, (start - o.arrival + o.runtime) / max(o.runtime, SLOWDOWN_FLOOR_S)) for o, start in done]
    hours: dict[str, float] = {}
    for o, _ in done:
        hours[o.user] = hours.get(o.user, 0.0) + o.gpus * o.runtime / 3600
    jain = _jain(list(hours.values()))
    per_user: dict[str, list[float]] = {}
    for (o, _), slowdown in zip(done, slowdowns):
        per_user.setdefault(o.user, []).append(slowdown)
    jain_slowdown = _jain([sum(v) / len(v) for v in per_user.values()])
    spans: dict[str, list[float]] = {}  # user -> [sum of waits, sum of run times, tasks]
    for o, start in done:
        span = spans.setdefault(o.user, [0.0, 0.0, 0.0])
        span[0] += start - o.arrival
        span[1] += o.runtime
        span[2] += 1
    user_slowdowns = [(waited + ran) / ran for waited, ran, _ in spans.values() if ran > 0]
    return PolicyMetrics(
        policy=result.policy, tasks=len(result.outcomes), never_admitted=len(result.outcomes) - len(done),
        gpu_utilization=used / (result.capacity_gpus * busy) if result.capacity_gpus else 0.0,
        contended_utilization=(result.contended_used_gpu_s / result.contended_capacity_gpu_s
                               if result.contended_capacity_gpu_s else 0.0),
        contended_utilization_arriving=(result.arriving_used_gpu_s / result.arriving_capacity_gpu_s
                                        if result.arriving_capacity_gpu_s else 0.0),
        makespan_s=last - first, wait_p50_s=_pct(waits, 0.5), wait_p90_s=_pct(waits, 0.9),
        wait_p99_s=_pct(waits, 0.99), wait_max_s=max(waits, default=0.0),
        big_gang_wait_p99_s=_pct(big, 0.99), big_gang_wait_max_s=max(big, default=0.0),
        big_gang_gpus=tuple(sorted(shapes, reverse=True)),
        big_gang_tasks=sum(1 for o in result.outcomes if o.gpus in shapes),
        bounded_slowdown_avg=sum(slowdowns) / len(slowdowns) if slowdowns else 0.0,
        jain_fairness=jain, jain_slowdown=jain_slowdown, jain_user_slowdown=_jain(user_slowdowns),
        worst_user_slowdown=max(user_slowdowns, default=1.0),
        worst_user_mean_wait_s=max((waited / n for waited, _, n in spans.values()), default=0.0), decisions=result.decisions, preemptions=sum(o.preempted for o in result.outcomes),
        lost_gpu_hours=sum(o.gpus * o.lost_s for o in result.outcomes) / 3600,
        used_gpu_hours=sum(hours.values()),
        eta_samples=len(result.eta_errors), eta_unknown=result.eta_unknown,
        eta_abs_error_p50_s=_pct(result.eta_errors, 0.5) if result.eta_errors else None,
        eta_abs_error_p90_s=_pct(result.eta_errors, 0.9) if result.eta_errors else None,
        eta_rel_error_p50=_pct(relative, 0.5) if relative else None,
        eta_coarse_samples=len(coarse), eta_coarse_rel_error_p50=_pct(coarse, 0.5) if coarse else None,
        **_range_figures(result),
        at_latest_given=len(result.promises),
        at_latest_broken=sum(1 for _, bound, start in result.promises if start > bound),
    )


def _range_figures(result: SimResult) -> dict[str, Any]:
    """PolicyMetrics' ``eta_range_*`` fields from the sampled intervals."""
    if not result.eta_inside:
        return {}
    return dict(eta_range_samples=len(result.eta_inside),
                eta_range_coverage=sum(result.eta_inside) / len(result.eta_inside),
                eta_range_width_p50_s=_pct(result.eta_widths, 0.5),
                eta_range_width_rel_p50=_pct([w / max(wait, 60.0)
                                              for w, wait in zip(result.eta_widths, result.eta_range_waits)], 0.5))
