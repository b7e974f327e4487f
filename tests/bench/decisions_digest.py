"""A digest of the scheduler's decisions over random clusters, to check that a change to
the pass changes no decision (docs/evaluation/2026-12-03-pass-scale.md).

    PYTHONPATH=<checkout> python tests/bench/decisions_digest.py [SCENARIOS]

Runs ``decide`` on SCENARIOS (default 300) seeded random clusters (3-60 nodes, GPU models,
fragmented free resources, running tasks with and without known nodes) under every
policy, with waits on and off, preemption on and off and now and then fragmentation
placement, and prints one SHA-256 over every decision (messages included) and the count
of each reason. Run it on the code before and after a change: the same digest, the same
decisions. Put the checkout to test first on PYTHONPATH (the script imports ``argus``
from there).
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Iterator

import msgspec

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler import Capacity, Decision, PolicyConfig, QueuedTask, RunningTask, decide

MODELS = ["A100", "H100", ""]
POLICIES = ["fifo", "fifo-backfill", "reserve-backfill", "priority", "fairshare"]


def main() -> None:
    enc = msgspec.json.Encoder()
    h = hashlib.sha256()
    kinds: dict[str, int] = {}
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
        for _, decisions in scenario(seed):
            for d in decisions:
                k = getattr(d, "reason", type(d).__name__)
                kinds[k] = kinds.get(k, 0) + 1
            h.update(enc.encode(decisions))
    print(h.hexdigest(), sorted(kinds.items()))


def scenario(seed: int) -> Iterator[tuple[str, list[Decision]]]:
    """Every policy's decisions on the cluster, running and waiting tasks of ``seed``."""
    rng = random.Random(seed)
    n = rng.choice([3, 8, 25, 60])
    nodes = []
    for i in range(n):
        tg = rng.choice([1, 2, 4, 8])
        tc = rng.choice([16.0, 64.0, 96.0, 128.0])
        nodes.append(NodeCapacity(node_id=f"n{i:03d}", ip="", total_gpus=tg, total_cpus=tc, gpu_type=rng.choice(MODELS),
                                  free_gpus=rng.choice([0, 0, tg, rng.randint(0, tg)]), free_cpus=round(rng.uniform(0, tc), 1)))

    def dem() -> Demand:
        return Demand(nnodes=rng.choice([1, 1, 1, 2, 3]), n_gpus_per_node=rng.choice([1, 2, 4, 8]),
                      cpus_per_node=rng.choice([1.0, 4.0, 12.0, 40.0]), gpu_types=rng.choice([(), (), ("A100",), ("H100",), ("A100", "H100")]))
    running = [RunningTask(task_id=f"r{i}", demand=dem(), user=f"u{rng.randint(0,4)}",
                           node_ids=tuple(rng.sample([x.node_id for x in nodes], 1)) if rng.random() < 0.8 else (),
                           expected_end=1000 + rng.uniform(-500, 50000) if rng.random() < 0.8 else None,
                           started_at=1000 - rng.uniform(0, 5000), limited=rng.random() < 0.3,
                           preemptible=rng.random() < 0.5, settled=rng.random() < 0.8, priority=rng.randint(0, 2))
               for i in range(rng.randint(0, 30))]
    queue = [QueuedTask(task_id=f"q{i}", demand=dem(), seq=i, user=f"u{rng.randint(0,4)}", priority=rng.randint(0, 2),
                        estimate_s=rng.choice([None, 600.0, 7200.0]), limited=rng.random() < 0.3,
                        waiting_since=1000 - rng.uniform(0, 50000), preemptible=rng.random() < 0.5,
                        next_run_at=2000.0 if rng.random() < 0.05 else None,
                        preempting_since=900.0 if rng.random() < 0.03 else None)
             for i in range(rng.randint(1, 80))]
    cap = Capacity(nodes=tuple(nodes))
    for policy in POLICIES:
        for waits in (True, False):
            for pre in (False, True):
                cfg = PolicyConfig(policy=policy, max_running_tasks=rng.choice([5, 1000]), waits=waits, preemption=pre,
                                   move_after_s=rng.choice([0.0, 3600.0]), usage={"u1": 5000.0, "u2": 90000.0},
                                   quotas={"u3": 8.0}, max_running_per_user=rng.choice([0, 3]),
                                   placement=rng.choice(["bestfit"] * 4 + ["fragmentation"]))
                yield policy, decide(queue, running, cap, 1000.0, cfg)


if __name__ == "__main__":
    main()
