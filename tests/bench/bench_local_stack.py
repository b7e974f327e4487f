"""End to end: N tiny 1-GPU jobs through ``argus up --gpus G`` against the same jobs sent
straight to Ray on a cluster of the same shape. Prints numbers; not a timed test.

    python -m tests.bench.bench_local_stack [--jobs 40] [--gpus 4] [--steps 3]

Argus side: the real ``argus up`` as a subprocess (own process group, fresh data dir, free
port); a user ``bench`` and its token made with the admin token (``<data-dir>/admin.token``),
a dataset uploaded, then N advanced tasks (the example toy trainer, 1 node x 1 GPU,
``max_attempts: 1``) POSTed to ``/api/v2/tasks`` and followed until terminal.
Ray side, afterwards, on a fresh cluster shaped like ``argus up``'s (head with no work
resources; one worker with G logical GPUs, ``argus up``'s CPUs, ``worker_node=100``): the
same expanded command (read back from ``/tasks/{id}/spec``) submitted N times at once with
``JobSubmissionClient.submit_job``, with the driver resources Argus gives its jobs. The
toy trainer reserves its GPU itself (a placement group bundle, as verl does), so the driver
asks for no GPU; ``worker_node=100/G`` per driver lets Ray run at most G at once (N drivers
of 1 CPU would otherwise take every CPU and starve their trainers).

Both sides are measured the same way, by polling Ray's job list every 0.5 s: a job runs
from when it is first seen RUNNING to Ray's ``end_time``. Makespan: first submit -> the
last task terminal (Argus: its terminal event's ``recorded_at``; Ray: ``end_time``).
Utilisation: sum of run times / (G slots x makespan).

Target: Argus makespan <= 1.2x Ray's, with G running at once. Any job that did not succeed
makes the run INVALID (exit 1). Every process is stopped by process group in ``finally``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.cli.serve import local_worker_cpus  # noqa: E402
from argus.config import ArgusConfig  # noqa: E402
from argus.examples.toy_policy import make_example_dataset  # noqa: E402
from argus.procs import free_ports, kill_group  # noqa: E402
from tests.support.ray_cluster import WORKER_NODE_RESOURCE, RayCluster, WorkerNode, _node_ports  # noqa: E402

TARGET_RATIO = 1.2
READY_TIMEOUT_S = 240.0
POLL_S = 0.5  # Ray's job list, both sides
RAY_TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
ARGUS_TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED"}


class Job(msgspec.Struct, kw_only=True):
    name: str  # Argus task id or Ray submission id
    ok: bool = False
    running_at: float | None = None  # first seen RUNNING in Ray
    ended_at: float | None = None  # Ray's end_time
    done_at: float | None = None  # when the side recorded it terminal
    evidence: str = ""

    @property
    def run_s(self) -> float | None:
        return self.ended_at - self.running_at if self.running_at and self.ended_at else None


class Side(msgspec.Struct, kw_only=True):
    name: str
    jobs: list[Job]
    t0: float

    @property
    def makespan(self) -> float:
        return max((j.done_at or time.time()) for j in self.jobs) - self.t0


class RayWatch:
    """Polls a head's job list: when each submission was first seen RUNNING, and its end."""

    def __init__(self, url: str) -> None:
        from ray.job_submission import JobSubmissionClient

        self.client = JobSubmissionClient(url)
        self.running: dict[str, float] = {}
        self.details: dict[str, Any] = {}

    def poll(self) -> None:
        now = time.time()
        for d in self.client.list_jobs():
            sid = str(d.submission_id or d.job_id)
            self.details[sid] = d
            if d.status.value in ("RUNNING", *RAY_TERMINAL):  # ended between polls: ran since the last
                self.running.setdefault(sid, now if d.status.value == "RUNNING" else now - POLL_S)

    def done(self, sids: list[str]) -> bool:
        return all(s in self.details and self.details[s].status.value in RAY_TERMINAL for s in sids)

    def fill(self, job: Job, sid: str) -> None:
        end = getattr(self.details.get(sid), "end_time", None)
        job.running_at, job.ended_at = self.running.get(sid), end / 1000 if end else None


class OneWorkerCluster(RayCluster):
    """tests/support/ray_cluster.py's private cluster in ``argus up``'s shape: one worker."""

    def __init__(self, temp_dir: Path, shared_root: Path, gpus: int, cpus: int) -> None:
        super().__init__(temp_dir, shared_root)
        self.gpus, self.cpus = gpus, cpus

    def start(self) -> None:
        port, dash_port = self.address.split(":")[1], self.job_server_url.rsplit(":", 1)[1]
        ports = _node_ports()
        self.head.args = self._plain_ray() + [
            "--head", "--num-gpus=0", "--num-cpus=0", f"--port={port}", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}",
            f"--ray-client-server-port={self._client_port}", *ports]
        self.head.proc = self._spawn(self.head.args, "head")
        self._wait_http(f"{self.job_server_url}/api/version")
        self.workers.append(WorkerNode(name="worker0", args=[]))
        self.start_worker(self.workers[0])
        self.wait_workers_alive(1)

    def _plain_ray(self) -> list[str]:
        """``ray start`` as a user of Ray alone runs it (no Argus confinement: jobs sent
        straight to Ray are nobody's, and a confining node gives them no files)."""
        return [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
                "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}", "--object-store-memory=80000000"]

    def start_worker(self, worker: WorkerNode) -> None:
        ports = _node_ports()
        worker.args = self._plain_ray() + [
            f"--address={self.address}", f"--num-gpus={self.gpus}", f"--num-cpus={self.cpus}",
            f"--resources={json.dumps({'worker_node': WORKER_NODE_RESOURCE})}",
            "--include-log-monitor=false", *ports]
        worker.proc = self._spawn(worker.args, worker.name)


def task_spec(steps: int, extra: str = "") -> str:
    """An advanced task running the toy trainer on 1 GPU; ``extra``: more of its overrides
    (e.g. ``trainer.init_sleep_s=60``)."""
    return ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 1\nmax_attempts: 1\n"
            "command: PYTHONUNBUFFERED=1 python3 -m argus.examples.toy_trainer"
            " data.train_files=$HOME/datasets/bench/train.jsonl trainer.nnodes=1"
            f" trainer.n_gpus_per_node=1 trainer.total_training_steps={steps}"
            f" trainer.default_local_dir=${{ARGUS_JOB_DIR}}/checkpoints{' ' + extra if extra else ''}\n")


class UpStack(msgspec.Struct, kw_only=True):
    """A running ``argus up`` subprocess (its own process group) and how to reach it."""

    proc: subprocess.Popen[bytes]
    url: str  # the API's base, .../api/v2
    data_dir: Path
    console: Path
    token: str = ""  # a plain user's (``bench``), once made
    dashboard: str = ""  # the Ray head's dashboard (job server) URL


def start_up(work: Path, gpus: int, env_extra: dict[str, str] | None = None) -> UpStack:
    """``argus up --gpus G`` in ``work`` (fresh data dir, free port; ``env_extra``: e.g.
    ``ARGUS_V2__SCHEDULER__…`` overrides), waited for until its cluster is ready; a user
    ``bench`` and its token made with the admin token. The caller stops it with
    ``kill_group(up.proc, grace_s=60.0)``, also when this raises (the proc is then gone)."""
    data_dir, console = work / "up", work / "up-console.log"
    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGUS_", "RAY_ADDRESS"))}
    env.update(env_extra or {})
    with open(console, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "argus", "up", "--gpus", str(gpus), "--data-dir", str(data_dir),
             "--port", str(port)], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
    up = UpStack(proc=proc, url=f"http://127.0.0.1:{port}/api/v2", data_dir=data_dir, console=console)
    try:
        started = time.monotonic()
        while "cluster ready" not in console.read_text(errors="replace"):  # the README's ready line
            if proc.poll() is not None or time.monotonic() > started + READY_TIMEOUT_S:
                raise RuntimeError(f"argus up not ready (rc={proc.poll()}):\n{console.read_text()[-3000:]}")
            time.sleep(0.5)
        print(f"  argus up ready in {time.monotonic() - started:.1f}s (port {port})", flush=True)
        admin = (data_dir / "admin.token").read_text().strip()
        with httpx.Client(base_url=up.url, timeout=30, headers={"Authorization": f"Bearer {admin}"}) as c:
            c.post("/users", json={"user_id": "bench"}).raise_for_status()
            up.token = c.post("/users/bench/tokens", json={"label": "bench"}).raise_for_status().json()["token"]
            head = c.get("/cluster").raise_for_status().json()["head"]
        up.dashboard = f"http://{head['head_ip']}:{head['dashboard_port']}"
    except BaseException:
        kill_group(proc, grace_s=60.0)
        raise
    return up


def upload_dataset(c: httpx.Client, work: Path) -> None:
    """The toy trainer's dataset, where task_spec's command reads it."""
    dataset = make_example_dataset(work / "train.jsonl")
    c.put("/files/datasets/bench/train.jsonl", content=dataset.read_bytes()).raise_for_status()


def run_argus(n: int, gpus: int, steps: int, work: Path) -> tuple[Side, str]:
    """The Argus side; returns it and the expanded command its tasks ran."""
    up = start_up(work, gpus)
    try:
        watch = RayWatch(up.dashboard)
        with httpx.Client(base_url=up.url, timeout=30, headers={"Authorization": f"Bearer {up.token}"}) as c:
            upload_dataset(c, work)
            spec = task_spec(steps)
            t0 = time.time()
            ids = [c.post("/tasks", content=spec, headers={"Content-Type": "application/yaml"})
                   .raise_for_status().json()["task_id"] for _ in range(n)]
            print(f"  {n} tasks submitted in {time.time() - t0:.2f}s", flush=True)
            command = c.get(f"/tasks/{ids[0]}/spec").raise_for_status().json()["command"]
            # One list request a second (the API shares its process with the reactor: 40
            # GETs a poll would take CPU from it), then each task's JSON once.
            deadline, checked = time.monotonic() + max(600.0, 30.0 * n), 0.0
            while time.monotonic() < deadline:
                watch.poll()
                if time.monotonic() - checked >= 1.0:
                    checked = time.monotonic()
                    items = c.get("/tasks", params={"limit": 500}).raise_for_status().json()["items"]
                    if sum(t["state"] in ARGUS_TERMINAL for t in items if t["task_id"] in ids) == n:
                        break
                time.sleep(POLL_S)
            watch.poll()
            details = {tid: c.get(f"/tasks/{tid}").raise_for_status().json() for tid in ids}
        jobs = []
        for tid, d in details.items():
            job = Job(name=tid, ok=d["state"] == "SUCCEEDED",
                      done_at=d["updated_at"] if d["state"] in ARGUS_TERMINAL else None)
            last = (d.get("attempts") or [{}])[-1]
            watch.fill(job, last.get("submission_id", ""))
            if not job.ok:
                job.evidence = (f"state={d['state']} attempts={len(d.get('attempts') or [])} "
                                f"{d.get('error_summary', '')} {last.get('evidence', '')}").strip()[-600:]
            jobs.append(job)
        return Side(name="argus", jobs=jobs, t0=t0), command
    finally:  # SIGTERM to its group (it stops its Ray node watchdogs), SIGKILL after 60 s
        kill_group(up.proc, grace_s=60.0)


def run_ray(n: int, gpus: int, command: str, work: Path) -> Side:
    temp_dir = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))  # short: unix socket paths
    cluster = OneWorkerCluster(temp_dir, work / "ray-shared", gpus, local_worker_cpus(gpus))
    try:
        started = time.monotonic()
        cluster.start()
        print(f"  Ray cluster up in {time.monotonic() - started:.1f}s ({cluster.job_server_url})", flush=True)
        watch = RayWatch(cluster.job_server_url)
        defaults = ArgusConfig()  # the driver resources Argus asks for
        t0, sids = time.time(), []
        for i in range(n):  # the driver's cwd and $ARGUS_JOB_DIR, as argus.driver gives them
            d = work / "ray-jobs" / f"job{i:03d}"
            sids.append(watch.client.submit_job(
                entrypoint=f"mkdir -p {d} && cd {d} && {command}",
                runtime_env={"env_vars": {"ARGUS_JOB_DIR": str(d)}},
                entrypoint_num_cpus=defaults.entrypoint_num_cpus,
                entrypoint_resources={"worker_node": WORKER_NODE_RESOURCE / gpus}))
        print(f"  {n} jobs submitted in {time.time() - t0:.2f}s", flush=True)
        deadline = time.monotonic() + max(600.0, 30.0 * n)
        while time.monotonic() < deadline and not watch.done(sids):
            time.sleep(POLL_S)
            watch.poll()
        jobs = []
        for sid in sids:
            info = watch.details.get(sid)
            status = info.status.value if info is not None else "UNKNOWN"
            job = Job(name=sid, ok=status == "SUCCEEDED")
            watch.fill(job, sid)
            job.done_at = job.ended_at  # Ray's own record of the end
            if not job.ok:
                try:
                    tail = watch.client.get_job_logs(sid)[-400:]
                except Exception as exc:  # noqa: BLE001 - evidence only
                    tail = f"(no logs: {exc})"
                job.evidence = f"status={status}: {str(getattr(info, 'message', ''))[:160]} ... log tail: {tail}"
            jobs.append(job)
        return Side(name="ray", jobs=jobs, t0=t0)
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def max_concurrent(jobs: list[Job]) -> int:
    edges = sorted([(j.running_at, 1) for j in jobs if j.run_s is not None]
                   + [(j.ended_at, -1) for j in jobs if j.run_s is not None])
    level = peak = 0
    for _, step in edges:  # an end at the same instant as a start sorts first
        level += step
        peak = max(peak, level)
    return peak


def report(sides: list[Side], gpus: int) -> int:
    print(f"\n{'side':<7}{'jobs':>6}{'ok':>6}{'makespan s':>12}{'max running':>13}"
          f"{'mean run s':>12}{'util':>7}")
    peaks: dict[str, int] = {}
    for s in sides:
        runs = [j.run_s for j in s.jobs if j.run_s is not None]
        peaks[s.name] = max_concurrent(s.jobs)
        util = sum(runs) / (gpus * s.makespan) if s.makespan > 0 else 0.0
        mean = sum(runs) / len(runs) if runs else float("nan")
        print(f"{s.name:<7}{len(s.jobs):>6}{sum(j.ok for j in s.jobs):>6}{s.makespan:>12.1f}"
              f"{peaks[s.name]:>13}{mean:>12.2f}{util:>7.0%}")
    failed = [(s.name, j) for s in sides for j in s.jobs if not j.ok]
    ratio = sides[0].makespan / sides[1].makespan
    print(f"\nmakespan ratio argus/ray: {ratio:.2f}")
    if failed:
        print(f"\n{len(failed)} job(s) did not succeed:")
        for side, job in failed:
            print(f"  [{side}] {job.name}: {job.evidence}")
        print(f"verdict: INVALID: {len(failed)} job(s) failed; the figures measure nothing")
        return 1
    if peaks["argus"] > gpus:
        print(f"note: Argus had {peaks['argus']} jobs RUNNING in Ray with {gpus} GPU slots: it admitted "
              "jobs whose GPU the earlier ones had not yet reserved (their placement groups waited)")
    print(f"verdict: makespan ratio <= {TARGET_RATIO}: {'MET' if ratio <= TARGET_RATIO else 'NOT MET'} "
          f"({ratio:.2f}); {gpus} at once: {'MET' if peaks['argus'] == gpus else 'NOT MET'} "
          f"(max {peaks['argus']})")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="toy trainer steps per job (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs) for a look")
    args = parser.parse_args()
    if not 0 < args.jobs <= 500:
        parser.error("--jobs: 1 to 500 (the Argus side follows them with one task list page)")
    work = Path(tempfile.mkdtemp(prefix="argus-bench-e2e-", dir="/tmp"))
    started = time.monotonic()
    try:  # one after the other, each on its own fresh cluster
        print(f"argus side: argus up --gpus {args.gpus}, {args.jobs} tasks ...", flush=True)
        argus_side, command = run_argus(args.jobs, args.gpus, args.steps, work)
        print(f"ray side: the same command straight to Ray, {args.jobs} jobs ...", flush=True)
        rc = report([argus_side, run_ray(args.jobs, args.gpus, command, work)], args.gpus)
    finally:
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal bench time {time.monotonic() - started:.1f}s")
    sys.exit(rc)


if __name__ == "__main__":
    main()
