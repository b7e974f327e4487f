"""A node's claim desk (argus.confine.desk): the watchdog's one GCS client claims for users
the Ray jobs the job drivers on its host ask for, as each driver's own watcher would. The
GCS here is a stand-in with the two calls the desk makes; the desk on a real cluster runs in
tests/confine/test_workers_ray.py (a cluster as `argus up` runs it)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from argus.confine.claims import CLAIM_SECRET_KEY
from argus.confine.desk import ClaimDesk, ClaimRequest, desk_is_open, request_claim, withdraw_request
from argus.confine.registry import Claim, read_claim


class _JobId:
    def __init__(self, number: int) -> None:
        self.number = number

    def binary(self) -> bytes:
        return self.number.to_bytes(4, "little")

    def hex(self) -> str:
        return self.binary().hex()


class _Gcs:
    """Ray's job table as ``GcsClient.get_all_job_info`` gives it, by submission id."""

    cluster_id = SimpleNamespace(hex=lambda: "c0ffee")

    def __init__(self) -> None:
        self.jobs: dict[_JobId, Any] = {}
        self.lock = threading.Lock()

    def add(self, number: int, driver_pid: int, **metadata: str) -> str:
        with self.lock:
            job = _JobId(number)
            self.jobs[job] = SimpleNamespace(driver_pid=driver_pid, config=SimpleNamespace(metadata=metadata))
            return job.hex()

    def get_all_job_info(self, *, job_or_submission_id: str | None = None, **_: Any) -> dict[_JobId, Any]:
        with self.lock:
            return {j: i for j, i in self.jobs.items()
                    if job_or_submission_id in (None, i.config.metadata.get("job_submission_id"))}


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_desk_claims_the_first_job_that_shows_the_secret_from_the_command(tmp_path: Path) -> None:
    registry, gcs, said = str(tmp_path / "confine"), _Gcs(), []
    assert not desk_is_open(registry)
    desk = ClaimDesk(registry=registry, gcs_address="gcs:6379", on_line=said.append, connect=lambda _address: gcs)
    desk.start()
    try:
        assert desk.ready.wait(10) and desk_is_open(registry)
        me, sid = os.getpid(), "alice-t--a01"
        request_claim(registry, ClaimRequest(submission_id=sid, user="alice", secret="s3cret", command_pid=me,
                                             made_at=time.time()))
        other = gcs.add(1, me, job_submission_id="bob-t--a01", **{CLAIM_SECRET_KEY: "s3cret"})
        forged = gcs.add(2, me, job_submission_id=sid)  # no secret
        stranger = gcs.add(3, 1, job_submission_id=sid, **{CLAIM_SECRET_KEY: "s3cret"})  # not the command's
        mine = gcs.add(4, me, job_submission_id=sid, **{CLAIM_SECRET_KEY: "s3cret"})
        _until(lambda: read_claim(registry, "c0ffee", mine) is not None)
        assert read_claim(registry, "c0ffee", mine) == Claim(job_id=mine, user="alice", submission_id=sid,
                                                            driver_pid=me)
        for job in (other, forged, stranger):
            assert read_claim(registry, "c0ffee", job) is None
        # Done: the request is gone, and a later job of the command gets no claim.
        _until(lambda: not list((tmp_path / "confine" / "desks").glob("*/requests/*.json")))
        later = gcs.add(5, me, job_submission_id=sid, **{CLAIM_SECRET_KEY: "s3cret"})
        time.sleep(0.3)
        assert read_claim(registry, "c0ffee", later) is None
        assert any("not the first Ray job" in line for line in said)
        assert any("not one of this command's processes" in line for line in said)
    finally:
        desk.stop()
        desk.join(10)
    assert not desk_is_open(registry)  # a stopped desk says so: drivers watch for themselves


def test_a_withdrawn_request_is_not_served(tmp_path: Path) -> None:
    registry, gcs = str(tmp_path / "confine"), _Gcs()
    desk = ClaimDesk(registry=registry, gcs_address="gcs:6379", connect=lambda _address: gcs)
    desk.start()
    try:
        assert desk.ready.wait(10)
        sid = "alice-t--a02"
        request_claim(registry, ClaimRequest(submission_id=sid, user="alice", secret="x", command_pid=os.getpid(),
                                             made_at=time.time()))
        withdraw_request(registry, sid)  # the command ended before its Ray job showed
        job = gcs.add(1, os.getpid(), job_submission_id=sid, **{CLAIM_SECRET_KEY: "x"})
        time.sleep(0.3)
        assert read_claim(registry, "c0ffee", job) is None
    finally:
        desk.stop()
        desk.join(10)


def test_a_desk_that_cannot_reach_the_gcs_never_says_it_is_open(tmp_path: Path) -> None:
    registry, said = str(tmp_path / "confine"), []

    def refuse(address: str) -> Any:
        raise ConnectionError(f"no GCS at {address}")

    desk = ClaimDesk(registry=registry, gcs_address="gcs:6379", on_line=said.append, connect=refuse)
    desk.start()
    desk.join(10)
    assert not desk_is_open(registry) and "cannot reach Ray's GCS" in said[0]
