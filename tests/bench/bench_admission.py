"""Admission latency benchmark: attempt ended -> next task submitted to Ray, on a private
local Ray cluster (tests/support/ray_cluster.py: head without work resources, two workers
with 4 logical GPUs each).

    python tests/bench/bench_admission.py [--tasks 50] [--poll 0.2 1.0]

N tasks that each need the whole cluster (2 nodes x 4 GPUs) are queued at once, so Ray can
run only one at a time: every admission after the first waits for the previous attempt to
end. From the log (``recorded_at`` of each task stream), for each consecutive pair (ordered
by when they were submitted to Ray):

    latency = AttemptSubmitted(k+1) - AttemptEnded(k)     (and AttemptStarting(k+1) - ...)

Target (issue): p99 < 2 s. One run per ``--poll`` value (reactor poll_interval_s), each with
a fresh store and reactor on the same cluster. Prints a table; not a timed test. Every Ray
process is killed by process group in ``finally`` (never ``ray stop``, never by name).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.events import task_stream  # noqa: E402
from argus.lifecycle import TaskState  # noqa: E402
from argus.rayjobs import AsyncRayGateway, RayGateway  # noqa: E402
from argus.reactor import Reactor  # noqa: E402
from projections import open_store  # noqa: E402
from tests.reactor.harness import reactor_config, submit_task, task_view, toy_command  # noqa: E402
from argus.replay.stats import percentile  # noqa: E402
from tests.support.ray_cluster import RayCluster  # noqa: E402

TARGET_P99_S = 2.0


def stats_ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    if not ms:
        return f"{0:>4} {'-':>8} {'-':>8} {'-':>8} {'-':>8}"
    return (f"{len(ms):>4} {percentile(ms, 50):>8.0f} {percentile(ms, 90):>8.0f} "
            f"{percentile(ms, 99):>8.0f} {max(ms):>8.0f}")


async def run_once(cluster: RayCluster, n_tasks: int, poll_s: float, work: Path) -> dict[str, Any]:
    config = reactor_config(cluster, poll_interval_s=poll_s)
    store = await open_store(work / f"argus-poll{poll_s}.db", synchronous="FULL")
    gateway = AsyncRayGateway(RayGateway(cluster.job_server_url, cluster.address))
    reactor = Reactor(store, gateway, config, reactor_id=f"bench-{poll_s}")
    runner = asyncio.create_task(reactor.run())
    shared = Path(cluster.shared_root)
    command = toy_command(shared, "alice", nnodes=2, gpus=4, steps=1)
    tag = f"adm{str(poll_s).replace('.', 'p')}-{time.strftime('%H%M%S')}"
    task_ids: list[str] = []
    t0 = time.monotonic()
    try:
        for i in range(n_tasks):
            task_ids.append(await submit_task(store, f"{tag}-{i:03d}", nnodes=2, gpus=4,
                                              command=command))
        deadline = t0 + max(600.0, n_tasks * 60.0)
        states: dict[str, TaskState] = {}
        last_report = 0.0
        while time.monotonic() < deadline:
            for tid in task_ids:
                if tid not in states or not states[tid].is_terminal():
                    view = await task_view(store, tid)
                    if view is not None:
                        states[tid] = view.state
            done = sum(1 for s in states.values() if s.is_terminal())
            if done == n_tasks:
                break
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"  [poll={poll_s}] {done}/{n_tasks} terminal after "
                      f"{time.monotonic() - t0:.0f}s", flush=True)
            await asyncio.sleep(0.5)
        wall_s = time.monotonic() - t0
        not_ok = {tid: states.get(tid) for tid in task_ids if states.get(tid) is not TaskState.SUCCEEDED}

        # -- from the log ------------------------------------------------------------------
        rows = []
        retried = []
        for tid in task_ids:
            recs = await store.read_stream(task_stream(tid))
            by_type: dict[str, list[float]] = {}
            for r in recs:
                by_type.setdefault(r.type, []).append(r.recorded_at)
            if len(by_type.get("AttemptSubmitted", [])) > 1:
                retried.append(tid)
            if by_type.get("AttemptSubmitted") and by_type.get("AttemptEnded"):
                rows.append({
                    "task": tid,
                    "starting": by_type.get("AttemptStarting", [None])[0],
                    "submitted": by_type["AttemptSubmitted"][0],
                    "ended": by_type["AttemptEnded"][-1],
                })
        rows.sort(key=lambda r: r["submitted"])
        to_submitted: list[float] = []
        to_starting: list[float] = []
        overlaps = 0
        for prev, nxt in zip(rows, rows[1:]):
            to_submitted.append(nxt["submitted"] - prev["ended"])
            if nxt["starting"] is not None:
                to_starting.append(nxt["starting"] - prev["ended"])
            if nxt["submitted"] < prev["ended"]:
                overlaps += 1
        durations = [r["ended"] - r["submitted"] for r in rows]
        return {
            "poll": poll_s, "n": n_tasks, "wall_s": wall_s, "not_ok": not_ok, "retried": retried,
            "to_submitted": to_submitted, "to_starting": to_starting, "overlaps": overlaps,
            "mean_duration_s": sum(durations) / len(durations) if durations else float("nan"),
        }
    finally:
        # Leave the cluster idle: stop whatever attempt is still running, then the reactor.
        for view in list(reactor.state.tasks.values()):
            if view.latest_attempt is not None and not view.latest_attempt.ended:
                try:
                    await gateway.stop(view.latest_attempt.submission_id)
                except Exception as exc:  # best effort
                    print(f"  could not stop {view.latest_attempt.submission_id}: {exc}")
        await reactor.stop()
        try:
            await asyncio.wait_for(runner, 30)
        finally:
            await store.close()


def report(res: dict[str, Any]) -> bool:
    print()
    print(f"poll_interval_s={res['poll']}  tasks={res['n']}  (2 nodes x 4 GPUs each, steps=1)")
    print(f"  {'latency from AttemptEnded(k) to':<34}{'N':>4} {'p50 ms':>8} {'p90 ms':>8} "
          f"{'p99 ms':>8} {'max ms':>8}")
    print(f"  {'AttemptSubmitted(k+1)':<34}{stats_ms(res['to_submitted'])}")
    print(f"  {'AttemptStarting(k+1)':<34}{stats_ms(res['to_starting'])}")
    print(f"  mean task duration (AttemptSubmitted->AttemptEnded): {res['mean_duration_s']:.2f} s")
    print(f"  total wall time (first submit -> all terminal):      {res['wall_s']:.1f} s")
    if res["to_submitted"]:
        p99 = percentile(res["to_submitted"], 99)
        # Latencies of tasks that failed say nothing about admission: no verdict then.
        verdict = ("INVALID (not every task succeeded)" if res["not_ok"]
                   else "MET" if p99 < TARGET_P99_S else "NOT MET")
        print(f"  target p99 < {TARGET_P99_S:.0f} s (ended -> submitted): {verdict} "
              f"(p99 = {p99 * 1000:.0f} ms)")
        if verdict == "NOT MET":
            return False
    if res["overlaps"]:
        print(f"  WARNING: {res['overlaps']} pair(s) overlapped (next submitted before previous ended)")
    if res["retried"]:
        print(f"  note: {len(res['retried'])} task(s) had more than one attempt: {res['retried']}")
    if res["not_ok"]:
        print(f"  NOT SUCCEEDED ({len(res['not_ok'])}): "
              + ", ".join(f"{t}={s.value if s else None}" for t, s in res["not_ok"].items()))
    else:
        print("  all tasks SUCCEEDED")
    return not res["not_ok"]


async def main_async(args: argparse.Namespace, cluster: RayCluster, work: Path) -> bool:
    ok = True
    for poll_s in args.poll:
        print(f"running {args.tasks} tasks with poll_interval_s={poll_s} ...", flush=True)
        res = await run_once(cluster, args.tasks, poll_s, work)
        ok = report(res) and ok
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--poll", type=float, nargs="+", default=[0.2],
                        help="reactor poll_interval_s values, one run each (default: 0.2)")
    args = parser.parse_args()

    temp_dir = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    shared_root = Path(tempfile.mkdtemp(prefix="argus-shared-"))
    work = Path(tempfile.mkdtemp(prefix="argus-bench-adm-"))
    cluster = RayCluster(temp_dir, shared_root)
    started = time.monotonic()
    try:
        print(f"starting private Ray cluster in {temp_dir} ...", flush=True)
        cluster.start()
        print(f"cluster up in {time.monotonic() - started:.1f}s "
              f"(gcs {cluster.address}, jobs {cluster.job_server_url})", flush=True)
        ok = asyncio.run(main_async(args, cluster, work))
    finally:
        cluster.stop()
        shutil.rmtree(shared_root, ignore_errors=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal bench time {time.monotonic() - started:.1f}s")
    if not ok:
        sys.exit("FAILED: the workload did not succeed or a target was NOT MET (see above)")


if __name__ == "__main__":
    main()
