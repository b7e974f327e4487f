"""A job that prints far more than its output budget, on the private Ray cluster: its
command prints 40 MB and one of its Ray workers 12 MB, with a budget of 2 MiB (figures
for 5 GiB on a whole stack: tests/bench/bench_chatty_job.py). What lands
on disk, measured with ``du`` before and after, across the job's folder (``driver.log``)
and Ray's logs (the job-driver log, the workers' ``worker-*.out``, ``raylet.out`` and the
rest of the session), stays within the budget plus a bounded overhead."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from argus.config import ArgusConfig
from argus.rayjobs import RayGateway, build_submission, job_dir

pytestmark = pytest.mark.ray

MiB = 1 << 20
BUDGET = 2 * MiB
CHATTY = """
import sys
import ray

ray.init()

@ray.remote(num_cpus=1)
def chatter(n: int) -> int:
    w = sys.stdout.write
    for i in range(n):
        w("worker %09d " % i + "y" * 80 + "\\n")
    sys.stdout.flush()
    return n

print("worker lines:", ray.get(chatter.remote(125_000)), flush=True)  # 12 MB
w = sys.stdout.write
for i in range(430_000):  # 40 MB
    w("driver %09d " % i + "x" * 80 + "\\n")
print("THE-END", flush=True)
"""


def du(path: Path) -> int:
    """Bytes on disk under ``path``, as ``du`` counts them."""
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False)
    return int(done.stdout.split()[0]) if done.stdout else 0


def test_a_chatty_job_keeps_its_budget_across_driver_log_and_rays_logs(ray_cluster) -> None:
    gw = RayGateway(ray_cluster.job_server_url, ray_cluster.address)
    code = ray_cluster.shared_root / "users" / "alice" / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "chatty.py").write_text(CHATTY)
    config = ArgusConfig(shared_root=str(ray_cluster.shared_root))
    config.v2.output = msgspec.structs.replace(config.v2.output, budget_bytes=BUDGET)
    payload = build_submission(task_id="alice-out-20261203-160000-ab12", attempt_no=1, user="alice",
                               command=f"{sys.executable} {code / 'chatty.py'}", config=config,
                               spec={"kind": "advanced"}, python=sys.executable)
    ray_before, shared_before = du(ray_cluster.temp_dir), du(ray_cluster.shared_root)
    gw.submit(payload)
    sid = payload.submission_id
    deadline = time.monotonic() + 600
    obs = None
    while time.monotonic() < deadline:
        obs = gw.status(sid)
        if obs is not None and obs.is_terminal:
            break
        time.sleep(1)
    assert obs is not None and obs.status == "SUCCEEDED", (obs, gw.logs_tail(sid, 4000))
    time.sleep(3)  # Ray's log monitor and the workers' redirection flush what they hold
    ray_grew, shared_grew = du(ray_cluster.temp_dir) - ray_before, du(ray_cluster.shared_root) - shared_before
    folder = Path(job_dir(str(ray_cluster.shared_root), "alice", sid))
    log = (folder / "driver.log").read_bytes()
    # What the driver said when it folded the tail in (its exit report may already be gone:
    # a reactor of another test on this shared root removes reports of attempts it does not follow).
    said = re.search(rb"output: (\d+) bytes printed, (\d+) dropped", log)
    print(f"printed {said.group(1).decode() if said else '?'} bytes by the command; "
          f"du grew: Ray's temp dir {ray_grew} bytes, the shared root {shared_grew} bytes; "
          f"driver.log {len(log)} bytes")
    assert said is not None and int(said.group(1)) > 38_000_000, log[-2000:]
    assert len(log) <= BUDGET + 64 * 1024 and log.rstrip().endswith(b"THE-END")
    # The job's folder: driver.log and the small files the driver writes beside it.
    assert shared_grew <= BUDGET + 1 * MiB, shared_grew
    # Ray's side: the job log's small copy (1 MiB), the worker's rotated .out (a quarter of
    # the budget) and .err, and what Ray logs of its own meanwhile (a few MB at most).
    assert ray_grew <= BUDGET + 6 * MiB, ray_grew
    assert gw.logs_tail(sid, 200).rstrip().endswith("[argus.driver] exit code 0")
