"""This host's processes as ``/proc`` shows them, read with bounds: which belong to an
attempt (``ARGUS_SUBMISSION_ID`` in their environment), their command lines, parents.

Used by a stalled attempt's driver to find what to dump (``argus.nodepool.stacks``) and by
a node's keeper to find what outlived its attempt (``argus.nodepool.keeper``). A process
may vanish between two reads, and another user's may not be readable: both are skipped.
"""

from __future__ import annotations

import os
import time

__all__ = ["ATTEMPT_KEY", "CLEAR_WAIT_S", "ancestors_of", "argv_of", "attempt_processes", "command_line", "descendants_of", "parent_of", "still_here"]

ATTEMPT_KEY = "ARGUS_SUBMISSION_ID"
MAX_ENVIRON_BYTES = 256 * 1024
CLEAR_WAIT_S = 3.0  # how long a driver's exit report waits for its attempt's processes to end
_COMMAND_CHARS = 200


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _environ_value(pid: int, prefix: bytes) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            blob = f.read(MAX_ENVIRON_BYTES)
    except OSError:  # gone, or not ours to read
        return None
    for item in blob.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def attempt_processes(only: str | None = None, exclude: tuple[int, ...] = ()) -> dict[int, str]:
    """The processes of this host that belong to an attempt, by pid: their submission id
    (``only``: of that attempt alone). A process can set its own environment, so this says
    what a process claims; callers judge only their own attempts' processes by it."""
    prefix = f"{ATTEMPT_KEY}=".encode()
    found = {}
    for pid in _pids():
        if pid in exclude:
            continue
        value = _environ_value(pid, prefix)
        if value is not None and (only is None or value == only):
            found[pid] = value
    return dict(sorted(found.items()))


def argv_of(pid: int, limit: int = 65_536) -> list[str]:
    """The process's arguments, whole (up to ``limit`` bytes in all): a raylet's run long."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            blob = f.read(limit)
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in blob.split(b"\0") if a]


def command_line(pid: int) -> str:
    """The process's command line, arguments space-separated, at most 200 characters."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:_COMMAND_CHARS]
    except OSError:
        return ""


def parent_of(pid: int) -> int | None:
    """The parent pid (None: the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    # The command name, in parentheses, may itself hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def ancestors_of(pid: int) -> list[int]:
    """The process's parent, its parent's, ... up to (not including) pid 1."""
    out: list[int] = []
    while (parent := parent_of(pid)) is not None and parent > 1 and parent not in out and len(out) < 64:
        out.append(parent)
        pid = parent
    return out


def descendants_of(root: int) -> list[int]:
    """Every process below ``root`` (one pass over the table)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = parent_of(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def still_here(submission_id: str, wait_s: float = CLEAR_WAIT_S) -> dict[int, str]:
    """A job's driver's look, once its command's group is killed: the processes of the
    attempt still on this host after up to ``wait_s``, by pid (the job's Ray workers end
    once their driver is gone). Not counted: the caller (the driver), and Ray's job plumbing around it, which ends after it: its
    ancestors of the attempt (the supervisor, the entrypoint's shell) and what they started
    besides this driver (the supervisor's watchdog shell and its ``sleep``)."""
    me = os.getpid()
    deadline = time.monotonic() + wait_s
    while True:
        found = attempt_processes(only=submission_id, exclude=(me,))
        plumbing = {a for a in ancestors_of(me) if a in found}
        left = {pid: sid for pid, sid in found.items() if not _started_by(pid, plumbing, me)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _started_by(pid: int, plumbing: set[int], me: int) -> bool:
    """Whether ``pid`` is one of ``plumbing`` or below one, and not below ``me``."""
    for up in (pid, *ancestors_of(pid)):
        if up == me:
            return False
        if up in plumbing:
            return True
    return False
