"""Python stack dumps of a stalled attempt, taken on its node by its driver.

A hung verl run holds its GPUs and prints nothing; what its maintainers ask for first is a
stack dump of the TaskRunner and WorkerDict processes. So before the stall watchdog stops
an attempt, the reactor asks its driver for one (a request file), and the driver, which
runs on the node outside the confinement of the command, dumps every process of this host
that belongs to the attempt: the processes whose environment carries the attempt's
``ARGUS_SUBMISSION_ID`` (the command and its children get it from the driver, the job's
Ray workers from the job's runtime env). Each is dumped with ``py-spy dump`` (a process
that is not Python is skipped). The reactor records a summary (``AttemptStacksCaptured``)
and then stops the job.

Files, in the control plane's folder of the shared root (out of every confined job's reach,
as the drivers' other reports, ``argus.rayjobs.reports``):
- ``requests/<sid>.stacks``: the reactor's request (empty); the driver removes it once done;
- ``stacks/<sid>.txt``: the dumps, at most ``MAX_DUMP_BYTES`` (each process at most
  ``MAX_PROCESS_BYTES``); the driver also leaves a copy, ``stacks.txt``, in the attempt's
  job folder, for the user's own tools;
- ``stacks/<sid>.json``: the summary (``StacksSummary``), written after the dumps.

Bounds: at most ``MAX_PROCESSES`` processes, ``PY_SPY_TIMEOUT_S`` each; an environment is
read with a bound (``argus.proctable``). Only this host is searched: a multi-node job's workers on
other nodes are not dumped (the summary says how many processes were found here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from argus import safefs
from argus.proctable import attempt_processes, command_line
from argus.rayjobs.reports import attempts_dir

__all__ = [
    "ProcessStack", "StacksSummary", "attempt_pids", "capture_stacks", "read_stacks", "read_summary",
    "request_stacks", "stacks_requested", "withdraw_stacks_request",
]

MAX_PROCESSES = 32
MAX_PROCESS_BYTES = 64 * 1024
MAX_DUMP_BYTES = 512 * 1024
MAX_SUMMARY_BYTES = 16 * 1024
PY_SPY_TIMEOUT_S = 10.0
_FRAME_CHARS = 200


class ProcessStack(msgspec.Struct, frozen=True, kw_only=True):
    """One dumped process: its pid, command line and innermost frame of its first thread."""

    pid: int
    command: str
    top_frame: str = ""


class StacksSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What the driver dumped for its attempt: ``processes`` dumped (``skipped``: found but
    not dumped, not Python or py-spy failed), ``dump_bytes`` written, ``note`` why none."""

    submission_id: str
    captured_at: float
    hostname: str
    processes: list[ProcessStack] = []
    skipped: int = 0
    dump_bytes: int = 0
    note: str = ""


def _requests_dir(shared_root: str) -> Path:
    return attempts_dir(shared_root) / "requests"


def _stacks_dir(shared_root: str) -> Path:
    return attempts_dir(shared_root) / "stacks"


def request_stacks(shared_root: str, submission_id: str) -> None:
    """The reactor's side: ask the attempt's driver for its stacks (idempotent)."""
    folder = _requests_dir(shared_root)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{submission_id}.stacks").touch()


def stacks_requested(shared_root: str, submission_id: str) -> bool:
    """The driver's side: one stat."""
    return os.path.exists(_requests_dir(shared_root) / f"{submission_id}.stacks")


def withdraw_stacks_request(shared_root: str, submission_id: str) -> None:
    try:
        os.unlink(_requests_dir(shared_root) / f"{submission_id}.stacks")
    except OSError:
        pass


def read_summary(shared_root: str, submission_id: str) -> StacksSummary | None:
    """The attempt's stacks summary (None: none yet, or not that attempt's)."""
    body = safefs.read_bounded(_stacks_dir(shared_root) / f"{submission_id}.json", MAX_SUMMARY_BYTES)
    if body is None or len(body) > MAX_SUMMARY_BYTES:
        return None
    try:
        summary = msgspec.json.decode(body, type=StacksSummary)
    except msgspec.DecodeError:
        return None
    return summary if summary.submission_id == submission_id else None


def read_stacks(shared_root: str, submission_id: str) -> str | None:
    """The attempt's dumps as text (None: none were saved)."""
    body = safefs.read_bounded(_stacks_dir(shared_root) / f"{submission_id}.txt", MAX_DUMP_BYTES)
    return None if body is None else body[:MAX_DUMP_BYTES].decode("utf-8", "replace")


def attempt_pids(submission_id: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """The processes of this host whose environment names the attempt, lowest pid first."""
    return list(attempt_processes(only=submission_id, exclude=exclude))


def _top_frame(dump: str) -> str:
    """The innermost frame of the first thread of a py-spy dump (the line after 'Thread')."""
    lines = dump.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Thread ") and i + 1 < len(lines):
            return lines[i + 1].strip()[:_FRAME_CHARS]
    return ""


def py_spy() -> str | None:
    """py-spy next to this interpreter (a virtualenv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _dump(tool: str, pid: int) -> str | None:
    """One process's stacks, bounded; None: not Python, gone, or py-spy could not read it."""
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True,
                              timeout=PY_SPY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or b"Thread " not in done.stdout:
        return None
    return done.stdout[:MAX_PROCESS_BYTES].decode("utf-8", "replace")


def _user_copy(job_folder: Path, body: bytes) -> None:
    """``stacks.txt`` in the job folder, which the job could have filled with links: the
    folder is opened without following one, the file made beside it and renamed there."""
    try:
        dirfd = os.open(job_folder, safefs.DIR_FLAGS)
    except OSError:
        return
    try:
        out = safefs.AtomicWrite(dirfd, "stacks.txt", "stacks.txt")  # owns dirfd from here
    except safefs.Refused:
        return  # a folder or a link there: the control plane's copy is what is served
    try:
        out.write(body)
        out.commit()
    except safefs.Refused:
        out.abort()


def capture_stacks(shared_root: str, submission_id: str, job_folder: Path | None = None,
                   exclude: tuple[int, ...] = ()) -> StacksSummary:
    """Dump the attempt's processes on this host, save the dumps and their summary (the
    summary last: the reactor takes it as the sign that the dumps are there)."""
    import socket

    tool = py_spy()
    pids = attempt_pids(submission_id, exclude)
    parts: list[str] = []
    dumped: list[ProcessStack] = []
    size, note = 0, ""
    if tool is None:
        note = "py-spy is not installed on this node (pip install py-spy)"
    elif not pids:
        note = "no process of this attempt was found on this node"
    for pid in pids[:MAX_PROCESSES] if tool is not None else ():
        text = _dump(tool, pid) if tool is not None else None
        if text is None or size + len(text) > MAX_DUMP_BYTES:
            continue
        command = command_line(pid)
        parts.append(f"=== pid {pid}: {command}\n{text}\n")
        size += len(parts[-1])
        dumped.append(ProcessStack(pid=pid, command=command, top_frame=_top_frame(text)))
    if tool and pids and not dumped:
        note = f"none of its {len(pids)} processes here could be dumped (not Python, or py-spy was refused)"
    body = "".join(parts).encode()
    summary = StacksSummary(submission_id=submission_id, captured_at=time.time(), hostname=socket.gethostname(),
                            processes=dumped, skipped=len(pids) - len(dumped), dump_bytes=len(body), note=note)
    safefs.write_atomic(_stacks_dir(shared_root) / f"{submission_id}.txt", body)
    if job_folder is not None:
        _user_copy(job_folder, body)
    safefs.write_atomic(_stacks_dir(shared_root) / f"{submission_id}.json", msgspec.json.encode(summary))
    return summary
