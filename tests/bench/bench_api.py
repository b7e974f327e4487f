"""API benchmark: durable submissions/s and SSE delivery latency. Prints numbers.

    python -m tests.bench.bench_api [--submissions 3000] [--clients 50] [--sse-clients 500]

The server runs as a real uvicorn process on 127.0.0.1 (its own core), with
``synchronous=FULL`` (every acknowledged submission survived an fsync). It is run twice:
with group commit (concurrent submissions share one transaction) and without.
SSE: N clients hold ``/api/v2/events`` open as admin; tasks are submitted at a steady
rate; latency = client receive time − the event's ``recorded_at`` (same host clock).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ADMIN = "bench-admin-token-0123456789abcdef0123"
SPEC = {
    "kind": "advanced", "workload": "ppo", "nnodes": 1, "n_gpus_per_node": 1,
    "command": "python3 -m argus.examples.toy_trainer data.train_files=$HOME/datasets/t.jsonl "
               "trainer.nnodes=1 trainer.n_gpus_per_node=1",
}
_RECORDED = re.compile(rb'"recorded_at":([0-9.]+)')


def serve(data_dir: str, port: int, group_commit: bool) -> None:
    """The server process."""
    import uvicorn

    from argus.api.app import create_app
    from argus.config import ArgusConfig

    cfg = ArgusConfig(shared_root=str(Path(data_dir) / "shared"))
    cfg.v2.sqlite.db_path = str(Path(data_dir) / "argus.sqlite3")
    cfg.v2.sqlite.synchronous = "FULL"
    app = create_app(cfg, admin_token=ADMIN, group_commit=group_commit)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=1)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, group_commit: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="argus-bench-")
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.bench_api", "--serve", self.dir, str(self.port),
             "1" if group_commit else "0"], start_new_session=True)

    async def wait(self) -> None:
        async with httpx.AsyncClient() as c:
            for _ in range(300):
                try:
                    if (await c.get(f"{self.url}/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError("server did not start")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


async def _user_token(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        await c.post("/api/v2/users", json={"user_id": "bench"})
        r = await c.post("/api/v2/users/bench/tokens", json={"label": "bench"})
        return str(r.json()["token"])


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def _cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _submit_share(url: str, token: str, n: int, clients: int, start_at: float) -> tuple[list[float], int, float, float]:
    """One client process: ``clients`` concurrent workers sharing ``n`` submissions."""

    async def run() -> tuple[list[float], int, float, float]:
        lat: list[float] = []
        errors = 0
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60,
                                     headers={"Authorization": f"Bearer {token}"}) as c:
            await asyncio.gather(*(c.get("/api/v2/me") for _ in range(clients)))  # connect
            await asyncio.sleep(max(0.0, start_at - time.time()))
            counter = iter(range(n))

            async def worker() -> None:
                nonlocal errors
                for _ in counter:
                    t0 = time.perf_counter()
                    r = await c.post("/api/v2/tasks", json=SPEC)
                    lat.append(time.perf_counter() - t0)
                    errors += r.status_code != 201

            t0 = time.time()
            await asyncio.gather(*(worker() for _ in range(clients)))
            return lat, errors, t0, time.time()

    return asyncio.run(run())


async def bench_submit(group_commit: bool, total: int, clients: int, procs: int) -> None:
    """``clients`` concurrent httpx clients spread over ``procs`` processes (one Python
    process cannot drive more than a few hundred requests/s through httpx)."""
    from concurrent.futures import ProcessPoolExecutor

    server = Server(group_commit)
    try:
        await server.wait()
        token = await _user_token(server.url)
        cpu0 = _cpu_s(server.proc.pid)
        loop = asyncio.get_running_loop()
        start_at = time.time() + 2.0
        with ProcessPoolExecutor(procs) as pool:
            futs = [loop.run_in_executor(pool, _submit_share, server.url, token, total // procs,
                                         clients // procs, start_at) for _ in range(procs)]
            results = await asyncio.gather(*futs)
        cpu = _cpu_s(server.proc.pid) - cpu0
        latencies = [x for r in results for x in r[0]]
        errors = sum(r[1] for r in results)
        elapsed = max(r[3] for r in results) - min(r[2] for r in results)
        done = len(latencies)
        async with httpx.AsyncClient(base_url=server.url) as c:
            metrics = (await c.get("/metrics")).text
        tx = re.search(r"^argus_append_seconds_count ([0-9.e+]+)", metrics, re.M)
        mode = "group commit" if group_commit else "one transaction per request"
        print(f"submit [{mode}, synchronous=FULL, {clients} clients in {procs} processes]: "
              f"{done / elapsed:,.0f} submissions/s; latency p50 {_pct(latencies, 0.5):.1f} ms, "
              f"p99 {_pct(latencies, 0.99):.1f} ms; {errors} errors; "
              f"{float(tx.group(1)) if tx else float('nan'):.0f} transactions; server CPU "
              f"{cpu / done * 1000:.2f} ms/submission (= {done / cpu:,.0f}/s per core)")
    finally:
        server.stop()


def _sse_share(url: str, n_clients: int, expect: int, deadline: float) -> list[float]:
    """One listener process: ``n_clients`` SSE connections; returns delivery latencies."""

    async def run() -> list[float]:
        lat: list[float] = []
        limits = httpx.Limits(max_connections=n_clients, max_keepalive_connections=n_clients)
        async with httpx.AsyncClient(base_url=url, limits=limits,
                                     timeout=httpx.Timeout(60, read=None)) as c:

            async def listener() -> None:
                got = 0
                async with c.stream("GET", "/api/v2/events",
                                    headers={"Authorization": f"Bearer {ADMIN}"}) as r:
                    async for chunk in r.aiter_raw():
                        now = time.time()
                        for m in _RECORDED.finditer(chunk):
                            lat.append(now - float(m.group(1)))
                            got += 1
                        if got >= expect:
                            return

            tasks = [asyncio.create_task(listener()) for _ in range(n_clients)]
            await asyncio.wait(tasks, timeout=max(1.0, deadline - time.time()))
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return lat

    return asyncio.run(run())


async def bench_sse(n_clients: int, n_events: int, rate: float, procs: int) -> None:
    from concurrent.futures import ProcessPoolExecutor

    server = Server(True)
    try:
        await server.wait()
        token = await _user_token(server.url)
        loop = asyncio.get_running_loop()
        deadline = time.time() + 60 + n_events / rate
        with ProcessPoolExecutor(procs) as pool:
            futs = [loop.run_in_executor(pool, _sse_share, server.url, n_clients // procs,
                                         n_events, deadline) for _ in range(procs)]
            async with httpx.AsyncClient(base_url=server.url, timeout=30,
                                         headers={"Authorization": f"Bearer {token}"}) as p:
                connected = 0.0
                while connected < n_clients and time.time() < deadline:
                    await asyncio.sleep(0.2)
                    text = (await p.get("/metrics")).text
                    m = re.search(r"^argus_sse_clients ([0-9.]+)", text, re.M)
                    connected = float(m.group(1)) if m else 0.0
                await asyncio.sleep(1.0)
                for _ in range(n_events):
                    await p.post("/api/v2/tasks", json=SPEC)
                    await asyncio.sleep(1 / rate)
            lat = [x for r in await asyncio.gather(*futs) for x in r]
        print(f"sse [{connected:.0f} clients in {procs} processes, {n_events} events at {rate:g}/s]: "
              f"delivered {len(lat)}/{n_clients * n_events}; append->client latency p50 "
              f"{_pct(lat, 0.5):.1f} ms, p99 {_pct(lat, 0.99):.1f} ms, max {max(lat) * 1000:.1f} ms")
    finally:
        server.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--submissions", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--procs", type=int, default=2, help="client processes")
    ap.add_argument("--sse-clients", type=int, default=500)
    ap.add_argument("--sse-events", type=int, default=50)
    ap.add_argument("--sse-rate", type=float, default=10.0)
    ap.add_argument("--only", choices=["submit", "sse"], default=None)
    a = ap.parse_args()
    print(f"host: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    if a.only in (None, "submit"):
        asyncio.run(bench_submit(True, a.submissions, a.clients, a.procs))
        asyncio.run(bench_submit(False, a.submissions, a.clients, a.procs))
    if a.only in (None, "sse"):
        asyncio.run(bench_sse(a.sse_clients, a.sse_events, a.sse_rate, a.procs))
    _ = statistics


if __name__ == "__main__":
    main()
