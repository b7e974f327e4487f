"""Benchmark the usage report (``GET /usage``, ``argus usage``): how long one report takes
over N finished tasks spread over 30 days, by user and by team.

    python tests/bench/bench_usage.py [--tasks 10000] [--users 50] [--repeat 5]

The log is appended through the store (so the live projections are kept as a server keeps
them), each task a happy path of 7 events with its own times; users are in 5 teams. Prints
the median wall time of a report over the whole window and over the last day. A report
reads the tasks that changed since ``since`` and every unfinished one, and folds each
attempt into days: its cost grows with the tasks in the window, not with the log.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus.events import TeamCreated, TeamMemberMoved, task_stream, teams_stream, user_stream  # noqa: E402
from argus.store import AppendBatch  # noqa: E402
from projections import open_store  # noqa: E402
from projections.usage_report import read_usage_report  # noqa: E402
from tests.events import factories as f  # noqa: E402

DAY = 86400.0


async def build(path: Path, tasks: int, users: int) -> float:
    store = await open_store(path, synchronous="OFF")
    end = time.time()
    start = end - 30 * DAY
    try:
        names = [f"u{i}" for i in range(users)]
        await store.append_batches([AppendBatch(stream=user_stream(u), expected_version=0, events=[f.user_created(u)],
                                                owner=u) for u in names])
        team_events = [TeamCreated(team_id=f"t{k}", by="admin", at=start) for k in range(5)]
        team_events += [TeamMemberMoved(user_id=u, team_id=f"t{i % 5}", by="admin", at=start) for i, u in enumerate(names)]
        await store.append_batches([AppendBatch(stream=teams_stream, expected_version=0, events=team_events)])
        step = (end - start - 4 * 3600) / tasks
        for lo in range(0, tasks, 500):
            batches = []
            for i in range(lo, min(tasks, lo + 500)):
                tid, user, t = f"task-{i:07d}", names[i % users], start + i * step
                events = [f.submitted(tid, user, at=t), f.starting(tid, at=t + 60), f.attempt_submitted(tid, at=t + 61),
                          f.running(tid, at=t + 90), f.progressed(tid, at=t + 1800, step=5),
                          f.ended(tid, at=t + 3600 + (i % 7) * 300), f.succeeded(tid, at=t + 3600 + (i % 7) * 300)]
                batches.append(AppendBatch(stream=task_stream(tid), expected_version=0, events=events, owner=user))
            await store.append_batches(batches)
    finally:
        await store.close()
    return end


def timed(db: sqlite3.Connection, by: str, since: float, now: float, repeat: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = read_usage_report(db, by=by, since=since, until=now, now=now)  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
        rows = len(report.rows)
    return statistics.median(times), rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "usage.sqlite3"
        t0 = time.perf_counter()
        now = asyncio.run(build(path, args.tasks, args.users))
        print(f"built {args.tasks} tasks ({7 * args.tasks} events) in {time.perf_counter() - t0:.1f} s")
        db = sqlite3.connect(path)
        for by in ("user", "team"):
            for label, since in (("30 days", now - 31 * DAY), ("last day", now - DAY)):
                s, rows = timed(db, by, since, now, args.repeat)
                print(f"by {by:4}  {label:8}: {1000 * s:8.1f} ms  ({rows} rows)")
        db.close()


if __name__ == "__main__":
    main()
