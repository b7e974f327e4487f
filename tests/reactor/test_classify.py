"""Failure classification: a table of real-looking Ray/verl outputs."""

from __future__ import annotations

import pytest

from argus.events.catalog import FailureKind
from argus.reactor.classify import EVIDENCE_MAX, classify_failure, is_duplicate_submission
from argus.rayjobs import DuplicateSubmission

VERL_TRACE = """\
Traceback (most recent call last):
  File "verl/trainer/main_ppo.py", line 42, in main
    run_ppo(config)
ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=4242, ip=10.0.0.5, actor_id=ab12)
  File "verl/single_controller/ray/base.py", line 241, in _check_resource_available
    raise ValueError(
ValueError: Total available GPUs {avail} is less than total desired GPUs {want}
"""

ENTRYPOINT_FAILED = "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"

K = FailureKind
CASES = [
    # (ray_status, message, log_tail, exit_code, kind, evidence must contain)
    ("FAILED", "", VERL_TRACE.format(avail="4.0", want=8), 1, K.INSUFFICIENT_RESOURCES,
     "Total available GPUs 4.0 is less than total desired GPUs 8"),
    ("FAILED", ENTRYPOINT_FAILED + VERL_TRACE.format(avail=0, want=16), "", 1, K.INSUFFICIENT_RESOURCES,
     "Total available GPUs 0 is less than total desired GPUs 16"),
    ("FAILED", "Job supervisor actor failed to start within 900.0 seconds. This timeout can be configured",
     "", None, K.INSUFFICIENT_RESOURCES, "failed to start within"),
    ("FAILED", "Job supervisor actor died: The actor died unexpectedly before finishing this task.", "",
     None, K.CLUSTER_LOST, "Job supervisor actor died"),
    ("FAILED", "Unexpected error occurred: failed to get job supervisor.", "", None, K.CLUSTER_LOST,
     "failed to get job supervisor"),
    ("FAILED", "", "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
     "\tclass_name: TaskRunner", 1, K.CLUSTER_LOST, "The actor died unexpectedly"),
    ("FAILED", "", "RaySystemError: Failed to connect to GCS. Please check if the GCS server is running", 1,
     K.CLUSTER_LOST, "Failed to connect to GCS"),
    ("FAILED", "", "ray.exceptions.NodeDiedError: node 1a2b has died", 1, K.CLUSTER_LOST, "NodeDiedError"),
    ("LOST", "", "", None, K.CLUSTER_LOST, "no record"),
    ("STOPPED", "Job was intentionally stopped.", "Traceback: whatever", -15, K.CANCELED, "stopped"),
    ("FAILED", "", "FileNotFoundError: data.train_files: no such file: /private/x.parquet", 1, K.USER_ERROR,
     "no such file"),
    ("FAILED", "", "ModuleNotFoundError: No module named 'my_reward'", 1, K.USER_ERROR, "my_reward"),
    # Ray's wrapper line comes first; the evidence is the inner exception that says what to fix.
    ("FAILED", "", "ray.exceptions.RayTaskError(ModuleNotFoundError): ray::TaskRunner.run() "
     "(pid=1, ip=127.0.0.1)\n  File \"x.py\", line 3, in run\n    import numpy as np\n"
     "ModuleNotFoundError: No module named 'numpy'\n", 1, K.USER_ERROR,
     "ModuleNotFoundError: No module named 'numpy'"),
    ("FAILED", "", "ray.exceptions.RayTaskError(ZeroDivisionError): ray::Actor.step()\n"
     "ZeroDivisionError: division by zero\n", 1, K.RUNTIME_ERROR, "ZeroDivisionError: division by zero"),
    ("FAILED", "", "omegaconf.errors.ConfigAttributeError: Key 'foo' is not in struct", 1, K.USER_ERROR,
     "not in struct"),
    ("FAILED", "", "Could not override 'trainer.bogus'.\nTo append to your config use +trainer.bogus=1", 1,
     K.USER_ERROR, "Could not override 'trainer.bogus'"),
    ("FAILED", "", "bash: line 1: pythn: command not found", 127, K.USER_ERROR, "command not found"),
    ("FAILED", "", "something odd", 2, K.USER_ERROR, "something odd"),
    ("FAILED", "", "usage: train.py [-h] --lr LR", 1, K.USER_ERROR, "usage: train.py"),
    ("FAILED", "", "Traceback (most recent call last):\n  File \"x.py\"\nZeroDivisionError: division by zero\n",
     1, K.RUNTIME_ERROR, "ZeroDivisionError: division by zero"),
    ("FAILED", "", "", 137, K.RUNTIME_ERROR, "exit code 137"),
    ("FAILED", "weird", "", None, K.UNKNOWN, "weird"),
    (None, "", "", None, K.UNKNOWN, ""),
]


@pytest.mark.parametrize("status,message,log_tail,exit_code,kind,evidence", CASES)
def test_classify_table(status, message, log_tail, exit_code, kind, evidence):
    got, why = classify_failure(status, message, log_tail, exit_code)
    assert got == kind
    assert evidence.lower() in why.lower()
    assert len(why) <= EVIDENCE_MAX


def test_verl_message_beats_actor_noise():
    """The RayTaskError traceback also mentions actors; resources must still win."""
    log = "The actor died unexpectedly before finishing this task.\n" + VERL_TRACE.format(avail="7.0", want=8)
    assert classify_failure("FAILED", "", log, 1)[0] == K.INSUFFICIENT_RESOURCES


def test_evidence_is_one_line_and_bounded():
    line = "x" * 2000 + " Total available GPUs 1.0 is less than total desired GPUs 2 " + "y" * 2000
    kind, why = classify_failure("FAILED", "", "before\n" + line + "\nafter", 1)
    assert kind == K.INSUFFICIENT_RESOURCES
    assert "Total available GPUs 1.0" in why and "\n" not in why and len(why) <= EVIDENCE_MAX


def test_is_duplicate_submission():
    msg = "Request failed with status code 400: Job with submission_id t--a01 already exists."
    assert is_duplicate_submission(RuntimeError(msg))
    assert is_duplicate_submission(DuplicateSubmission(msg))
    assert not is_duplicate_submission(RuntimeError("Request failed with status code 500"))
