"""ETAs: the policy run forward over the running tasks' expected ends and the waiting
tasks' estimates gives each waiting task the start it would get if nothing else came."""

from __future__ import annotations

import msgspec

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler import Capacity, PolicyConfig, QueuedTask, RunningTask
from argus.scheduler.eta import estimate_starts

NOW = 1_000.0


def gang(nnodes: int, gpus: int) -> Demand:
    return Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=1)


def nodes(*free: float) -> Capacity:
    return Capacity(nodes=tuple(NodeCapacity(node_id=f"n{i}", ip="", total_gpus=8, free_gpus=g, total_cpus=64,
                                             free_cpus=64) for i, g in enumerate(free)))


def test_each_waiting_task_starts_when_the_policy_would_admit_it() -> None:
    running = [RunningTask(task_id="r0", demand=gang(1, 8), node_ids=("n0",), expected_end=NOW + 100),
               RunningTask(task_id="r1", demand=gang(1, 4), expected_end=NOW + 30)]  # nodes unknown
    queue = [QueuedTask(task_id="big", demand=gang(2, 8), seq=1, estimate_s=50),
             QueuedTask(task_id="a", demand=gang(1, 4), seq=2, estimate_s=10, limited=True),
             QueuedTask(task_id="b", demand=gang(1, 8), seq=3, estimate_s=10, limited=True)]
    capacity = nodes(0, 4)
    fifo = estimate_starts(queue, running, capacity, NOW, PolicyConfig(policy="fifo"))
    # strict fifo: big waits for both nodes (r0 ends at +100), then a and b after it
    assert fifo == {"big": NOW + 100, "a": NOW + 150, "b": NOW + 150}
    easy = estimate_starts(queue, running, capacity, NOW, PolicyConfig(policy="reserve-backfill"))
    # a fits now and ends (+10) long before big's reservation (+100): backfilled at once;
    # b fits when r1 ends (+30) and would end by +40, still before +100: backfilled too
    assert easy == {"big": NOW + 100, "a": NOW, "b": NOW + 30}
    # Without time limits their run times are estimates: not on the reserved nodes (both)
    guessed = [msgspec.structs.replace(t, limited=False) for t in queue]
    assert estimate_starts(guessed, running, capacity, NOW, PolicyConfig(policy="reserve-backfill")) == fifo


def test_the_horizon_bounds_the_forward_run_and_retries_wait_for_their_backoff() -> None:
    queue = [QueuedTask(task_id=f"t{i}", demand=gang(1, 8), seq=i, estimate_s=10) for i in range(5)]
    queue.append(QueuedTask(task_id="retry", demand=gang(1, 8), seq=0, next_run_at=NOW + 25, estimate_s=10))
    starts = estimate_starts(queue, [], nodes(8), NOW, PolicyConfig(policy="fifo"), horizon=4, limit=4)
    assert starts == {"t0": NOW, "t1": NOW + 10, "t2": NOW + 20, "retry": NOW + 30}  # first 4 in order only


def test_past_the_horizon_each_task_takes_the_first_span_with_its_gpus_free() -> None:
    """The coarse estimate: the free GPUs over time as the forward run left them; each task
    in line takes the earliest span with its GPUs free for its whole run (GPUs alone)."""
    running = [RunningTask(task_id="r0", demand=gang(1, 8), node_ids=("n0",), expected_end=NOW + 100)]
    queue = [QueuedTask(task_id="head", demand=gang(1, 4), seq=1, estimate_s=50),  # the forward run's
             QueuedTask(task_id="four", demand=gang(1, 4), seq=2, estimate_s=30),
             QueuedTask(task_id="twelve", demand=gang(2, 6), seq=3, estimate_s=10),
             QueuedTask(task_id="retry", demand=gang(1, 2), seq=4, estimate_s=5, next_run_at=NOW + 500),
             QueuedTask(task_id="too_big", demand=gang(1, 16), seq=5, estimate_s=5),  # no node has 16
             QueuedTask(task_id="last", demand=gang(1, 2), seq=6, estimate_s=5)]
    starts = estimate_starts(queue, running, nodes(0, 8), NOW, PolicyConfig(policy="fifo"), horizon=1)
    # head runs at once on n1 (4 of its 8 GPUs) until +50; r0 gives 8 back at +100. Past the
    # horizon: "four" takes the other 4 at once, until +30; "twelve" needs 12 of the 16:
    # from +100; the retry not before its backoff; "last" fits in the 4 free from +30 to
    # +50, before "twelve"; too_big (16 on one node) never.
    assert starts == {"head": NOW, "four": NOW, "twelve": NOW + 100, "retry": NOW + 500, "last": NOW + 30}
    limited = estimate_starts(queue, running, nodes(0, 8), NOW, PolicyConfig(policy="fifo"), horizon=1, limit=3)
    assert set(limited) == {"head", "four", "twelve"}


def test_no_coarse_estimate_when_the_forward_run_could_not_place_its_own() -> None:
    queue = [QueuedTask(task_id="huge", demand=gang(3, 8), seq=1, estimate_s=10),  # 2 nodes: never
             QueuedTask(task_id="small", demand=gang(1, 1), seq=2, estimate_s=10)]
    starts = estimate_starts(queue, [], nodes(8, 8), NOW, PolicyConfig(policy="fifo"), horizon=1)
    assert starts == {}
