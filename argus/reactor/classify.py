"""Why did an attempt fail? A pure function of what Ray and the driver told us.

Order matters and is deliberate:
1. ``STOPPED`` is a cancellation, whatever the log says.
2. verl's fail-fast GPU check is looked for first among failures: it is the one failure the
   service retries on purpose (seed 002 §6.3), and it appears inside a RayTaskError whose
   traceback also mentions actors, so cluster patterns must not shadow it.
3. Cluster loss (supervisor/node/GCS gone) is retryable and not the user's fault.
4. User errors (bad paths, bad config, bad command) are not retried.
5. Any other non-zero exit is a runtime error; a failure without evidence is UNKNOWN.

Evidence is the matching line (≤ 500 chars) so the log answers "why" without the logs.
"""

from __future__ import annotations

import re

from argus.events.catalog import FailureKind
from argus.rayjobs.gateway import is_duplicate_submission  # re-exported: classify's callers use it

__all__ = ["EVIDENCE_MAX", "classify_failure", "is_duplicate_submission"]

EVIDENCE_MAX = 500

# verl ResourcePoolManager._check_resource_available: the total is a sum of floats (8.0) or
# ints (0) depending on Ray's report; the desired total is an int.
_INSUFFICIENT = [
    re.compile(r"Total available GPUs \d+(?:\.\d+)? is less than total desired GPUs \d+"),
    # Ray could not place the driver itself (no free worker_node slot) before its timeout.
    re.compile(r"Job supervisor actor failed to start within"),
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
]

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
    ray_status: str | None, message: str, log_tail: str, exit_code: int | None
) -> tuple[FailureKind, str]:
    """Classify one ended attempt; returns ``(kind, evidence)``. ``ray_status`` is Ray's job
    status (FAILED, STOPPED, …) or Argus's LOST/NOT_SUBMITTED; ``message`` is Ray's job
    message (which itself ends with the log tail on entrypoint failures)."""
    status = (ray_status or "").upper()
    message = message or ""
    log_tail = log_tail or ""
    if status == "STOPPED":
        return FailureKind.CANCELED, _trim(message) or "Ray job STOPPED"
    hit = _search(_INSUFFICIENT, log_tail, message)
    if hit:
        return FailureKind.INSUFFICIENT_RESOURCES, hit
    hit = _search(_CLUSTER_LOST, message, log_tail)
    if hit:
        return FailureKind.CLUSTER_LOST, hit
    if status == "LOST":
        return FailureKind.CLUSTER_LOST, _trim(message) or "Ray has no record of the job"
    hit = _search(_USER, log_tail, message)
    if hit:
        return FailureKind.USER_ERROR, hit
    if exit_code in _USER_EXIT_CODES:
        return FailureKind.USER_ERROR, _last_line(log_tail) or f"exit code {exit_code}"
    if exit_code is not None and exit_code != 0:
        return FailureKind.RUNTIME_ERROR, _last_error_line(log_tail) or f"exit code {exit_code}"
    return FailureKind.UNKNOWN, _trim(message) or f"status {status or '?'}, exit code {exit_code}"


def _trim(text: str) -> str:
    return text.strip()[:EVIDENCE_MAX]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:EVIDENCE_MAX] if lines else ""


_EXC_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception)|AssertionError|KeyboardInterrupt)\b.*$", re.M)


def _last_error_line(text: str) -> str:
    """The innermost ``SomeError: …`` line of a traceback, else the last line."""
    inner = _innermost_exception_line(text)
    if inner:
        return inner
    found = _EXC_LINE.findall(text)
    return found[-1].strip()[:EVIDENCE_MAX] if found else _last_line(text)
