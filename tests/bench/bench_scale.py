"""Scale of the read path: every list endpoint and ``GET /tasks/{id}`` at 100k tasks, alone
and while 8 clients list as admin. Prints numbers; not a timed test.

    python -m tests.bench.bench_scale [--tasks 100000] [--requests 300]

The log is made first (a fresh SQLite database, written fast: synchronous=OFF, large
transactions, the projections kept inline as always): 80% of tasks run and succeed (7
events each), 10% are canceled while queued, 10% wait (deferred). Then a real uvicorn
server process opens it (``synchronous=FULL``, as ``argus serve`` runs) and one client
process measures, over keep-alive HTTP/1.1 connections:

- each list endpoint's first page, a deep page (by cursor, 90% of the way down), the
  state filters, one user's tasks, the queue (first page and deep), the users;
- ``GET /tasks/{id}`` alone, then while 8 concurrent clients list as admin (random deep
  pages, back to back);
- the server's resident memory at the end.

Then the reactor's turn with 10,000 waiting and 50 running, Ray answering in 5 ms
(``tests/bench/bench_turn.py``).

Targets (issue 24): every list p99 < 50 ms at 100k tasks, deep pages included;
``GET /tasks/{id}`` p99 < 10 ms while 8 clients list; no request dropped (issue 35: a
request that gets no answer is counted, not fatal). The verdict lines say MET or NOT MET
per target; the exit status is 1 when one is NOT MET or a request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.bench.bench_api import ADMIN, _pct, _port, serve  # noqa: E402  (the same server)
from tests.bench.verdict import Verdict  # noqa: E402

T0 = 1_700_000_000.0


def build_log(db: Path, tasks: int) -> None:
    """``tasks`` task histories appended through the store (projections inline)."""
    from argus.store import AppendBatch
    from argus.events import task_stream
    from projections import open_store
    from tests.events import factories as f

    def history(i: int) -> tuple[str, list[object]]:
        user = f"u{i % 50:02d}"
        tid = f"{user}-ppo-20260101-000000-{i:06x}"
        at = T0 + i * 0.5
        kind = i % 10
        events: list[object] = [f.submitted(tid, user, at=at)]
        if kind < 8:
            events += [f.deferred(tid, at=at), f.starting(tid, at=at), f.attempt_submitted(tid),
                       f.running(tid), f.ended(tid), f.succeeded(tid)]
        elif kind == 8:
            events += [f.cancel_requested(tid, by=user, at=at), f.canceled(tid, by=user, at=at)]
        else:
            events += [f.deferred(tid, at=at)]
        return user, [tid, events]  # type: ignore[list-item]

    async def run() -> None:
        store = await open_store(db, synchronous="OFF")
        try:
            batch: list[AppendBatch] = []
            for i in range(tasks):
                user, (tid, events) = history(i)
                batch.append(AppendBatch(stream=task_stream(tid), expected_version=0, events=events, owner=user))
                if len(batch) == 500:
                    await store.append_batches(batch)
                    batch = []
            if batch:
                await store.append_batches(batch)
        finally:
            await store.close()

    asyncio.run(run())


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Failed(Exception):
    pass


DROPPED: list[str] = []  # requests that got no answer (a transport error), this process


async def _timed(c: httpx.AsyncClient, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        try:
            r = await c.get(url)
        except httpx.TransportError as exc:  # no answer: counted, and the verdict fails
            DROPPED.append(f"GET {url}: {type(exc).__name__}: {exc}")
            continue
        out.append(time.perf_counter() - started)
        if r.status_code != 200:
            raise Failed(f"GET {url}: {r.status_code} {r.text[:200]}")
    return out


def _deep_cursors(db: Path, depth: int, count: int) -> list[str]:
    """Cursors of the admin list at ``depth`` rows and around it (as a client that walked
    there would hold them)."""
    from projections.tasks_read import PageCursor

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT created_at, task_id FROM tasks ORDER BY created_at DESC, task_id DESC "
                            "LIMIT ? OFFSET ?", (count, depth)).fetchall()
    finally:
        conn.close()
    return [PageCursor(created_at, task_id).encode() for created_at, task_id in rows]


async def measure(url: str, db: Path, tasks: int, n: int) -> dict[str, tuple[float, float]]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    results: dict[str, tuple[float, float]] = {}
    async with httpx.AsyncClient(base_url=url + "/api/v2", headers=headers, timeout=60) as c:
        first = (await c.get("/tasks", params={"limit": 1})).json()
        if first["total"] != tasks:
            raise Failed(f"the API lists {first['total']} tasks, not {tasks}")
        some_id = first["items"][0]["task_id"]
        deep = _deep_cursors(db, int(tasks * 0.9), 200)
        queue = (await c.get("/queue", params={"limit": 1000})).json()
        for _ in range(int(tasks * 0.1 * 0.9) // 1000):  # walk 90% down the queue
            if not queue["next_cursor"]:
                break
            queue = (await c.get("/queue", params={"limit": 1000, "cursor": queue["next_cursor"]})).json()
        deep_queue = queue["next_cursor"]
        cases = {
            "GET /tasks/{id}": f"/tasks/{some_id}",
            "tasks, first page (admin)": "/tasks?limit=50",
            "tasks, 90% deep (cursor)": f"/tasks?limit=50&cursor={deep[0]}",
            "tasks, state=SUCCEEDED": "/tasks?limit=50&state=SUCCEEDED",
            "tasks, state=QUEUED,PENDING_RESOURCES": "/tasks?limit=50&state=QUEUED,PENDING_RESOURCES",
            "tasks, one user's": "/tasks?limit=50&user=u07",
            "queue, first page": "/queue?limit=50",
            "queue, 90% deep (cursor)": f"/queue?limit=50&cursor={deep_queue}" if deep_queue else "/queue?limit=50",
            "users": "/users",
        }
        for name, path in cases.items():
            xs = await _timed(c, path, n)
            results[name] = (_pct(xs, 0.5), _pct(xs, 0.99))

    # GET /tasks/{id} while 8 admin clients list deep pages back to back, from their own
    # process (sharing this one's event loop would time the client's queue, not the server).
    listers = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_scale", "--listers", url, ",".join(deep)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    await asyncio.sleep(1.0)
    async with httpx.AsyncClient(base_url=url + "/api/v2", headers=headers, timeout=60) as c:
        xs = await _timed(c, f"/tasks/{some_id}", n)
    listers.send_signal(signal.SIGINT)
    out, _ = listers.communicate(timeout=30)
    if listers.returncode != 0:
        raise Failed(f"the listers failed: {out[-500:]}")
    results["GET /tasks/{id} with 8 listers"] = (_pct(xs, 0.5), _pct(xs, 0.99))
    rate, dropped = out.split()
    DROPPED.extend(["a lister's request"] * int(dropped))
    print(f"(the 8 listers made {rate} admin list requests/s meanwhile; {dropped} of theirs got no answer)")
    return results


def listers(url: str, cursors: list[str]) -> None:
    """8 admin clients listing deep pages back to back until SIGINT; prints requests/s."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    count, dropped = [0], [0]

    async def one(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=url + "/api/v2", headers=headers, timeout=60) as c:
            while True:
                try:
                    r = await c.get("/tasks", params={"limit": 50, "cursor": rng.choice(cursors)})
                except httpx.TransportError:  # no answer ("Server disconnected ..."): counted
                    dropped[0] += 1
                    continue
                if r.status_code != 200:
                    raise Failed(f"lister: {r.status_code}")
                count[0] += 1

    async def run() -> None:
        await asyncio.gather(*(one(k) for k in range(8)))

    started = time.perf_counter()
    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    print(f"{count[0] / (time.perf_counter() - started):.0f} {dropped[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300, help="timed requests per case")
    ap.add_argument("--no-reactor", action="store_true", help="skip the reactor-turn part (bench_turn)")
    ap.add_argument("--serve", nargs=2, metavar=("DIR", "PORT"), help=argparse.SUPPRESS)
    ap.add_argument("--listers", nargs=2, metavar=("URL", "CURSORS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.listers:
        listers(args.listers[0], args.listers[1].split(","))
        return
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), group_commit=True)
        return
    data = Path(tempfile.mkdtemp(prefix="argus-scale-"))
    db = data / "argus.sqlite3"
    started = time.perf_counter()
    build_log(db, args.tasks)
    print(f"log: {args.tasks} tasks written in {time.perf_counter() - started:.1f} s")
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_scale", "--serve", str(data), str(port)],
                            cwd=REPO_ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise Failed("the server did not start")
        rss_start = _rss_mib(proc.pid)
        results = asyncio.run(measure(url, db, args.tasks, args.requests))
        rss = _rss_mib(proc.pid)
    except Failed as exc:
        print(f"FAILED: {exc}")
        sys.exit(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        import shutil

        shutil.rmtree(data, ignore_errors=True)
    print(f"\n{'case':42} {'p50 ms':>8} {'p99 ms':>8}   (load average {os.getloadavg()[0]:.2f})")
    for name, (p50, p99) in results.items():
        print(f"{name:42} {p50:8.2f} {p99:8.2f}")
    print(f"server RSS: {rss_start:.0f} MiB when ready, {rss:.0f} MiB after the reads")
    lists = [p99 for name, (_, p99) in results.items() if "/tasks/{id}" not in name]
    contended = results["GET /tasks/{id} with 8 listers"][1]
    verdict = Verdict()
    verdict.at_most("every list p99", max(lists), 50)
    verdict.at_most("GET /tasks/{id} p99 with 8 listers", contended, 10)
    verdict.at_most("server RSS growth over the reads", rss - rss_start, 20, "MiB")
    verdict.check("no request dropped", not DROPPED, f"{len(DROPPED)} got no answer" + (
        f", e.g. {DROPPED[0]}" if DROPPED else ""))
    if not args.no_reactor:  # the reactor's turn at the same scale (tests/bench/bench_turn.py)
        from tests.bench import bench_turn

        print("\nreactor:")
        sys.argv = [sys.argv[0], "--waiting", "10000", "--running", "50", "--latency-ms", "5"]
        try:
            bench_turn.main()
        except SystemExit as exc:  # its own verdict said NOT MET (or it failed)
            verdict.check("the reactor's targets", exc.code in (0, None), "see its verdict above")
    verdict.finish()


if __name__ == "__main__":
    main()
