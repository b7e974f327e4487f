"""ETA intervals (argus.scheduler.eta_range): forward runs with drawn run times, and the
draws from the run-time history (projections.runtime_stats.RuntimeHistory.draw)."""

from __future__ import annotations

import random

from argus.events import Demand, NodeCapacity
from argus.scheduler import Capacity, PolicyConfig, QueuedTask, RunningTask
from argus.scheduler.eta_range import RUNS, start_ranges
from projections.runtime_stats import RunKey, RuntimeHistory

NOW = 100_000.0
GANG = Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0)


def one_node_busy(started: float) -> tuple[list[QueuedTask], list[RunningTask], Capacity]:
    """One 4-GPU node held by ``r``; ``w`` waits for all of it."""
    capacity = Capacity(nodes=(NodeCapacity(node_id="n0", ip="", total_gpus=4, free_gpus=0, total_cpus=64,
                                            free_cpus=60),))
    running = [RunningTask(task_id="r", demand=GANG, node_ids=("n0",), started_at=started,
                           expected_end=started + 3000)]
    return [QueuedTask(task_id="w", demand=GANG, seq=1, estimate_s=3000)], running, capacity


def test_the_interval_spans_the_drawn_ends_and_is_the_same_for_the_same_inputs() -> None:
    queue, running, capacity = one_node_busy(NOW - 600)

    def draw(task_id: str, ran_s: float, rng: random.Random) -> float:
        return rng.uniform(max(ran_s, 1000), 5000)

    ranges = start_ranges(queue, running, capacity, NOW, PolicyConfig(policy="fifo"), draw)
    w = ranges["w"]
    assert NOW - 600 + 1000 <= w.earliest < w.latest <= NOW - 600 + 5000  # type: ignore[operator]
    assert ranges == start_ranges(queue, running, capacity, NOW, PolicyConfig(policy="fifo"), draw)


def test_when_the_draws_are_right_the_start_falls_inside_four_times_in_five() -> None:
    """Calibration where the model holds: the real end is one more draw from the same
    distribution; over 400 independent trials the [min, max] of RUNS draws holds it
    (RUNS - 1) / (RUNS + 1) = 80 % of the time (order statistics)."""
    inside = 0
    trials = 400
    world = random.Random(7)
    for trial in range(trials):
        queue, running, capacity = one_node_busy(NOW - 300)

        def draw(task_id: str, ran_s: float, rng: random.Random) -> float:
            return max(ran_s, rng.lognormvariate(8, 1))

        w = start_ranges(queue, running, capacity, NOW, PolicyConfig(policy="fifo"), draw, seed=trial)["w"]
        actual = NOW - 300 + draw("r", 300, world)
        inside += w.earliest <= actual <= (w.latest or float("inf"))
    assert RUNS == 9
    assert 0.74 <= inside / trials <= 0.86, inside / trials


def test_a_draw_comes_from_like_runs_longer_than_it_has_run_and_within_its_limit() -> None:
    history = RuntimeHistory()
    alice = RunKey("alice", "ppo", 1, 4)
    for seconds in (100, 200, 400, 800, 1600):
        history.add(alice, seconds)
    rng = random.Random(1)
    draws = [history.draw(alice, 0.0, rng, 3600.0) for _ in range(500)]
    assert 80 <= min(draws) and max(draws) <= 1600 * 1.2
    longer = [history.draw(alice, 500.0, rng, 3600.0) for _ in range(200)]
    assert min(longer) >= 500.0  # it has run 500 s: only the runs longer than that count
    assert max(history.draw(alice, 0.0, rng, 3600.0, limit_s=150.0) for _ in range(200)) <= 150.0
    past_all = history.draw(alice, 10_000.0, rng, 3600.0)
    assert 10_000 + 0.5 * 10_000 <= past_all <= 10_000 + 1.5 * 10_000  # as long again as so far
    bob = RunKey("bob", "ppo", 1, 4)  # no runs of his own: everyone's of that workload and shape
    assert all(80 <= history.draw(bob, 0.0, rng, 3600.0) <= 1600 * 1.2 for _ in range(100))
    assert RuntimeHistory().draw(bob, 0.0, rng, 3600.0) == 3600.0  # nothing known: the default


def test_a_reservation_that_waits_only_for_time_limits_says_when_it_starts_at_the_latest() -> None:
    """Reserve-backfill's head waits for two tasks on its node; when both have enforced
    time limits its deferral gives a bound (the later limit, plus the stop's grace and a
    minute); when one runs on an estimate only, it gives none."""
    from argus.scheduler import Defer, decide
    from argus.scheduler.stages import STOP_SLACK_S

    capacity = Capacity(nodes=(NodeCapacity(node_id="n0", ip="", total_gpus=4, free_gpus=0, total_cpus=64,
                                            free_cpus=60),))
    half = Demand(nnodes=1, n_gpus_per_node=2, cpus_per_node=1.0)
    config = PolicyConfig(policy="reserve-backfill", reserve=True, backfill=True, preempt_grace_s=30.0)
    for limited, bound in ((True, NOW + 2000 + 30 + STOP_SLACK_S), (False, None)):
        running = [RunningTask(task_id="a", demand=half, node_ids=("n0",), started_at=NOW - 100,
                               expected_end=NOW + 1000, limited=True),
                   RunningTask(task_id="b", demand=half, node_ids=("n0",), started_at=NOW - 100,
                               expected_end=NOW + 2000, limited=limited)]
        [d] = decide([QueuedTask(task_id="w", demand=GANG, seq=1, estimate_s=600)], running, capacity, NOW, config)
        assert isinstance(d, Defer) and d.reserved_from == NOW + 2000
        assert d.reserved_latest == bound, d
        assert ("at the latest" in d.message) is limited
