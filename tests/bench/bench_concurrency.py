"""How many running tasks one head holds: K tiny 1-GPU tasks running at once through
``argus up --gpus K``. Prints numbers and a verdict; not a timed test.

    python -m tests.bench.bench_concurrency [--tasks 100] [--hold-s 0 (auto)] [--min-free-gib 4]

Ray's job layer has known limits (a job supervisor actor per job, ~85 MB each; its Jobs API
failing past ~30 running jobs in some versions), so this measures them where Argus meets
them: ``argus up`` (bench_local_stack's helpers) with ``max_running_tasks`` raised to K
(``ARGUS_V2__SCHEDULER__MAX_RUNNING_TASKS``), K advanced tasks, each the toy trainer on 1
logical GPU with ``trainer.init_sleep_s`` = the hold (its TaskRunner sleeps before it
reserves its GPU and does one step), so all K run at once. While they run:

- memory: PSS (and RSS) of every process of the stack (``argus.guardian.marked_pids``: the
  stack's marker in the environment, or a file open under its Ray temp dir), by kind: the
  ``argus up`` process (API + reactor), the Ray head's services (GCS, dashboard with the
  job manager), raylets and agents, job supervisors, the jobs' drivers, Ray workers;
- how many run: Argus (GET /tasks, state RUNNING) and Ray (``list_jobs``, RUNNING), and
  how long Ray's ``list_jobs`` takes (the Jobs API under load);
- API latency: GET /tasks (one page of 500) and GET /tasks/{id}, p50/p95, idle and loaded;
- the reactor: per task, submit -> admitted (TaskDecided), admitted -> Ray job submitted,
  submitted -> seen RUNNING, and Ray's end_time -> the terminal event;
- failures: tasks not SUCCEEDED (with evidence), HTTP and Jobs API errors.

Guard: if the host's MemAvailable falls below ``--min-free-gib`` the run stops there (the
host is shared) and says at how many running tasks. Every process is stopped by process
group in ``finally`` (whatever of the stack is left: by pid, from its marker).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.guardian import marked_pids  # noqa: E402
from argus.procs import kill_group  # noqa: E402
from tests.bench.bench_local_stack import (  # noqa: E402
    ARGUS_TERMINAL, RayWatch, UpStack, start_up, task_spec, upload_dataset)
from tests.bench.verdict import Verdict  # noqa: E402

PROBE_S = 1.0  # one API + Jobs API probe a second: the API shares its process with the reactor
MEM_EVERY_S = 5.0  # reading every process's smaps_rollup costs CPU on a 2-core host

# A process's kind from its command line (first match wins); the stack's own process first.
KINDS = [
    ("gcs", re.compile(r"gcs_server")),
    ("dashboard", re.compile(r"dashboard/dashboard\.py|ray-dashboard-|multiprocessing\.(forkserver|resource_tracker)")),
    ("raylet", re.compile(r"/raylet ")),
    ("agents", re.compile(r"dashboard/agent\.py|runtime_env/agent|log_monitor|monitor\.py|ray\.util\.client")),
    ("supervisors", re.compile(r"ray::JobSupervisor")),
    # Ray's supervisor watches each driver with a shell loop (``while kill -s 0 …; sleep 1``)
    ("drivers", re.compile(r"argus\.driver|toy_trainer|^bash -c|^/bin/bash|^/bin/sh -c while kill|^sleep 1$")),
    ("workers", re.compile(r"^ray::")),
    ("watchdogs", re.compile(r"argus node |argus\.nodepool|argus\.guardian|ray\.scripts|bin/ray start")),
]


class MemSample(msgspec.Struct, kw_only=True):
    at: float
    pss_mb: dict[str, float]  # by kind
    count: dict[str, int]  # processes by kind
    rss_mb: float  # all kinds (RSS double-counts shared pages; PSS does not)
    available_mb: float  # the host's MemAvailable
    others: list[str] = []  # command lines of kind "other" (to name them)

    @property
    def total_pss_mb(self) -> float:
        return sum(self.pss_mb.values())


class Probe(msgspec.Struct, kw_only=True):
    at: float
    argus_running: int = -1
    ray_running: int = -1
    list_ms: float | None = None  # GET /tasks?limit=500
    get_ms: float | None = None  # GET /tasks/{id}
    ray_list_ms: float | None = None  # JobSubmissionClient.list_jobs
    errors: list[str] = []


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _kb(text: str, key: str) -> int:
    m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def stack_marker(up_pid: int) -> tuple[str, str]:
    """The stack's marker and Ray temp dir, from the command line of its guardian."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _read(f"/proc/{entry.name}/cmdline").split("\0")
        if "argus.guardian" in argv and argv[argv.index("--parent") + 1] == str(up_pid):
            return argv[argv.index("--marker") + 1], argv[argv.index("--temp-dir") + 1]
    raise RuntimeError(f"no guardian of argus up (pid {up_pid}) found")


def sample_memory(up_pid: int, marker: str, temp_dir: str) -> MemSample:
    pss: dict[str, float] = {}
    count: dict[str, int] = {}
    rss, others = 0.0, []
    for pid in sorted({up_pid, *marked_pids(marker, temp_dir)}):
        cmd = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
        if not cmd:
            continue  # gone
        kind = "argus up" if pid == up_pid else next((k for k, rx in KINDS if rx.search(cmd)), "other")
        if kind == "other":
            others.append(cmd[:100])
        rollup = _read(f"/proc/{pid}/smaps_rollup")
        pss[kind] = pss.get(kind, 0.0) + _kb(rollup, "Pss") / 1024
        count[kind] = count.get(kind, 0) + 1
        rss += _kb(rollup, "Rss") / 1024
    available = _kb(_read("/proc/meminfo"), "MemAvailable") / 1024
    return MemSample(at=time.time(), pss_mb=pss, count=count, rss_mb=rss, available_mb=available,
                     others=others)


def timed(fn, errors: list[str], what: str):  # type: ignore[no-untyped-def]
    """``fn()`` and its wall time in ms; an exception is one line in ``errors``."""
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - counted: failures are a finding here
        errors.append(f"{what}: {type(exc).__name__}: {str(exc)[:160]}")
        return None, None
    return out, (time.perf_counter() - t0) * 1000


def probe(c: httpx.Client, watch: RayWatch, ids: list[str]) -> Probe:
    p = Probe(at=time.time(), errors=[])
    page, p.list_ms = timed(lambda: c.get("/tasks", params={"limit": 500}).raise_for_status().json(),
                            p.errors, "GET /tasks")
    if page is not None:
        p.argus_running = sum(t["state"] == "RUNNING" for t in page["items"] if t["task_id"] in ids)
    if ids:
        _, p.get_ms = timed(lambda: c.get(f"/tasks/{random.choice(ids)}").raise_for_status(), p.errors,
                            "GET /tasks/{id}")
    done, p.ray_list_ms = timed(watch.poll, p.errors, "ray list_jobs")
    if p.ray_list_ms is not None:
        p.ray_running = sum(d.status.value == "RUNNING" for d in watch.details.values())
    return p


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Run(msgspec.Struct, kw_only=True):
    """What one run saw."""

    tasks: int
    hold_s: float
    hold_in: str  # "driver" or "init" (the TaskRunner): toy_trainer's trainer.<hold_in>_sleep_s
    idle_mem: MemSample
    idle_probes: list[Probe]
    mems: list[MemSample] = []
    probes: list[Probe] = []
    details: dict[str, dict] = {}
    ray_end: dict[str, float] = {}  # task id -> Ray's end_time of its last attempt
    submit_s: float = 0.0
    stopped: str = ""  # why the load phase ended early ("": every task terminal)


def load_phase(up: UpStack, run: Run, c: httpx.Client, watch: RayWatch, marker: tuple[str, str],
               work: Path, deadline_s: float, min_free_mb: float) -> None:
    """Submit ``run.tasks`` tasks and watch them until all are terminal, the deadline, or
    the memory guard; fills ``run``."""
    spec = task_spec(1, f"trainer.{run.hold_in}_sleep_s={run.hold_s:g}")
    t0 = time.time()
    ids = [c.post("/tasks", content=spec, headers={"Content-Type": "application/yaml"})
           .raise_for_status().json()["task_id"] for _ in range(run.tasks)]
    run.submit_s = time.time() - t0
    print(f"  {run.tasks} tasks submitted in {run.submit_s:.2f}s", flush=True)
    deadline, mem_at, said = time.monotonic() + deadline_s, 0.0, 0.0
    while time.monotonic() < deadline:
        p = probe(c, watch, ids)
        run.probes.append(p)
        if time.monotonic() - mem_at >= MEM_EVERY_S:
            mem_at = time.monotonic()
            run.mems.append(sample_memory(up.proc.pid, *marker))
            if run.mems[-1].available_mb < min_free_mb:
                run.stopped = (f"memory guard: host MemAvailable {run.mems[-1].available_mb:.0f} MB < "
                               f"{min_free_mb:.0f} MB with {p.argus_running} running (Argus), "
                               f"{p.ray_running} (Ray)")
                break
        if time.monotonic() - said >= 15:
            said = time.monotonic()
            m = run.mems[-1]
            print(f"  t+{time.time() - t0:5.0f}s running argus={p.argus_running} ray={p.ray_running} "
                  f"stack PSS {m.total_pss_mb:.0f} MB, host free {m.available_mb:.0f} MB, "
                  f"list {p.list_ms or -1:.0f} ms, ray list {p.ray_list_ms or -1:.0f} ms", flush=True)
        if all(d.status.value in ("SUCCEEDED", "FAILED", "STOPPED") for d in watch.details.values()) \
                and len(watch.details) >= run.tasks and p.argus_running == 0:
            page = c.get("/tasks", params={"limit": 500}).json()["items"]
            if sum(t["state"] in ARGUS_TERMINAL for t in page if t["task_id"] in ids) == run.tasks:
                break
        time.sleep(PROBE_S)
    else:
        run.stopped = f"deadline: {deadline_s:.0f}s after the submissions"
    watch.poll()
    for tid in ids:
        d = c.get(f"/tasks/{tid}").json()
        run.details[tid] = d
        sid = ((d.get("attempts") or [{}])[-1]).get("submission_id", "")
        end = getattr(watch.details.get(sid), "end_time", None)
        if end:
            run.ray_end[tid] = end / 1000


def measure(tasks: int, hold_s: float, hold_in: str, work: Path, deadline_s: float, min_free_mb: float,
            sandbox: str) -> Run:
    up = start_up(work, tasks, {"ARGUS_V2__SCHEDULER__MAX_RUNNING_TASKS": str(tasks),
                                "ARGUS_V2__SANDBOX__MODE": sandbox})
    marker = ("", "")
    try:
        marker = stack_marker(up.proc.pid)
        watch = RayWatch(up.dashboard)
        with httpx.Client(base_url=up.url, timeout=60, headers={"Authorization": f"Bearer {up.token}"}) as c:
            upload_dataset(c, work)
            time.sleep(5)  # the stack settles after its start
            idle = [probe(c, watch, []) for _ in range(10)]
            run = Run(tasks=tasks, hold_s=hold_s, hold_in=hold_in, idle_mem=sample_memory(up.proc.pid, *marker), idle_probes=idle)
            load_phase(up, run, c, watch, marker, work, deadline_s, min_free_mb)
        return run
    finally:
        stop_stack(up, marker)


def stop_stack(up: UpStack, marker: tuple[str, str]) -> None:
    """SIGTERM to the stack's group (it stops its Ray nodes), SIGKILL after 60 s; then any
    stray process carrying the stack's marker."""
    kill_group(up.proc, grace_s=60.0)
    left = marked_pids(*marker) if marker[0] else []
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        print(f"  killed {len(left)} process(es) of the stack left after its stop", flush=True)


def _lat(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"p50 {pct(got, 0.5):7.1f}  p95 {pct(got, 0.95):7.1f}  max {max(got, default=float('nan')):7.1f}  (n={len(got)})"


def report_memory(run: Run, peak_running: int) -> float:
    """Idle against the fullest sample, by kind; returns the stack's PSS per running task."""
    full = max(run.mems, key=lambda m: m.total_pss_mb, default=run.idle_mem)
    print(f"\nmemory (PSS MB, processes) idle -> fullest sample (t+{full.at - run.probes[0].at:.0f}s):")
    for kind in sorted(set(run.idle_mem.pss_mb) | set(full.pss_mb), key=lambda k: -full.pss_mb.get(k, 0)):
        print(f"  {kind:<12}{run.idle_mem.pss_mb.get(kind, 0):8.0f} ({run.idle_mem.count.get(kind, 0):3}) -> "
              f"{full.pss_mb.get(kind, 0):8.0f} ({full.count.get(kind, 0):3})")
    print(f"  {'total':<12}{run.idle_mem.total_pss_mb:8.0f}       -> {full.total_pss_mb:8.0f}        "
          f"(RSS sum {run.idle_mem.rss_mb:.0f} -> {full.rss_mb:.0f}; host MemAvailable "
          f"{run.idle_mem.available_mb:.0f} -> {min(m.available_mb for m in run.mems or [full]):.0f} at least)")
    for cmd in sorted(set(full.others)):
        print(f"    other: {full.others.count(cmd)}x {cmd}")
    head = ("argus up", "gcs", "dashboard")
    head_delta = sum(full.pss_mb.get(k, 0) - run.idle_mem.pss_mb.get(k, 0) for k in head)
    per_task = (full.total_pss_mb - run.idle_mem.total_pss_mb) / max(peak_running, 1)
    print(f"  per running task ({peak_running}): {per_task:.0f} MB in all; "
          f"{head_delta / max(peak_running, 1):.1f} MB of it in the head's own services ({', '.join(head)})")
    return per_task


def report_latency(run: Run) -> dict[str, float]:
    loaded = [p for p in run.probes if p.argus_running > 0]
    print("\nlatency (ms)         idle" + " " * 47 + "| while tasks run")
    figures: dict[str, float] = {}
    for label, attr in (("GET /tasks", "list_ms"), ("GET /tasks/{id}", "get_ms"), ("ray list_jobs", "ray_list_ms")):
        idle = [getattr(p, attr) for p in run.idle_probes]
        busy = [getattr(p, attr) for p in loaded]
        figures[attr] = pct([v for v in busy if v is not None], 0.95)
        print(f"  {label:<16}{_lat(idle)} | {_lat(busy)}")
    return figures


def report_reactor(run: Run) -> float:
    """Per task: submit -> admitted -> Ray job submitted -> seen RUNNING; Ray's end -> the
    terminal event. Returns the p95 of the last (s)."""
    stages: dict[str, list[float | None]] = {"admitted": [], "submitted": [], "running": [], "end->terminal": []}
    for tid, d in run.details.items():
        a = (d.get("attempts") or [{}])[0]
        last = (d.get("attempts") or [{}])[-1]
        stages["admitted"].append(a["decided_at"] - d["created_at"] if a.get("decided_at") else None)
        stages["submitted"].append(a["submitted_at"] - a["decided_at"] if a.get("submitted_at") else None)
        stages["running"].append(a["running_seen_at"] - a["submitted_at"]
                                 if a.get("running_seen_at") and a.get("submitted_at") else None)
        terminal = d["state"] in ARGUS_TERMINAL and last.get("ended_at")
        # Negative: the driver's exit report (inotify) ended it before Ray's job did.
        stages["end->terminal"].append(d["updated_at"] - run.ray_end[tid] if terminal and tid in run.ray_end else None)
    print("\nreactor, per task (s)")
    for label, values in stages.items():
        print(f"  {label:<16}{_lat(values)}")
    return pct([v for v in stages["end->terminal"] if v is not None], 0.95)


def report(run: Run) -> None:
    print(f"\n== {run.tasks} tasks, hold {run.hold_s:g}s in the {run.hold_in}, submitted in {run.submit_s:.2f}s"
          f"{'; stopped early: ' + run.stopped if run.stopped else ''}")
    peak_argus = max((p.argus_running for p in run.probes), default=0)
    peak_ray = max((p.ray_running for p in run.probes), default=0)
    all_at = next((p.at - run.probes[0].at for p in run.probes if p.argus_running >= run.tasks), None)
    print(f"running at once: Argus {peak_argus}, Ray {peak_ray}; all {run.tasks} RUNNING in Argus "
          f"{'at t+%.0fs' % all_at if all_at is not None else 'never'}")
    per_task = report_memory(run, peak_argus)
    p95 = report_latency(run)
    end_p95 = report_reactor(run)
    # Ended other than SUCCEEDED: a failure. Not ended when the run stopped (the deadline,
    # the memory guard): unfinished, stopped by the teardown, said apart.
    failed = {tid: d for tid, d in run.details.items()
              if d.get("state") in ARGUS_TERMINAL and d.get("state") != "SUCCEEDED"}
    unfinished = sorted(d.get("state", "?") for d in run.details.values() if d.get("state") not in ARGUS_TERMINAL)
    errors = [e for p in run.probes for e in p.errors]
    print(f"\nfailures: {len(failed)} task(s) ended not SUCCEEDED, {len(errors)} API / Jobs API error(s); "
          f"{len(unfinished)} not ended when the run stopped "
          f"({', '.join(f'{unfinished.count(s)} {s}' for s in sorted(set(unfinished))) or 'none'})")
    for tid, d in list(failed.items())[:5]:
        last = (d.get("attempts") or [{}])[-1]
        print(f"  {tid}: {d.get('state')} {d.get('error_summary', '')} {last.get('evidence', '')}"[:400])
    for e in sorted(set(errors))[:5]:
        print(f"  {errors.count(e)}x {e}")
    print(f"\nfigures: K={run.tasks} peak_running={peak_argus} stack_pss_per_task_mb={per_task:.0f} "
          f"list_p95_ms={p95['list_ms']:.0f} get_p95_ms={p95['get_ms']:.0f} "
          f"ray_list_p95_ms={p95['ray_list_ms']:.0f} end_to_terminal_p95_s={end_p95:.1f}")
    v = Verdict()
    v.check(f"all {run.tasks} RUNNING at once (Argus and Ray)", peak_argus >= run.tasks and peak_ray >= run.tasks,
            f"Argus {peak_argus}, Ray {peak_ray}")
    v.check("every task SUCCEEDED", not failed and not unfinished,
            f"{len(failed)} failed, {len(unfinished)} unfinished; {run.stopped or 'all ended'}")
    v.check("no API or Jobs API errors", not errors, f"{len(errors)}")
    v.at_most("GET /tasks/{id} p95 while running", p95["get_ms"], 250)
    v.at_most("GET /tasks (500) p95 while running", p95["list_ms"], 1000)
    v.at_most("Ray end -> terminal event p95", end_p95, 10, "s")
    v.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="K: tasks running at once (default 100)")
    parser.add_argument("--hold-s", type=float, default=0.0,
                        help="how long each task's trainer sleeps (default: 60 + 2 s per task, so the "
                             "first still runs when the last starts)")
    parser.add_argument("--hold-in", default="driver", choices=["driver", "init"],
                        help="driver: each trainer sleeps in its driver, connected to Ray (a running job "
                             "with the fewest processes); init: in its TaskRunner actor (one more process)")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="load phase limit (default: hold + 180)")
    parser.add_argument("--min-free-gib", type=float, default=4.0,
                        help="stop the run when the host's MemAvailable falls below this (default 4)")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "landlock", "bwrap", "none"],
                        help="v2.sandbox.mode (none: where Argus runs from a checkout its venv does "
                             "not point at, which a confined job may not read)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs) for a look")
    args = parser.parse_args()
    if not 0 < args.tasks <= 500:
        parser.error("--tasks: 1 to 500 (one task list page)")
    hold = args.hold_s or 60.0 + 2.0 * args.tasks
    work = Path(tempfile.mkdtemp(prefix="argus-bench-conc-", dir="/tmp"))
    started = time.monotonic()
    try:
        print(f"argus up --gpus {args.tasks}, max_running_tasks {args.tasks}, {args.tasks} tasks "
              f"holding {hold:g}s ...", flush=True)
        run = measure(args.tasks, hold, args.hold_in, work, args.deadline_s or hold + 180.0, args.min_free_gib * 1024, args.sandbox)
    finally:
        print(f"\ntotal bench time {time.monotonic() - started:.1f}s", flush=True)
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(run)


if __name__ == "__main__":
    main()
