"""A job that prints far more than its output budget, on the real ``argus up`` stack: what
it leaves on disk, and how another user's reads fare meanwhile. Prints numbers; not a
timed test (issue 54, "bounded job output").

    python -m tests.bench.bench_chatty_job [--gib 5] [--budget 256MiB] [--poll-s 0.05]

The stack: ``argus up --gpus 2`` as a subprocess (tests/bench/bench_local_stack.py's
``start_up``: its own process group, a fresh data dir in a temp dir, a free port), with the
admin allowing one more module, ``argus_bench_chatty`` (``v2.taskspec.allowed_modules``).
Two users, alice and bob, and their tokens, made with the admin token.

- alice and bob each put ``code/argus_bench_chatty.py`` in their home: a module that
  writes N bytes to stdout (lines of about 100 bytes, in 1 MiB blocks) as fast as it can,
  then one line saying so.
- alice runs it once printing 4 KiB (her own task to read); the bench waits for it to
  end, so that it writes nothing during the measurement.
- ``du -sb`` before: the shared root (every user's home and job folders), Ray's temp dir
  (both nodes' sessions: the job-driver logs, ``worker-*.out``, ``raylet.out``, ...; the
  stack's guardian names it) and the rest of the data dir (the event log, the watchdogs'
  logs).
- bob submits an advanced task, ``python3 -m argus_bench_chatty N`` on 1 logical GPU,
  with ``output_budget``.
- Meanwhile alice polls ``GET /api/v2/tasks`` and ``GET /api/v2/tasks/{her task}`` in a
  loop (``--poll-s`` between rounds), each request timed on its own; and the bench samples
  the ``du`` of the three every ``--du-every-s`` for the peak.
- When bob's task is terminal, 3 s for Ray's log monitor to flush, then ``du`` again; the
  task's ``AttemptOutputTruncated`` events from its timeline.

Targets: bob's task SUCCEEDED with its whole count recorded (a final
``AttemptOutputTruncated`` whose ``total_bytes`` is at least what was asked); the growth of
the three after the job at most ``1.25 x budget + 64 MiB``; its peak while running at most
``1.5 x budget + 64 MiB`` (docs/runs.md: the budget plus an eighth while it runs, plus a
quarter while the tail is folded in, plus the driver's lines; the 64 MiB is Ray's and
Argus's own logs growing meanwhile); alice's p99 of each read at most 100 ms. A miss exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import msgspec

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.taskspec.sizes import format_bytes, parse_bytes  # noqa: E402
from tests.bench.bench_concurrency import pct, stack_marker, stop_stack  # noqa: E402
from tests.bench.bench_local_stack import ARGUS_TERMINAL, start_up  # noqa: E402
from tests.bench.verdict import Verdict  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
MODULE = "argus_bench_chatty"
GPUS = 2  # alice's task and bob's, each on one logical GPU
P99_LIMIT_MS = 100.0
# The module the users run: N bytes of 100-byte lines, in blocks of 1 MiB (each block's
# first line numbered), then one line saying it is done.
CHATTY = '''"""Writes N bytes of 100-byte lines to stdout as fast as it can (bench_chatty_job)."""
import sys

n = int(sys.argv[1])
body = (b"x" * 99 + b"\\n") * 10486
out = sys.stdout.buffer
i, left = 0, n
while left > 0:
    block = (b"chatty block %09d " % i + body)[:min(len(body), left)]
    out.write(block)
    left -= len(block)
    i += 1
out.write(b"\\nchatty: done, %d bytes\\n" % n)
out.flush()
'''


class Sizes(msgspec.Struct, kw_only=True, frozen=True):
    """``du -sb`` of the three places, at one moment."""

    at: float
    shared: int  # the shared root
    ray: int  # Ray's temp dir (every node's session logs)
    rest: int  # the data dir but the shared root: the event log, the watchdogs' logs

    def minus(self, before: "Sizes") -> "Sizes":
        return Sizes(at=self.at, shared=self.shared - before.shared, ray=self.ray - before.ray,
                     rest=self.rest - before.rest)

    @property
    def total(self) -> int:
        return self.shared + self.ray + self.rest


def du(path: Path) -> int:
    """Bytes under ``path`` as ``du -sb`` counts them (files vanishing meanwhile are skipped)."""
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False)
    return int(done.stdout.split()[0]) if done.stdout.strip() else 0


def sizes(data_dir: Path, ray_tmp: Path) -> Sizes:
    shared = du(data_dir / "shared")
    return Sizes(at=time.time(), shared=shared, ray=du(ray_tmp), rest=du(data_dir) - shared)


class Reads(msgspec.Struct, kw_only=True):
    """alice's timed reads: ms per request, and the failures (one line each)."""

    list_ms: list[float] = []
    get_ms: list[float] = []
    errors: list[str] = []


def alice_reads(c: httpx.Client, task_id: str, poll_s: float, stop: threading.Event, reads: Reads) -> None:
    """GET /tasks and GET /tasks/{id}, each timed, until ``stop``."""
    while not stop.is_set():
        for path, into in (("/tasks", reads.list_ms), (f"/tasks/{task_id}", reads.get_ms)):
            t0 = time.perf_counter()
            try:
                c.get(path).raise_for_status()
            except Exception as exc:  # noqa: BLE001 - counted: a failed read is a finding
                reads.errors.append(f"GET {path}: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            into.append((time.perf_counter() - t0) * 1000)
        stop.wait(poll_s)


def du_sampler(data_dir: Path, ray_tmp: Path, every_s: float, stop: threading.Event, into: list[Sizes]) -> None:
    while not stop.wait(every_s):
        into.append(sizes(data_dir, ray_tmp))


def make_user(admin: httpx.Client, url: str, name: str) -> httpx.Client:
    admin.post("/users", json={"user_id": name}).raise_for_status()
    token = admin.post(f"/users/{name}/tokens", json={"label": "bench"}).raise_for_status().json()["token"]
    return httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"})


def wait_terminal(c: httpx.Client, task_id: str, deadline_s: float) -> dict:
    deadline = time.monotonic() + deadline_s
    while True:
        d = c.get(f"/tasks/{task_id}").raise_for_status().json()
        if d["state"] in ARGUS_TERMINAL or time.monotonic() > deadline:
            return d
        time.sleep(1.0)


def chatty_spec(n: int, budget: int) -> str:
    return ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 1\nmax_attempts: 1\n"
            f"output_budget: {budget}\nname: chatty bench\n"
            f"command: PYTHONUNBUFFERED=1 python3 -m {MODULE} {n}\n")


class Result(msgspec.Struct, kw_only=True):
    asked: int
    budget: int
    before: Sizes
    after: Sizes
    samples: list[Sizes]
    idle: Reads
    busy: Reads
    bob: dict
    truncated: list[dict]  # the AttemptOutputTruncated events' data, with recorded_at
    job_s: float  # bob's submission -> terminal


class Phase(msgspec.Struct, kw_only=True):
    """What the measured phase needs: the two users' clients, alice's task, the places."""

    alice: httpx.Client
    bob: httpx.Client
    mine: str  # alice's task, the one she reads
    data_dir: Path
    ray_tmp: Path


def with_threads(threads: list[threading.Thread], stop: threading.Event, body):  # type: ignore[no-untyped-def]
    """``body()`` with ``threads`` running; they are told to stop and joined after it."""
    for th in threads:
        th.start()
    try:
        return body()
    finally:
        stop.set()
        for th in threads:
            th.join()


def measure(ph: Phase, n: int, budget: int, poll_s: float, du_every_s: float, deadline_s: float) -> Result:
    """alice's idle baseline, ``du`` before, bob's chatty task with alice reading and the
    ``du`` sampler running, ``du`` after, and the task's truncation events."""
    idle, stop = Reads(), threading.Event()
    with_threads([threading.Thread(target=alice_reads, args=(ph.alice, ph.mine, poll_s, stop, idle))], stop,
                 lambda: time.sleep(10))  # alice's reads with nothing running: the baseline
    before = sizes(ph.data_dir, ph.ray_tmp)
    print(f"  before: shared {before.shared:,} B, Ray temp {before.ray:,} B, rest {before.rest:,} B", flush=True)
    busy, samples, stop = Reads(), [before], threading.Event()
    threads = [threading.Thread(target=alice_reads, args=(ph.alice, ph.mine, poll_s, stop, busy)),
               threading.Thread(target=du_sampler, args=(ph.data_dir, ph.ray_tmp, du_every_s, stop, samples))]
    t0 = time.monotonic()

    def bobs_task() -> tuple[str, dict]:
        theirs = ph.bob.post("/tasks", content=chatty_spec(n, budget), headers={"Content-Type": "application/yaml"}
                             ).raise_for_status().json()["task_id"]
        print(f"  bob's task {theirs}: {format_bytes(n)} to print, budget {format_bytes(budget)}", flush=True)
        return theirs, wait_terminal(ph.bob, theirs, deadline_s)

    theirs, d = with_threads(threads, stop, bobs_task)
    job_s = time.monotonic() - t0
    print(f"  bob's task {d['state']} after {job_s:.0f}s", flush=True)
    time.sleep(3)  # Ray's log monitor and the workers' redirection flush what they hold
    after = sizes(ph.data_dir, ph.ray_tmp)
    timeline = ph.bob.get(f"/tasks/{theirs}/timeline").raise_for_status().json()
    truncated = [{**e["data"], "recorded_at": e["recorded_at"]} for e in timeline
                 if e["type"] == "AttemptOutputTruncated"]
    return Result(asked=n, budget=budget, before=before, after=after, samples=samples + [after],
                  idle=idle, busy=busy, bob=d, truncated=truncated, job_s=job_s)


def run(work: Path, n: int, budget: int, poll_s: float, du_every_s: float, sandbox: str,
        deadline_s: float) -> Result:
    """The stack, the users, alice's own task (waited for), then :func:`measure`; the
    stack is stopped by process group whatever happens."""
    modules = f"[verl.trainer., argus.examples., {MODULE}]"
    up = start_up(work, GPUS, {"ARGUS_V2__TASKSPEC__ALLOWED_MODULES": modules,
                               "ARGUS_V2__SANDBOX__MODE": sandbox})
    marker = ("", "")
    try:
        marker = stack_marker(up.proc.pid)
        admin_token = (up.data_dir / "admin.token").read_text().strip()
        with httpx.Client(base_url=up.url, timeout=60, headers={"Authorization": f"Bearer {admin_token}"}) as admin:
            alice, bob = make_user(admin, up.url, "alice"), make_user(admin, up.url, "bob")
        with alice, bob:
            for user in (alice, bob):
                user.put(f"/files/code/{MODULE}.py", content=CHATTY.encode()).raise_for_status()
            mine = alice.post("/tasks", content=chatty_spec(4096, budget), headers={"Content-Type": "application/yaml"}
                              ).raise_for_status().json()["task_id"]
            print(f"  alice's task {mine} ...", flush=True)
            print(f"  alice's task {wait_terminal(alice, mine, 300)['state']}", flush=True)
            time.sleep(3)  # her job's last lines reach Ray's logs
            phase = Phase(alice=alice, bob=bob, mine=mine, data_dir=up.data_dir, ray_tmp=Path(marker[1]))
            return measure(phase, n, budget, poll_s, du_every_s, deadline_s)
    finally:
        stop_stack(up, marker)


def _lat(values: list[float]) -> str:
    return (f"p50 {pct(values, 0.5):6.1f}  p95 {pct(values, 0.95):6.1f}  p99 {pct(values, 0.99):6.1f}  "
            f"max {max(values, default=float('nan')):6.1f}  (n={len(values)})")


def report(r: Result, load: tuple[float, float, float]) -> bool:
    grew = r.after.minus(r.before)
    peak = max((s.minus(r.before) for s in r.samples), key=lambda s: s.total)
    final = next((e for e in r.truncated if e.get("final")), None)
    printed = final["total_bytes"] if final else 0
    print(f"\n== a job printing {format_bytes(r.asked)} ({r.asked:,} B) with a budget of "
          f"{format_bytes(r.budget)} ({r.budget:,} B); load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"bob's task: {r.bob['state']} in {r.job_s:.0f}s (submit -> terminal)"
          f"{'' if r.bob['state'] == 'SUCCEEDED' else ': ' + str(r.bob.get('error_summary', ''))[:300]}")
    print("AttemptOutputTruncated events (final, total, kept, dropped, budget; s after the first):")
    for e in r.truncated:
        print(f"  final={e.get('final')} total={e['total_bytes']:,} kept={e['kept_bytes']:,} "
              f"dropped={e['dropped_bytes']:,} budget={e['budget_bytes']:,} stopped={e.get('stopped')} "
              f"t+{e['recorded_at'] - r.truncated[0]['recorded_at']:.1f}s")
    print(f"\ndisk (du -sb), growth over the run{'':14}after the job     peak sampled (t+{peak.at - r.before.at:.0f}s)")
    for label, attr in (("shared root (driver.log)", "shared"), ("Ray temp dir (all logs)", "ray"),
                        ("rest of the data dir", "rest"), ("total", "total")):
        a, p = getattr(grew, attr), getattr(peak, attr)
        print(f"  {label:<36}{a:>16,} B {a / r.budget:6.3f} x budget  {p:>14,} B {p / r.budget:6.3f} x budget")
    print(f"  ({len(r.samples)} samples)")
    print("\nalice's reads (ms)")
    for label, idle, busy in (("GET /tasks", r.idle.list_ms, r.busy.list_ms),
                              ("GET /tasks/{id}", r.idle.get_ms, r.busy.get_ms)):
        print(f"  {label:<16} idle  {_lat(idle)}")
        print(f"  {'':<16} busy  {_lat(busy)}")
    errors = r.idle.errors + r.busy.errors
    print(f"  errors: {len(errors)}")
    for line in sorted(set(errors))[:5]:
        print(f"    {errors.count(line)}x {line}")
    print(f"\nfigures: printed={printed} budget={r.budget} shared_growth={grew.shared} ray_growth={grew.ray} "
          f"rest_growth={grew.rest} growth_over_budget={grew.total / r.budget:.3f} "
          f"peak_over_budget={peak.total / r.budget:.3f} list_p99_ms={pct(r.busy.list_ms, 0.99):.1f} "
          f"get_p99_ms={pct(r.busy.get_ms, 0.99):.1f} job_s={r.job_s:.0f}")
    return judge(r, grew, peak, final, errors)


def judge(r: Result, grew: Sizes, peak: Sizes, final: dict | None, errors: list[str]) -> bool:
    """The targets, MET or NOT MET: whether all were met (printed either way)."""
    printed = final["total_bytes"] if final else 0
    v = Verdict()
    v.check("bob's task SUCCEEDED", r.bob["state"] == "SUCCEEDED", r.bob["state"])
    v.check("its whole count recorded (final AttemptOutputTruncated, total >= asked)",
            final is not None and printed >= r.asked, f"{printed:,} B of {r.asked:,}")
    bound = 1.25 * r.budget + 64 * MiB
    v.check(f"growth after <= 1.25 x budget + 64 MiB ({bound:,.0f} B)", grew.total <= bound, f"{grew.total:,} B")
    peak_bound = 1.5 * r.budget + 64 * MiB
    v.check(f"peak growth <= 1.5 x budget + 64 MiB ({peak_bound:,.0f} B)", peak.total <= peak_bound,
            f"{peak.total:,} B")
    v.at_most("alice's GET /tasks p99 meanwhile", pct(r.busy.list_ms, 0.99), P99_LIMIT_MS)
    v.at_most("alice's GET /tasks/{id} p99 meanwhile", pct(r.busy.get_ms, 0.99), P99_LIMIT_MS)
    v.check("no failed reads", not errors, f"{len(errors)}")
    for line in v.lines:
        print(f"verdict: {line}")
    if v.missed:
        print(f"NOT MET: {'; '.join(v.missed)}")
    return not v.missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=5.0, help="GiB bob's job prints (default 5)")
    parser.add_argument("--budget", default="256MiB", help="its output_budget (default 256MiB; at least 64KiB)")
    parser.add_argument("--poll-s", type=float, default=0.05, help="alice's pause between rounds (default 0.05)")
    parser.add_argument("--du-every-s", type=float, default=5.0, help="du samples for the peak (default 5)")
    parser.add_argument("--deadline-s", type=float, default=1800.0, help="bob's task's limit (default 1800)")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "landlock", "bwrap", "none"],
                        help="v2.sandbox.mode (as bench_concurrency.py's)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs) for a look")
    args = parser.parse_args()
    budget = parse_bytes(args.budget)
    if budget < 64 * 1024:
        parser.error("--budget: at least 64KiB (the spec's minimum)")
    n = int(args.gib * GiB)
    work = Path(tempfile.mkdtemp(prefix="argus-bench-chatty-", dir="/tmp"))
    load = os.getloadavg()
    started = time.monotonic()
    try:
        print(f"argus up --gpus {GPUS}; bob prints {format_bytes(n)} with a budget of {format_bytes(budget)} "
              f"(load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}) ...", flush=True)
        result = run(work, n, budget, args.poll_s, args.du_every_s, args.sandbox, args.deadline_s)
    finally:
        print(f"\ntotal bench time {time.monotonic() - started:.1f}s", flush=True)
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not report(result, load):
        sys.exit(1)  # a target missed: the bench fails


if __name__ == "__main__":
    main()
