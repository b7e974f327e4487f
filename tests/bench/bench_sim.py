"""``argus sim --policy all`` on the openb trace's 60-node subset: CPU per policy.

    python tests/bench/bench_sim.py [--trace-dir DIR] [--policy P ...]

The same run as ``argus sim --trace-pods … --trace-nodes … --nodes-subset 60 --load 1.0
--gang-mix 0.05:2x8 --policy all`` (docs/scheduling.md): every policy through the reactor's
own decision core on a virtual clock. Prints each policy's CPU seconds, plans made and CPU
per plan, and the total against issue 34's figure (235 s of CPU). Target: the total at most
60 s of CPU; the exit status is 1 when it is missed (``tests.bench.verdict``). The trace is
read from ``DIR`` (default: the ``shared/traces/openb`` folder beside the repository).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from argus.scheduler import POLICIES  # noqa: E402
from argus.sim import simulate  # noqa: E402
from argus.sim.trace import GangMix, load_openb  # noqa: E402
from tests.bench.verdict import Verdict  # noqa: E402

TARGET_CPU_S = 60.0
BEFORE_CPU_S = 235.0  # what issue 34 measured for the same command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=REPO.parent / "shared" / "traces" / "openb")
    parser.add_argument("--policy", action="append", choices=sorted(POLICIES),
                        help="only these (the target is judged on all of them)")
    args = parser.parse_args()
    pods = args.trace_dir / "openb_pod_list_default.csv"
    nodes = args.trace_dir / "openb_node_list_gpu_node.csv"
    if not pods.is_file() or not nodes.is_file():
        sys.exit(f"no openb trace in {args.trace_dir} (give --trace-dir)")
    c0 = time.process_time()
    trace = load_openb(pods, nodes, nodes_subset=60, load=1.0, gang_mix=GangMix.parse("0.05:2x8"), seed=0)
    load_s = time.process_time() - c0
    print(f"trace: {len(trace.tasks)} tasks on {len(trace.nodes)} nodes, read in {load_s:.1f} s CPU")
    policies = args.policy or sorted(POLICIES)
    total = load_s
    for policy in policies:
        c0 = time.process_time()
        result = simulate(trace, policy)
        cpu = time.process_time() - c0
        total += cpu
        print(f"{policy:18s} {cpu:6.1f} s CPU  {result.decisions:6d} plans  "
              f"{cpu / max(1, result.decisions) * 1000:5.2f} ms per plan")
    print(f"total {total:.1f} s CPU; issue 34 measured {BEFORE_CPU_S:.0f} s: {BEFORE_CPU_S / total:.2f}x faster")
    verdict = Verdict()
    if args.policy is None:
        verdict.at_most("argus sim --policy all on the 60-node subset", total, TARGET_CPU_S, "s CPU")
    verdict.finish()


if __name__ == "__main__":
    main()
