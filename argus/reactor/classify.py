"""Why did an attempt fail? A pure function of what Ray and the driver told us.

Order matters and is deliberate:
1. ``STOPPED`` is a cancellation, whatever the log says.
2. Ray's own ``error_type`` (JobErrorType), where it says enough by itself: Ray knows why
   its job supervisor did not start or died better than any pattern over its message. A
   driver that ran and exited non-zero (JOB_ENTRYPOINT_COMMAND_ERROR), or an error Ray
   could not name, says nothing about *why*: the text decides those.
3. verl's fail-fast GPU check is looked for first among the texts: it is the one failure the
   service retries on purpose (docs/scheduling.md, INSUFFICIENT_RESOURCES), and it appears inside a RayTaskError whose
   traceback also mentions actors, so cluster patterns must not shadow it.
4. Transient faults of the run, by the words of the code that reports them, before cluster
   loss: a rank whose NCCL watchdog fired, or that ran out of memory, takes its actor down,
   and Ray then reports the actor dead ("died unexpectedly"), which is a consequence. An
   out-of-memory on one rank makes the others time out in their next collective, so the
   OOMs are looked for first.
   Cluster loss (supervisor/node/GCS gone) is retryable and not the user's fault.
5. No usable GPU where the job needed one (a CPU-only torch, no driver, no NCCL): a runtime
   error, named as such. verl on a node without GPUs gets through Hydra, its TaskRunner and
   its placement groups, then fails here; it would fail the same way again.
6. User errors (bad paths, bad config, bad command) are not retried. Python warnings are
   not evidence: verl warns ``ModuleNotFoundError("No module named 'megatron'")`` for
   every optional engine it lacks, on every run.
7. Any other non-zero exit is a runtime error; a failure without evidence is UNKNOWN.

Evidence is the matching line (≤ 500 chars) so the log answers "why" without the logs.
"""

from __future__ import annotations

import re

from argus.events.catalog import FailureKind
from argus.lifecycle import AttemptStatus
from argus.rayjobs.gateway import is_duplicate_submission  # re-exported: classify's callers use it

__all__ = ["BY_ERROR_TYPE", "EVIDENCE_MAX", "classify_failure", "is_duplicate_submission", "last_step"]

EVIDENCE_MAX = 500

# Ray's JobErrorType (ray.dashboard.modules.job.common, Ray 2.60) → kind, for the types that decide
# alone. Kept consistent with the text rules below, which still catch the same failures on
# a Ray that does not report error_type.
BY_ERROR_TYPE: dict[str, FailureKind] = {
    # The supervisor (the driver's actor, pinned by entrypoint_resources to a worker_node
    # slot) was created but not placed before Ray's timeout: no worker had room for it.
    "JOB_SUPERVISOR_ACTOR_START_TIMEOUT": FailureKind.INSUFFICIENT_RESOURCES,
    # Ray gave up placing it (ActorUnschedulableError: the node it was bound to is gone),
    # it died, or it could not be created: the cluster's failure, not the task's; retried
    # within max_attempts, as the text rules "could not be scheduled"/"died" already did.
    "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE": FailureKind.CLUSTER_LOST,
    "JOB_SUPERVISOR_ACTOR_DIED": FailureKind.CLUSTER_LOST,
    "JOB_SUPERVISOR_ACTOR_START_FAILURE": FailureKind.CLUSTER_LOST,
    # pip/conda/working_dir of the runtime_env: what the task asked for could not be set up.
    "RUNTIME_ENV_SETUP_FAILURE": FailureKind.USER_ERROR,
    # The entrypoint process could not even be spawned: Argus's own driver command, so not
    # the user's error, and not a race worth retrying.
    "JOB_ENTRYPOINT_COMMAND_START_ERROR": FailureKind.RUNTIME_ERROR,
    # JOB_ENTRYPOINT_COMMAND_ERROR (exit code ≠ 0) and JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE:
    # left to the text.
}

# verl ResourcePoolManager._check_resource_available: the total is a sum of floats (8.0) or
# ints (0) depending on Ray's report; the desired total is an int.
_INSUFFICIENT = [
    re.compile(r"Total available GPUs \d+(?:\.\d+)? is less than total desired GPUs \d+"),
    # Ray could not place the driver itself (no free worker_node slot) before its timeout.
    re.compile(r"Job supervisor actor failed to start within"),
]

# Each kind's texts, with the source that prints them.
_TRANSIENT: list[tuple[FailureKind, list[re.Pattern[str]]]] = [
    (FailureKind.CUDA_OOM, [
        # PyTorch c10/cuda/CUDACachingAllocator.cpp (malloc): TORCH_CHECK_WITH(OutOfMemoryError,
        # false, "CUDA out of memory. Tried to allocate ", ...), raised in Python as
        # torch.OutOfMemoryError (torch.cuda.OutOfMemoryError before 2.5).
        re.compile(r"CUDA out of memory\. Tried to allocate"),
        # c10/cuda/CUDAException.h C10_CUDA_CHECK on cudaErrorMemoryAllocation (a kernel's
        # or NCCL's own allocation): "CUDA error: out of memory".
        re.compile(r"CUDA error: out of memory"),
    ]),
    (FailureKind.HOST_OOM, [
        # Ray's memory monitor (src/ray/raylet/node_manager.cc, worker killing policy):
        # Ray 2.60 "%d worker(s) were killed due to the node running low on memory.";
        # Ray < 2.56 "Task was killed due to the node running low on memory."; both raised
        # to the caller as ray.exceptions.OutOfMemoryError (python/ray/exceptions.py).
        re.compile(r"killed due to the node running low on memory"),
        re.compile(r"ray\.exceptions\.OutOfMemoryError"),
    ]),
    (FailureKind.NCCL_TIMEOUT, [
        # PyTorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (WorkNCCL::checkTimeout):
        # c10::str(logPrefix(), "Watchdog caught collective operation timeout: ", *this,
        # " ran for ", ms, " milliseconds before timing out.") as a DistBackendError.
        re.compile(r"Watchdog caught collective operation timeout"),
        # The same file's heartbeat monitor, when the watchdog itself hangs in a collective:
        # "ProcessGroupNCCL's watchdog got stuck for N seconds without making progress ...".
        re.compile(r"watchdog got stuck for \d+ seconds without making progress"),
    ]),
]

_CLUSTER_LOST = [
    re.compile(r"Job supervisor actor died"),
    re.compile(r"Job supervisor actor could not be scheduled"),
    re.compile(r"failed to get job supervisor"),
    re.compile(r"The actor died unexpectedly before finishing this task"),
    re.compile(r"The actor is dead because its node has died"),
    re.compile(r"NodeDiedError|node .{0,80} (?:has died|is dead|was marked dead)", re.I),
    re.compile(r"The task's local raylet died"),
    re.compile(r"The worker died unexpectedly while executing this task"),
    re.compile(r"Failed to connect to GCS|Unable to connect to GCS"),
    re.compile(r"GCS (?:server )?(?:is )?unreachable|lost connection to (?:the )?GCS", re.I),
    re.compile(r"[Jj]ob status (?:was )?lost|job .{0,40} is lost"),
    re.compile(r"OwnerDiedError|ObjectLostError"),
]

_USER = [
    re.compile(r"FileNotFoundError|No such file or directory"),
    re.compile(r"ModuleNotFoundError|ImportError: No module named"),
    re.compile(r"hydra\.errors\.\w+|omegaconf\.errors\.\w+|Could not override '[^']*'"),
    re.compile(r"Key '[^']*' is not in struct|ConfigAttributeError|ConfigKeyError|MissingMandatoryValue"),
    re.compile(r"(?:^|\s)usage: .+", re.M),
    re.compile(r"error: (?:unrecognized arguments|the following arguments are required|argument )"),
    re.compile(r"command not found"),
    re.compile(r"PermissionError|Permission denied"),
    re.compile(r"runtime_env setup failed"),
    # argus.driver, v2.output.on_exceed: stop: it would print as much again.
    re.compile(r"\[argus\.driver\] stopping the command: its output passed its budget"),
]

# The job needed a GPU and found none it could use (torch's and NCCL's own words).
_NO_GPU = [
    re.compile(r"Distributed package doesn't have NCCL built in"),
    re.compile(r"No CUDA GPUs are available"),
    re.compile(r"Found no NVIDIA driver on your system"),
    re.compile(r"Torch not compiled with CUDA enabled"),
    re.compile(r"CUDA driver initialization failed"),
    re.compile(r"no CUDA-capable device is detected"),
    re.compile(r"ProcessGroupNCCL is only supported with GPUs"),  # a CUDA build of torch, no GPU
]

# A Python warning line (or the source line it quotes): says what is missing, not what failed.
_WARNING_LINE = re.compile(r"^.*(?:\b\w*Warning: |warnings\.warn\().*$\n?", re.M)

# Shell convention: 2 = misuse/usage (argparse, Hydra), 126 = not executable, 127 = not found.
_USER_EXIT_CODES = frozenset({2, 126, 127})


def _excerpt(text: str, match: re.Match[str]) -> str:
    """The whole line holding the match, trimmed to EVIDENCE_MAX around the match."""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start: end if end != -1 else len(text)].strip()
    if len(line) <= EVIDENCE_MAX:
        return line
    offset = max(0, match.start() - start - 100)
    return line[offset: offset + EVIDENCE_MAX]


def _search(patterns: list[re.Pattern[str]], *texts: str) -> str | None:
    for text in texts:
        if not text:
            continue
        for pat in patterns:
            m = pat.search(text)
            if m:
                # Ray wraps an exception raised in an actor as
                # ``RayTaskError(ModuleNotFoundError): ray::TaskRunner.run() …``; the line
                # that says what to fix is the inner one further down.
                inner = _innermost_exception_line(text)
                if inner and pat.search(inner):
                    return inner
                return _excerpt(text, m)
    return None


# ``SomeError: …`` (optionally dotted), not Ray's wrapper line.
_INNER_EXC_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception): .*$", re.M)


def _innermost_exception_line(text: str) -> str | None:
    """The last ``SomeError: message`` line of a traceback that is not a Ray wrapper."""
    for found in reversed(_INNER_EXC_LINE.findall(text)):
        line = found.strip()
        if "RayTaskError" not in line and "RayActorError" not in line:
            return line[:EVIDENCE_MAX]
    return None


def classify_failure(
    ray_status: str | None, message: str, log_tail: str, exit_code: int | None,
    error_type: str | None = None,
) -> tuple[FailureKind, str]:
    """Classify one ended attempt; returns ``(kind, evidence)``. ``ray_status`` is Ray's job
    status (FAILED, STOPPED, …) or Argus's LOST/NOT_SUBMITTED (an ``AttemptStatus`` or its
    string); ``message`` is Ray's job message (which itself ends with the log tail on
    entrypoint failures); ``error_type`` is Ray's JobErrorType value, when Ray gave one."""
    status = (ray_status or "").upper()
    message = message or ""
    log_tail = log_tail or ""
    if status == AttemptStatus.STOPPED:
        return FailureKind.CANCELED, _trim(message) or "Ray job STOPPED"
    by_type = BY_ERROR_TYPE.get((error_type or "").upper())
    if by_type is not None:
        return by_type, _by_type_evidence(str(error_type), message)
    hit = _search(_INSUFFICIENT, log_tail, message)
    if hit:
        return FailureKind.INSUFFICIENT_RESOURCES, hit
    for kind, patterns in _TRANSIENT:
        hit = _search(patterns, log_tail, message)
        if hit:
            return kind, hit
    hit = _search(_CLUSTER_LOST, message, log_tail)
    if hit:
        return FailureKind.CLUSTER_LOST, hit
    if status == AttemptStatus.LOST:
        return FailureKind.CLUSTER_LOST, _trim(message) or "Ray has no record of the job"
    log_tail, message = _WARNING_LINE.sub("", log_tail), _WARNING_LINE.sub("", message)
    hit = _search(_NO_GPU, log_tail, message)
    if hit:
        return FailureKind.RUNTIME_ERROR, f"no usable GPU: {hit}"[:EVIDENCE_MAX]
    hit = _search(_USER, log_tail, message)
    if hit:
        return FailureKind.USER_ERROR, hit
    if exit_code in _USER_EXIT_CODES:
        return FailureKind.USER_ERROR, _last_line(log_tail) or f"exit code {exit_code}"
    if exit_code is not None and exit_code != 0:
        # The log's exception, else Ray's message's: the log Ray gives can hold only its own
        # lines ("Runtime env is setting up."), while its message ends with the traceback.
        return FailureKind.RUNTIME_ERROR, (_exception_line(log_tail) or _exception_line(message)
                                           or _last_line(log_tail) or f"exit code {exit_code}")
    return FailureKind.UNKNOWN, _trim(message) or f"status {status or '?'}, exit code {exit_code}"


def _by_type_evidence(error_type: str, message: str) -> str:
    """Ray's error type and the first line of its message: the type decided, the message
    says what happened."""
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return f"{error_type.upper()}: {first}"[:EVIDENCE_MAX] if first else error_type.upper()[:EVIDENCE_MAX]


def _trim(text: str) -> str:
    return text.strip()[:EVIDENCE_MAX]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:EVIDENCE_MAX] if lines else ""


_EXC_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception)|AssertionError|KeyboardInterrupt)\b.*$", re.M)


def _exception_line(text: str) -> str:
    """The innermost ``SomeError: …`` line of a traceback ('' if there is none)."""
    inner = _innermost_exception_line(text)
    if inner:
        return inner
    found = _EXC_LINE.findall(text)
    return found[-1].strip()[:EVIDENCE_MAX] if found else ""


# verl's console logger (verl/utils/tracking.py, ``LocalLogger``/``console`` backend):
# ``step:12 - actor/loss:0.31 - ...`` after each training step; the toy trainer prints the same.
_STEP_LINE = re.compile(r"(?:^|[\s(])step:(\d{1,9})\b", re.M)


def last_step(log_tail: str) -> int | None:
    """The last training step the log shows (None: none shown)."""
    found = _STEP_LINE.findall(log_tail or "")
    return int(found[-1]) if found else None
