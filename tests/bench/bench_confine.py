"""What confinement costs a job: job start to its first step, with and without it.

    python tests/bench/bench_confine.py [--jobs N]

Runs two clusters as ``argus up`` does (``argus.cli.stack.Stack``: the node pool's head and
worker watchdogs), both up at once, one with ``v2.sandbox.mode: auto`` (Landlock: the
command and every Ray worker confined) and one with ``none``. It runs N jobs on each
through Argus's own driver (``build_submission``), one at a time, taking the clusters in
turn (ABBA), so that a shared host's drifting load weighs on both alike (run one after the
other, the same code measured +95, +140 and -128 ms). Each job's command starts Ray, creates an actor and
calls it once: that call's return is the first step. Measured per job: from the moment the
driver starts the command (its ``result.json``'s ``started_at``) to the first step. The
job's Ray workers are new processes for every job (Ray keeps workers per job), so each
job pays the launcher once per worker.

Also: the launcher alone (``python -I -S …/argus/confine/worker.py … -- /bin/true`` against
``/bin/true``), and building one job's ruleset.

Target (issue 37): job start to first step <= 100 ms more with confinement (medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from argus.cli.stack import Stack  # noqa: E402
from argus.config import ArgusConfig  # noqa: E402
from argus.confine import abi_version, decide, job_ruleset  # noqa: E402
from argus.confine.raystart import launcher_prefix  # noqa: E402
from argus.confine.registry import Claim, registry_dir  # noqa: E402
from argus.rayjobs.submission import build_submission  # noqa: E402
from tests.bench.verdict import Verdict  # noqa: E402

PROBE = """
import time
began = time.time()
import ray
imported = time.time()
ray.init()
connected = time.time()
@ray.remote
class Step:
    def first(self):
        return time.time()
print("FIRST_STEP", ray.get(Step.remote().first.remote()), flush=True)
print("PHASES", began, imported, connected, flush=True)
"""


class _Cluster:
    """One cluster as ``argus up`` runs it, with ``v2.sandbox.mode`` = ``mode``, and a job
    client for it."""

    def __init__(self, mode: str, root: Path) -> None:
        self.mode = mode
        data = root / mode
        data.mkdir()
        self.config = config = ArgusConfig(shared_root=str(data / "shared"))
        config.v2.sqlite.db_path = str(data / "argus.sqlite3")
        config.v2.sandbox.mode = mode  # type: ignore[assignment]
        self.home = home = data / "shared" / "users" / "alice"
        (home / "code").mkdir(parents=True)
        (home / "code" / "probe.py").write_text(PROBE)
        self.stack = Stack(data, config, gpus=1, cpus=4, echo=lambda _t: None)
        self.stack.start()
        from ray.job_submission import JobSubmissionClient

        head = data / "shared" / "ray" / "discovery" / config.cluster_name / "head.json"
        while not head.exists():
            time.sleep(0.5)
        self.client = JobSubmissionClient(json.loads(head.read_text())["job_server_url"])

    def job(self, n: int) -> float:
        """Run job ``n`` through Argus's driver; ms from its command's start to its first step."""
        config, home, client = self.config, self.home, self.client
        payload = build_submission(task_id=f"alice-b{n}", attempt_no=1, user="alice", config=config,
                                   python=sys.executable, command=f"{sys.executable} {home}/code/probe.py")
        sid = client.submit_job(entrypoint=payload.entrypoint, submission_id=payload.submission_id,
                                runtime_env=payload.runtime_env,
                                entrypoint_resources=payload.entrypoint_resources,
                                entrypoint_num_cpus=payload.entrypoint_num_cpus)
        while not client.get_job_status(sid).is_terminal():
            time.sleep(0.2)
        job = home / "jobs" / sid
        log = (job / "driver.log").read_text()
        first = [float(line.split()[1]) for line in log.splitlines() if line.startswith("FIRST_STEP")]
        assert first, f"{self.mode} job {sid} failed:\n{log[-3000:]}"
        started = json.loads((job / "result.json").read_text())["started_at"]
        claimed = [c.stat().st_mtime for c in Path(registry_dir(config.shared_root)).glob("*/*.json")
                   if Claim.from_json(c.read_bytes()).submission_id == sid]
        says = f"; its Ray job claimed after {(claimed[0] - started) * 1000:.0f} ms" if claimed else ""
        phases = [float(v) for line in log.splitlines() if line.startswith("PHASES") for v in line.split()[1:]]
        if phases:
            says += (f"; python up {(phases[0] - started) * 1000:.0f}, ray imported "
                     f"{(phases[1] - started) * 1000:.0f}, connected {(phases[2] - started) * 1000:.0f} ms")
        print(f"  {self.mode}: job {n} first step after {(first[0] - started) * 1000:.0f} ms{says}", flush=True)
        return (first[0] - started) * 1000


def _run_jobs(jobs: int, root: Path) -> tuple[list[float], list[float]]:
    """``jobs`` jobs on each of two clusters, one without confinement and one with, both up
    at once and taken in turn (ABBA: none, auto, auto, none, ...): a host whose load drifts
    weighs on both alike. The first job of each warms its node up and is not counted."""
    clusters: list[_Cluster] = []
    try:
        clusters = [_Cluster("none", root), _Cluster("auto", root)]
        took: dict[str, list[float]] = {"none": [], "auto": []}
        for n in range(jobs + 1):
            for cluster in clusters if n % 2 == 0 else clusters[::-1]:
                ms = cluster.job(n)
                if n:
                    took[cluster.mode].append(ms)
        return took["none"], took["auto"]
    finally:
        for cluster in clusters:
            cluster.stack.stop()


def _launcher_ms(rounds: int, shared: Path) -> tuple[float, float]:
    def median_ms(argv: list[str]) -> float:
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            subprocess.run(argv, check=True)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    bare = median_ms(["/bin/true"])
    launched = median_ms([*launcher_prefix(["--shared-root", str(shared)]), "/bin/true"])
    return bare, launched


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=12)
    args = parser.parse_args()
    verdict = Verdict()
    if abi_version() < 1:
        verdict.check("this kernel has Landlock", False, "abi 0")
        verdict.finish()
    with tempfile.TemporaryDirectory(prefix="bench-confine-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        job_ruleset(decide("auto"), shared_root=str(root), user="alice").close()
        print(f"one job's ruleset built in {(time.perf_counter() - t) * 1000:.1f} ms")
        bare, launched = _launcher_ms(20, root)
        print(f"launcher: /bin/true {bare:.1f} ms, through the launcher {launched:.1f} ms "
              f"(+{launched - bare:.1f} ms per Ray worker start)")
        off, on = _run_jobs(args.jobs, root)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"job start to first step, median of {args.jobs}: without {m_off:.0f} ms, with {m_on:.0f} ms "
          f"(+{m_on - m_off:.0f} ms, ratio {m_on / m_off:.2f})")
    print(f"  without: {', '.join(f'{v:.0f}' for v in off)}")
    print(f"  with:    {', '.join(f'{v:.0f}' for v in on)}")
    verdict.at_most("confinement's cost, job start to first step (median)", m_on - m_off, 100.0)
    verdict.finish()


if __name__ == "__main__":
    main()
