"""This host's processes as ``/proc`` shows them, read with bounds: which belong to an
attempt (``ARGUS_SUBMISSION_ID`` in their environment), their command lines, parents.

Used by a stalled attempt's driver to find what to dump (``argus.nodepool.stacks``) and by
a node's keeper to find what outlived its attempt (``argus.nodepool.keeper``). A process
may vanish between two reads, and another user's may not be readable: both are skipped.
"""

from __future__ import annotations

import os

__all__ = ["ATTEMPT_KEY", "ancestors_of", "argv_of", "attempt_processes", "command_line", "descendants_of", "parent_of"]

ATTEMPT_KEY = "ARGUS_SUBMISSION_ID"
MAX_ENVIRON_BYTES = 256 * 1024
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
