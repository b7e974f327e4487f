"""Benchmark ``argus replay verify`` and ``at`` on a large log: events/s and peak memory.

    python tests/bench/bench_replay.py [--events 1000000] [--small 250000] [--tasks 10000]

Two logs are generated with the same number of tasks (so the same projection size): a
small one and a large one. Each measurement runs in a fresh interpreter and reports its
own peak RSS (``ru_maxrss``), next to the RSS of an interpreter that only imported Argus
and opened the database. Equal peaks at 250k and 1M events show that memory is bounded by
the projection, not by the log. Target: ≥ 200,000 events/s.

Run it on a quiet machine: on a loaded one, wall time measures the neighbours.

The log is realistic: every task is submitted, deferred while capacity churns
(CapacityObserved and TaskDeferred with changing reasons make up most of a long log), then
runs; one in five fails INSUFFICIENT_RESOURCES and is retried, one in twenty fails
USER_ERROR, one in twenty is canceled. Rows are encoded with ``encode_event`` and inserted
directly (synchronous OFF, one transaction); the live projections are then filled with
``rebuild_projections``, as ``EventStore.open`` would.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus.events import (  # noqa: E402
    AttemptEnded, AttemptRunning, AttemptStarting, AttemptSubmitted, CapacityObserved, Demand,
    EventBase, FailureKind, NodeCapacity, RetryScheduled, SubmissionPayload, TaskCanceled,
    TaskCancelRequested, TaskDeferred, TaskFailed, TaskSubmitted, TaskSucceeded, UserCreated,
    cluster_stream, encode_event, task_stream, user_stream,
)
from argus.store.migrate import migrate  # noqa: E402
from argus.store import EVENT_COLUMNS  # noqa: E402
from projections import rebuild_projections  # noqa: E402
from projections import default_projections  # noqa: E402

T0 = 1_767_600_000.0
USERS = [f"user{i:02d}" for i in range(20)]
REASONS = ["no_capacity_per_node", "max_running", "capacity_unknown"]
EVIDENCE = "Total available GPUs 4 is less than total desired GPUs 8"


def _task_life(tid: str, n: int, t: float) -> list[tuple[str, EventBase]]:
    """Attempts and outcome of task number ``n`` (after its queueing)."""
    out: list[tuple[str, EventBase]] = []
    attempt = 1

    def run(ok: bool, kind: FailureKind | None = None, evidence: str = "") -> None:
        sid = f"{tid}--a{attempt:02d}"
        payload = SubmissionPayload(submission_id=sid, entrypoint="python -m verl.trainer.main_ppo",
                                    entrypoint_num_cpus=1.0, entrypoint_resources={"worker_node": 1.0},
                                    runtime_env={}, metadata={"task_id": tid})
        out.extend([
            ("reactor", AttemptStarting(task_id=tid, attempt_no=attempt, submission_id=sid, payload=payload, decided_at=t)),
            ("reactor", AttemptSubmitted(task_id=tid, attempt_no=attempt, submission_id=sid, submitted_at=t + 1)),
            ("reactor", AttemptRunning(task_id=tid, attempt_no=attempt, submission_id=sid, started_at=t + 5)),
            ("reactor", AttemptEnded(task_id=tid, attempt_no=attempt, submission_id=sid,
                                     ray_status="SUCCEEDED" if ok else "FAILED", exit_code=0 if ok else 1,
                                     failure_kind=kind, evidence=evidence, ended_at=t + 600)),
        ])

    if n % 20 == 7:
        return [("user", TaskCancelRequested(task_id=tid, by="u", requested_at=t)),
                ("reactor", TaskCanceled(task_id=tid, by="u", canceled_at=t + 1))]
    if n % 5 == 0:
        run(False, FailureKind.INSUFFICIENT_RESOURCES, EVIDENCE)
        out.append(("reactor", RetryScheduled(task_id=tid, failed_attempt_no=1,
                                              failure_kind=FailureKind.INSUFFICIENT_RESOURCES,
                                              next_run_at=t + 660, delay_s=60.0)))
        attempt = 2
    if n % 20 == 3:
        run(False, FailureKind.USER_ERROR, "ModuleNotFoundError: No module named 'x'")
        out.append(("reactor", TaskFailed(task_id=tid, attempt_no=attempt, failure_kind=FailureKind.USER_ERROR,
                                          error_summary="ModuleNotFoundError", finished_at=t + 600)))
    else:
        run(True)
        out.append(("reactor", TaskSucceeded(task_id=tid, attempt_no=attempt, finished_at=t + 600)))
    return out


def generate_events(n_events: int, n_tasks: int, seed: int = 7) -> Iterator[tuple[str, str | None, str, EventBase]]:
    """(stream, owner, actor, event) — exactly ``n_events`` of them."""
    rnd = random.Random(seed)
    tasks = [(f"{USERS[i % len(USERS)]}-ppo-20260105-100000-{i:06x}", USERS[i % len(USERS)]) for i in range(n_tasks)]
    head: list[tuple[str, str | None, str, EventBase]] = [
        (user_stream(u), u, "system", UserCreated(user_id=u, by="admin", created_at=T0)) for u in USERS
    ]
    demand = Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=8.0)
    for i, (tid, user) in enumerate(tasks):
        head.append((task_stream(tid), user, f"user:{user}", TaskSubmitted(
            task_id=tid, user=user, workload="ppo", kind="basic", spec_raw="workload: ppo\n",
            spec={"workload": "ppo"}, command_raw="python -m verl", command="python -m verl",
            demand=demand, submitted_at=T0 + i)))
    tail: list[tuple[str, str | None, str, EventBase]] = []
    for i, (tid, user) in enumerate(tasks):
        actors = {"user": f"user:{user}", "reactor": "reactor:bench"}
        tail.extend((task_stream(tid), user, actors[who], ev) for who, ev in _task_life(tid, i, T0 + 100_000 + i))
    churn = n_events - len(head) - len(tail)
    if churn < n_tasks:
        raise SystemExit(f"--events {n_events} is too small for --tasks {n_tasks}")
    yield from head
    last_reason: dict[str, str] = {}
    for k in range(churn):
        t = T0 + n_tasks + k * 0.05
        if k < n_tasks or k % 2:
            # First every task gets a deferral (so all are PENDING_RESOURCES), then churn.
            tid, user = tasks[k] if k < n_tasks else tasks[rnd.randrange(n_tasks)]
            reason = rnd.choice([r for r in REASONS if r != last_reason.get(tid)])
            last_reason[tid] = reason
            free = [float(rnd.randint(0, 4)) for _ in range(8)]
            yield (task_stream(tid), user, "reactor:bench", TaskDeferred(
                task_id=tid, reason=reason, message=f"{reason}: needs 2 nodes × 4 GPUs", needed=demand,
                free_gpus_per_node=free, decided_at=t))
        else:
            nodes = [NodeCapacity(node_id=f"node{j}", ip=f"10.0.0.{j}", total_gpus=4.0,
                                  free_gpus=float(rnd.randint(0, 4)), total_cpus=64.0, free_cpus=48.0)
                     for j in range(8)]
            yield (cluster_stream, None, "reactor:bench", CapacityObserved(nodes=nodes, observed_at=t))
    yield from tail


def build_log(path: Path, n_events: int, n_tasks: int) -> float:
    """Write the log and fill the live projections; return seconds taken."""
    started = time.perf_counter()
    migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")
    versions: dict[str, int] = {}
    metas: dict[str, bytes] = {}

    def rows() -> Iterator[tuple[object, ...]]:
        for position, (stream, owner, actor, event) in enumerate(generate_events(n_events, n_tasks), start=1):
            versions[stream] = version = versions.get(stream, 0) + 1
            meta = metas.setdefault(actor, b"{}" if actor == "system" else json.dumps({"actor": actor}).encode())
            type_, schema, data = encode_event(event)
            yield (position, stream, version, type_, schema, data, meta, owner, T0 + position * 0.01)

    conn.execute("BEGIN")
    conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", rows())
    rebuild_projections(conn, conn, default_projections())
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - started


def child(mode: str, db: str) -> None:
    """Run one measurement in this (fresh) interpreter and print it as JSON."""
    from argus.replay import verify, world_at
    from argus.replay.source import head_position, open_log

    with open_log(db) as source:
        head = head_position(source.conn)
    started, cpu = time.perf_counter(), time.process_time()
    if mode == "verify":
        report = verify(db)
        assert report.ok, report.render()
        folded = head
    elif mode == "at":
        folded = head // 2
        world = world_at(db, folded)
        assert world.position == folded
    else:  # "idle": the baseline
        folded = 0
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({"mode": mode, "events": folded, "seconds": seconds, "cpu_s": cpu,
                      "rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: after fork+exec ru_maxrss keeps the
    parent's peak (which here includes building the log)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(mode: str, db: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(db)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=None, help="the smaller log (default: events/4)")
    ap.add_argument("--tasks", type=int, default=10_000, help="tasks in each log (projection size)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: temp)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    sizes = [args.small or args.events // 4, args.events]
    with tempfile.TemporaryDirectory(prefix="argus-bench-", dir=args.dir) as tmp:
        results = []
        for n in sizes:
            db = Path(tmp) / f"log-{n}.sqlite3"
            build_s = build_log(db, n, args.tasks)
            idle = measure("idle", db)
            res = {"events": n, "build_s": build_s, "idle_rss_mb": idle["rss_mb"],
                   "verify": measure("verify", db), "at": measure("at", db)}
            results.append(res)
            print(f"built {n:,} events ({args.tasks:,} tasks) in {build_s:.1f} s; "
                  f"file {db.stat().st_size / 2**20:.0f} MiB", file=sys.stderr, flush=True)
        print(f"{'events':>10} {'cmd':>6} {'folded':>10} {'seconds':>8} {'events/s':>10} "
              f"{'CPU s':>7} {'ev/CPU-s':>9} {'peak RSS MiB':>12} {'idle RSS MiB':>12}")
        for res in results:
            for mode in ("verify", "at"):
                m = res[mode]
                rate = m["events"] / m["seconds"] if m["seconds"] else 0.0
                cpu_rate = m["events"] / m["cpu_s"] if m["cpu_s"] else 0.0
                print(f"{res['events']:>10,} {mode:>6} {m['events']:>10,} {m['seconds']:>8.2f} "
                      f"{rate:>10,.0f} {m['cpu_s']:>7.2f} {cpu_rate:>9,.0f} {m['rss_mb']:>12.0f} "
                      f"{res['idle_rss_mb']:>12.0f}")
        small, large = results
        growth = large["verify"]["rss_mb"] - small["verify"]["rss_mb"]
        print(f"verify peak RSS grows {growth:+.0f} MiB from {small['events']:,} to "
              f"{large['events']:,} events at the same projection size ({args.tasks:,} tasks)",
              flush=True)


if __name__ == "__main__":
    main()
