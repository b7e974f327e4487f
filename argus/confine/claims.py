"""Claiming Ray jobs for users, as their drivers connect (``argus.confine.registry``).

A ``ClaimWatcher`` polls the GCS's job table (fast while a job starts, slowly after) and
writes a claim for each new Ray job that ``judge`` accepts. Ray's job table is written by
the drivers themselves, so nothing in it is taken on trust alone: the judge also checks
that the driver's process is one it knows (a descendant of this job driver; the head's
own dashboard agent), which a job cannot arrange from inside its confinement.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from argus.confine.registry import SYSTEM, Claim, write_claim

__all__ = ["CLAIM_SECRET_KEY", "ClaimWatcher", "DASHBOARD_NAMESPACE", "Judge", "claim_dashboard_job", "connect_gcs",
           "descends_from", "first_job_judge", "jobs_in_order", "yield_to_jobs"]

# The watcher thread's nice value (0-19; higher yields more).
WATCHER_NICE = 10
# The namespace of the driver Ray's dashboard connects to run job supervisors.
DASHBOARD_NAMESPACE = "_ray_internal_dashboard"
# The job config's metadata key of the secret a job driver gives its command
# (argus.confine.command.with_claim_secret).
CLAIM_SECRET_KEY = "argus_claim_secret"


def yield_to_jobs() -> None:
    """Lower the calling thread's priority (nice ``WATCHER_NICE``): Ray's import (a quarter
    second of CPU) and the polls would otherwise take a core from a job's own start on a
    small node. (Linux: a thread's nice value is its own, set through its thread id.)"""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WATCHER_NICE)


def connect_gcs(address: str) -> Any:
    """Ray's GCS client for the cluster at ``address`` (imports Ray: about a second)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or below it (read from /proc, now)."""
    for _ in range(256):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read(4096)
        except OSError:
            return False
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])
    return False


Judge = Callable[[str, Any], Claim | None]


def first_job_judge(*, submission_id: str, user: str, command_pid: int, secret: str,
                    say: Callable[[str], None]) -> Judge:
    """Who gets ``user``'s claim: the first Ray job that names the attempt
    ``submission_id``, shows ``secret`` and whose driver process is one of the command's
    (``command_pid`` and below, on this host). One job: a second Ray job of the same
    command gets no claim (its workers no user's files)."""
    claimed: list[str] = []

    def judge(job_id: str, info: Any) -> Claim | None:
        metadata = info.config.metadata
        if metadata.get("job_submission_id") != submission_id:
            return None
        if metadata.get(CLAIM_SECRET_KEY) != secret or claimed:
            say(f"Ray job {job_id} names this attempt, but it is not the first Ray job of this "
                "command (its secret is missing or already claimed): its workers get no user's files")
            return None
        if not descends_from(int(info.driver_pid), command_pid):
            say(f"Ray job {job_id} names this attempt, but its driver (pid {info.driver_pid}) is "
                "not one of this command's processes: its workers get no user's files")
            return None
        claimed.append(job_id)
        return Claim(job_id=job_id, user=user, submission_id=submission_id, driver_pid=int(info.driver_pid))

    return judge


def jobs_in_order(jobs: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """The job table's entries (job id object -> info) as (hex job id, info), in the order
    the GCS numbered them (a job id is a little-endian counter): a job registered later
    never goes before one registered earlier."""
    ordered = sorted(jobs.items(), key=lambda kv: int.from_bytes(kv[0].binary(), "little"))
    return [(job_id.hex(), info) for job_id, info in ordered]


class ClaimWatcher(threading.Thread):
    """Polls the job table of the Ray cluster at ``gcs_address`` (only the jobs naming
    ``submission_id`` when given) and writes the claims ``judge`` returns: every
    ``fast_s`` for the first ``fast_for_s`` seconds, then every ``slow_s``."""

    def __init__(self, *, registry: str, gcs_address: str, judge: Judge, submission_id: str = "",
                 fast_s: float = 0.02, fast_for_s: float = 120.0, slow_s: float = 2.0,
                 until_claims: int = 0, on_error: Callable[[str], None] = lambda _line: None) -> None:
        super().__init__(name="argus-claims", daemon=True)
        self.registry, self.gcs_address, self.judge = registry, gcs_address, judge
        self.submission_id = submission_id
        self.fast_s, self.fast_for_s, self.slow_s = fast_s, fast_for_s, slow_s
        self.on_error = on_error
        self.until_claims = until_claims  # stop after this many claims (0: never)
        self.stopping = threading.Event()
        self.claimed: list[Claim] = []
        self.refused: list[str] = []

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        yield_to_jobs()
        try:
            # Ray's import, off the caller's path. Only safe where nothing else imports Ray
            # meanwhile (the job driver's main thread only copies output).
            gcs = connect_gcs(self.gcs_address)
            cluster = gcs.cluster_id.hex()
        except Exception as exc:  # no Ray here, or no GCS: nothing to claim for
            self.on_error(f"cannot watch Ray's jobs at {self.gcs_address}: {exc}")
            return
        seen: set[str] = set()
        started = time.monotonic()
        while not self.stopping.is_set():
            try:
                jobs = gcs.get_all_job_info(job_or_submission_id=self.submission_id or None,
                                            skip_submission_job_info_field=True,
                                            skip_is_running_tasks_field=True, timeout=5)
            except Exception as exc:  # the GCS restarting: try again
                self.on_error(f"reading Ray's jobs: {exc}")
                jobs = {}
            for hexid, info in jobs_in_order(jobs):
                if hexid in seen:
                    continue
                seen.add(hexid)
                claim = self.judge(hexid, info)
                if claim is None:
                    self.refused.append(hexid)
                    continue
                write_claim(self.registry, cluster, claim)
                self.claimed.append(claim)
                if self.until_claims and len(self.claimed) >= self.until_claims:
                    return
            fast = time.monotonic() - started < self.fast_for_s
            self.stopping.wait(self.fast_s if fast else self.slow_s)


def claim_dashboard_job(registry: str, gcs_address: str, *, ray_pid: int,
                        on_error: Callable[[str], None] = lambda _line: None) -> ClaimWatcher:
    """Claim the dashboard's own job as Ray's (unconfined): its workers supervise every job's
    entrypoint, which must write the job's folder. Only a job whose driver is a process of
    this head's Ray (``ray_pid``) counts, and only the first: the dashboard connects once,
    at the first submission, before any job of a user runs."""

    # Imported here, not in the watcher's thread: a process that imports Ray in two threads at
    # once gets a half-initialised module in one of them (the test harness's state calls).
    importlib.import_module("ray._raylet")

    def judge(job_id: str, info: Any) -> Claim | None:
        if info.config.ray_namespace != DASHBOARD_NAMESPACE or not descends_from(int(info.driver_pid), ray_pid):
            return None
        return Claim(job_id=job_id, user=SYSTEM, driver_pid=int(info.driver_pid))

    watcher = ClaimWatcher(registry=registry, gcs_address=gcs_address, judge=judge, fast_s=0.05,
                           fast_for_s=0.0, slow_s=0.1, until_claims=1, on_error=on_error)
    watcher.start()
    return watcher
