"""AttemptStatus: Ray's job statuses and Argus's own phases in one str-valued enum, stored
as the same strings as before (the events' JSON does not change)."""

from __future__ import annotations

import msgspec
import pytest

from argus.events import AttemptEnded, Event
from argus.lifecycle import RAY_JOB_STATUSES, AttemptStatus

A = AttemptStatus


def test_ray_statuses_are_rays_own() -> None:
    ray = pytest.importorskip("ray.job_submission")
    assert {s.value for s in ray.JobStatus} == {s.value for s in RAY_JOB_STATUSES}
    assert {s for s in A if not s.is_ray_status()} == {A.STARTING, A.SUBMITTED, A.LOST, A.NOT_SUBMITTED}
    assert A.from_ray(ray.JobStatus.RUNNING) is A.RUNNING
    with pytest.raises(ValueError):
        A.from_ray("LOST")  # an Argus phase is never Ray's answer


def test_terminal() -> None:
    assert {s for s in A if s.is_terminal()} == {A.SUCCEEDED, A.FAILED, A.STOPPED, A.LOST, A.NOT_SUBMITTED}


def test_stored_and_shown_as_the_bare_string() -> None:
    ended = AttemptEnded(task_id="t", attempt_no=1, submission_id="t--a01", ray_status=A.FAILED, ended_at=1.0)
    raw = msgspec.json.encode(ended)
    assert b'"ray_status":"FAILED"' in raw
    back = msgspec.json.decode(raw, type=Event)
    assert isinstance(back, AttemptEnded) and back.ray_status == A.FAILED
    assert f"ended {A.FAILED}" == "ended FAILED" and A.LOST == "LOST"
