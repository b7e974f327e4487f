"""Failure classification: a table of real-looking Ray/verl outputs."""

from __future__ import annotations

import pytest

from argus.events.catalog import FailureKind
from argus.reactor.classify import BY_ERROR_TYPE, EVIDENCE_MAX, classify_failure, is_duplicate_submission
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
    # Ray's job log held only its own line (the driver ran on another node, seen under argus up
    # on a GPU machine); its message ends with the traceback: that is the evidence.
    ("FAILED", ENTRYPOINT_FAILED + "Traceback (most recent call last):\n  File \"t.py\", line 9\n"
     "KeyError: 'input_ids'\n", "2026-11-26 14:30:01,000 INFO job_manager.py:581 -- Runtime env is setting up.\n",
     1, K.RUNTIME_ERROR, "KeyError: 'input_ids'"),
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


# ---- Ray's error_type first (JobErrorType), the text second ------------------------------
# Types that say only "it failed", not why: the message and the log decide.
LEFT_TO_TEXT = {"JOB_ENTRYPOINT_COMMAND_ERROR", "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"}


def test_every_ray_error_type_is_mapped_or_left_to_the_text_on_purpose():
    common = pytest.importorskip("ray.dashboard.modules.job.common")
    assert {t.value for t in common.JobErrorType} == set(BY_ERROR_TYPE) | LEFT_TO_TEXT


@pytest.mark.parametrize("error_type,message,kind", [
    # The driver's actor was not placed in time: no worker had a free worker_node slot.
    ("JOB_SUPERVISOR_ACTOR_START_TIMEOUT", "Job supervisor actor failed to start within 900.0 seconds.",
     K.INSUFFICIENT_RESOURCES),
    ("JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE", "Job supervisor actor could not be scheduled: The actor is not "
     "schedulable: The node specified via NodeAffinitySchedulingStrategy doesn't exist any more", K.CLUSTER_LOST),
    ("JOB_SUPERVISOR_ACTOR_DIED", "Job supervisor actor died: The actor died because its node has died.",
     K.CLUSTER_LOST),
    ("JOB_SUPERVISOR_ACTOR_START_FAILURE", "Unexpected error occurred: failed to get job supervisor.",
     K.CLUSTER_LOST),
    ("RUNTIME_ENV_SETUP_FAILURE", "runtime_env setup failed: Failed to set up runtime environment.\n"
     "Could not create the actor because its associated runtime env failed to be created.", K.USER_ERROR),
    ("JOB_ENTRYPOINT_COMMAND_START_ERROR", "Job entrypoint command failed to start: [Errno 12] Cannot "
     "allocate memory", K.RUNTIME_ERROR),
])
def test_error_type_decides(error_type, message, kind):
    got, why = classify_failure("FAILED", message, "", None, error_type=error_type)
    assert got is kind
    assert why.startswith(error_type + ": ") and message.splitlines()[0] in why and len(why) <= EVIDENCE_MAX


def test_error_type_comes_before_the_text():
    # The log mentions a missing module (USER_ERROR by text), but Ray says its supervisor
    # never got a place: the resources race is the reason, and it is retried.
    kind, why = classify_failure("FAILED", "Job supervisor actor could not start.",
                                 "ModuleNotFoundError: No module named 'x'", None,
                                 error_type="JOB_SUPERVISOR_ACTOR_START_TIMEOUT")
    assert kind is K.INSUFFICIENT_RESOURCES and "JOB_SUPERVISOR_ACTOR_START_TIMEOUT" in why
    # ... and a type that is not in Ray's vocabulary is ignored, not trusted.
    assert classify_failure("FAILED", "", "ModuleNotFoundError: No module named 'x'", 1,
                            error_type="SOMETHING_NEW")[0] is K.USER_ERROR


@pytest.mark.parametrize("error_type", sorted(LEFT_TO_TEXT))
@pytest.mark.parametrize("message,log_tail,exit_code,kind", [
    (ENTRYPOINT_FAILED + VERL_TRACE.format(avail="4.0", want=8), "", 1, K.INSUFFICIENT_RESOURCES),
    ("", "FileNotFoundError: data.train_files: /x.parquet", 1, K.USER_ERROR),
    ("", "ZeroDivisionError: division by zero", 1, K.RUNTIME_ERROR),
    ("Unexpected error occurred: The actor died unexpectedly before finishing this task.", "", None,
     K.CLUSTER_LOST),
])
def test_types_that_do_not_say_why_leave_it_to_the_text(error_type, message, log_tail, exit_code, kind):
    assert classify_failure("FAILED", message, log_tail, exit_code, error_type=error_type)[0] is kind


def test_stopped_is_a_cancel_whatever_the_error_type():
    kind, _ = classify_failure("STOPPED", "Job was intentionally stopped.", "", -15,
                               error_type="JOB_SUPERVISOR_ACTOR_DIED")
    assert kind is K.CANCELED


def test_attempt_status_members_classify_like_their_strings():
    from argus.lifecycle import AttemptStatus

    assert classify_failure(AttemptStatus.STOPPED, "", "", None)[0] is K.CANCELED
    assert classify_failure(AttemptStatus.LOST, "", "", None)[0] is K.CLUSTER_LOST


# The end of a real verl 0.9.1 GRPO run on a node without GPUs (torch 2.13.0+cpu): every
# optional engine it lacks is a UserWarning naming a ModuleNotFoundError, and the failure
# is NCCL's, where its workers first need the device.
VERL_ON_CPU = """\
(TaskRunnerV1 pid=31884) /venv/lib/python3.11/site-packages/verl/workers/engine/__init__.py:32: UserWarning: \
torchtitan engine is not available: ModuleNotFoundError("No module named 'torchtitan'")
(TaskRunnerV1 pid=31884)   warnings.warn(f"torchtitan engine is not available: {e!r}", stacklevel=1)
  File "/venv/lib/python3.11/site-packages/verl/utils/distributed.py", line 93, in initialize_global_process_group_ray
    torch.distributed.init_process_group(
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2181, in _new_process_group_helper
    raise RuntimeError("Distributed package doesn't have NCCL built in")
RuntimeError: Distributed package doesn't have NCCL built in

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
(WorkerDict pid=848) /venv/lib/python3.11/site-packages/verl/workers/engine/__init__.py:60: UserWarning: \
mindspeed engine is not available: ModuleNotFoundError("No module named 'megatron'")
"""


def test_no_gpu_is_a_runtime_error_named_as_such_and_warnings_are_not_evidence():
    kind, evidence = classify_failure("FAILED", "Job entrypoint command failed with exit code 1", VERL_ON_CPU, 1)
    assert kind is K.RUNTIME_ERROR and not kind.is_retryable()
    assert evidence == "no usable GPU: RuntimeError: Distributed package doesn't have NCCL built in"
    for said in ("RuntimeError: No CUDA GPUs are available",
                 "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
                 "AssertionError: Torch not compiled with CUDA enabled",
                 "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"):
        kind, evidence = classify_failure("FAILED", "", said, 1)
        assert kind is K.RUNTIME_ERROR and evidence.startswith("no usable GPU: "), said
    # A warning alone is no user error: the run failed for a reason the log does not give.
    only_warning = VERL_ON_CPU.split("  File")[0]
    assert classify_failure("FAILED", "", only_warning, 1)[0] is K.RUNTIME_ERROR
