"""Node pool recovery times with the production defaults (TTL 60 s, refresh 10 s, poll 5 s).

    python tests/bench/bench_nodepool.py [--rounds N]

Starts `argus node head` and two `argus node worker` on this host (free ports, private temp
dirs, like tests/nodepool), then measures:
  * raylet death (kill -9) -> that worker's node ALIVE again (a new node id);
  * head death (kill -9 of gcs_server) -> head command restarted (by this script, after 1 s
    like supervisord) -> both workers ALIVE on the new head.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus.nodepool import read_head_record  # noqa: E402
from tests.nodepool.cluster import (  # noqa: E402
    FAST_ENV,
    cluster_factory,
    cmdline,
    descendants,
    wait_for,
)


def _exe(root: int, suffix: str) -> int:
    for pid in descendants(root):
        if cmdline(pid).split(" ", 1)[0].endswith(suffix):
            return pid
    raise LookupError(suffix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    # Production defaults: drop the shortened test settings.
    defaults = {key: "" for key in FAST_ENV}
    raylet_s: list[float] = []
    head_s: list[float] = []
    with cluster_factory() as make:
        c = make("bench")
        head = c.start("head", c.head_env(**defaults), "head")
        workers = [c.start("worker", c.worker_env(f"w{i}", **defaults), f"w{i}") for i in (1, 2)]
        t0 = time.monotonic()
        wait_for(lambda: len(c.worker_nodes()) == 2, 300, "two workers", step=0.25)
        print(f"cold start -> 2 workers joined: {time.monotonic() - t0:.1f}s", flush=True)
        for _ in range(rounds):
            before = set(c.worker_nodes())
            os.kill(_exe(workers[0].pid, "/raylet"), signal.SIGKILL)
            t0 = time.monotonic()
            wait_for(lambda b=before: set(c.worker_nodes()) - b, 300, "node back", step=0.25)
            raylet_s.append(time.monotonic() - t0)
            print(f"raylet death -> node back: {raylet_s[-1]:.1f}s", flush=True)
            wait_for(lambda: len(c.worker_nodes()) == 2, 300, "dead node gone")

            before_head = set(c.worker_nodes())
            old = read_head_record(c.head_file).record
            os.kill(_exe(head.pid, "/gcs_server"), signal.SIGKILL)
            head.proc.wait(timeout=120)
            t_restart = time.monotonic()
            starts = 0

            def supervise_and_check(before_head: set[str] = before_head) -> bool:
                nonlocal head, starts
                if head.proc.poll() is not None:
                    if starts:
                        time.sleep(1.0)
                    starts += 1
                    head = c.start("head", head.env, f"head-r{len(head_s)}-{starts}")
                nodes = c.worker_nodes()
                return len(nodes) == 2 and not set(nodes) & before_head

            wait_for(supervise_and_check, 300, "workers on the new head", step=0.25)
            head_s.append(time.monotonic() - t_restart)
            new = read_head_record(c.head_file).record
            assert new is not None and old is not None and new.head_id != old.head_id
            print(f"head restart -> all workers rejoined: {head_s[-1]:.1f}s "
                  f"(head command starts: {starts})", flush=True)
    print(f"SUMMARY raylet death -> node back: median {statistics.median(raylet_s):.1f}s; "
          f"head restart -> all workers rejoined: median {statistics.median(head_s):.1f}s "
          f"(rounds={rounds}, TTL 60 s, refresh 10 s, poll 5 s)")


if __name__ == "__main__":
    main()
