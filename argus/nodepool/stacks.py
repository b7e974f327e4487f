"""Python stack dumps of a stalled attempt, taken by its driver and by the keepers of the
nodes its Ray workers run on.

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
- ``requests/<sid>.stacks``: the reactor's request (empty); it stays until the attempt
  ends (the reactor removes it then), and each answerer answers it once;
- ``stacks/<sid>.txt``: the driver's dumps, at most ``MAX_DUMP_BYTES`` (each process at
  most ``MAX_PROCESS_BYTES``); the driver also leaves a copy, ``stacks.txt``, in the
  attempt's job folder, for the user's own tools;
- ``stacks/<sid>.json``: the driver's summary (``StacksSummary``), written after the dumps;
- ``stacks/<sid>@<node id>.txt`` and ``.json``: the same from the keeper of each node
  (``argus.nodepool.keeper``) that runs processes of the attempt on another host than its
  driver. A keeper on the driver's own host leaves only a summary that says so: the
  driver dumped that host.

The reactor waits for the driver's summary and one from the keeper of every node of the
attempt that has one (``merge_summaries``), at most ``stall.stacks_wait_s``.

Bounds: at most ``MAX_PROCESSES`` processes per host, ``PY_SPY_TIMEOUT_S`` each; an
environment is read with a bound (``argus.proctable``); at most ``MAX_NODE_ANSWERS`` node
answers are read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

from argus import layout, safefs
from argus.proctable import argv_of, attempt_processes, command_line


__all__ = [
    "ProcessStack", "StackDesk", "StacksSummary", "answer_for_node", "attempt_pids", "attempts_dir", "capture_stacks", "merge_summaries",
    "read_node_summaries", "read_stacks", "read_summary", "request_stacks", "requested", "stacks_requested",
    "withdraw_stacks_request",
]

MAX_PROCESSES = 32
MAX_PROCESS_BYTES = 64 * 1024
MAX_DUMP_BYTES = 512 * 1024
MAX_SUMMARY_BYTES = 16 * 1024
PY_SPY_TIMEOUT_S = 10.0
MAX_NODE_ANSWERS = 64
MAX_REQUESTS = 256
_FRAME_CHARS = 200


class ProcessStack(msgspec.Struct, frozen=True, kw_only=True):
    """One dumped process: its pid, command line and innermost frame of its first thread."""

    pid: int
    command: str
    top_frame: str = ""


class StacksSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What one answerer dumped for the attempt: ``processes`` dumped (``skipped``: found
    but not dumped, not Python or py-spy failed), ``dump_bytes`` written, ``note`` why
    none. ``node_id``: the keeper's node ("": the driver). ``missing``: in a merged
    summary, the nodes whose keepers had not answered."""

    submission_id: str
    captured_at: float
    hostname: str
    processes: list[ProcessStack] = []
    skipped: int = 0
    dump_bytes: int = 0
    note: str = ""
    node_id: str = ""
    missing: list[str] = []


def attempts_dir(shared_root: str) -> Path:
    """The control plane's folder of the drivers' reports (``argus.rayjobs.reports``), the
    stacks, and the reactor's live set (``argus.nodepool.keeper``)."""
    return Path(layout.attempts_dir(shared_root))


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


def requested(shared_root: str) -> list[str]:
    """The attempts whose stacks are asked for (a keeper's look, the first ``MAX_REQUESTS``)."""
    try:
        names = os.listdir(_requests_dir(shared_root))
    except OSError:
        return []
    return sorted(n[: -len(".stacks")] for n in names if n.endswith(".stacks") and not n.startswith("."))[:MAX_REQUESTS]


def withdraw_stacks_request(shared_root: str, submission_id: str) -> None:
    """The reactor's side, once the attempt ended."""
    try:
        os.unlink(_requests_dir(shared_root) / f"{submission_id}.stacks")
    except OSError:
        pass


def _name(submission_id: str, node_id: str) -> str:
    return f"{submission_id}@{node_id}" if node_id else submission_id


def read_summary(shared_root: str, submission_id: str, node_id: str = "") -> StacksSummary | None:
    """The driver's stacks summary (``node_id``: that node's keeper's); None: none yet, or
    not that attempt's."""
    body = safefs.read_bounded(_stacks_dir(shared_root) / f"{_name(submission_id, node_id)}.json", MAX_SUMMARY_BYTES)
    if body is None or len(body) > MAX_SUMMARY_BYTES:
        return None
    try:
        summary = msgspec.json.decode(body, type=StacksSummary)
    except msgspec.DecodeError:
        return None
    return summary if (summary.submission_id, summary.node_id) == (submission_id, node_id) else None


def _node_answers(shared_root: str, submission_id: str, suffix: str) -> list[str]:
    """The node ids whose keepers left a file for the attempt (the first ``MAX_NODE_ANSWERS``)."""
    try:
        names = os.listdir(_stacks_dir(shared_root))
    except OSError:
        return []
    head = f"{submission_id}@"
    return sorted(n[len(head): -len(suffix)] for n in names if n.startswith(head) and n.endswith(suffix))[:MAX_NODE_ANSWERS]


def read_node_summaries(shared_root: str, submission_id: str) -> dict[str, StacksSummary]:
    """The keepers' summaries for the attempt, by node id."""
    found = {n: read_summary(shared_root, submission_id, n) for n in _node_answers(shared_root, submission_id, ".json")}
    return {n: s for n, s in found.items() if s is not None}


def merge_summaries(driver: StacksSummary | None, nodes: dict[str, StacksSummary],
                    expected: set[str]) -> StacksSummary | None:
    """One summary of the attempt's stacks: the driver's and the keepers', with the
    expected nodes that have not answered as ``missing``. None until the driver answered."""
    if driver is None:
        return None
    parts = [driver, *(nodes[n] for n in sorted(nodes))]
    notes = [f"{s.hostname}: {s.note}" if s.node_id else s.note for s in parts if s.note]
    return msgspec.structs.replace(
        driver, processes=[p for s in parts for p in s.processes][:MAX_PROCESSES * 4],
        skipped=sum(s.skipped for s in parts), dump_bytes=sum(s.dump_bytes for s in parts),
        note="; ".join(notes)[:1000], missing=sorted(expected - nodes.keys()))


def read_stacks(shared_root: str, submission_id: str) -> str | None:
    """The attempt's dumps as text, the driver's then each node's (None: none were saved)."""
    names = [submission_id, *(f"{submission_id}@{n}" for n in _node_answers(shared_root, submission_id, ".txt"))]
    parts: list[bytes] = []
    for name in names:
        body = safefs.read_bounded(_stacks_dir(shared_root) / f"{name}.txt", MAX_DUMP_BYTES)
        if body:
            parts.append(body[:MAX_DUMP_BYTES])
    if not parts:
        return None
    return b"".join(parts)[:MAX_DUMP_BYTES * 2].decode("utf-8", "replace")


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
                   exclude: tuple[int, ...] = (), node_id: str = "") -> StacksSummary:
    """Dump the attempt's processes on this host, save the dumps and their summary (the
    summary last: the reactor takes it as the sign that the dumps are there). ``node_id``:
    a keeper answering for its node ("": the driver)."""
    return _capture(shared_root, submission_id, attempt_pids(submission_id, exclude), job_folder, node_id)


def answer_for_node(shared_root: str, submission_id: str, node_id: str, exclude: tuple[int, ...] = ()) -> StacksSummary:
    """A keeper's answer: the attempt's processes on this host, unless its driver runs here
    too (then the driver dumps this host, and the keeper only says so)."""
    pids = attempt_pids(submission_id, exclude)
    if any(_is_driver(pid) for pid in pids):
        summary = StacksSummary(submission_id=submission_id, captured_at=time.time(), hostname=_hostname(),
                                node_id=node_id, note="")
        safefs.write_atomic(_stacks_dir(shared_root) / f"{_name(submission_id, node_id)}.json", msgspec.json.encode(summary))
        return summary
    return _capture(shared_root, submission_id, pids, None, node_id)


def _is_driver(pid: int) -> bool:
    argv = argv_of(pid, limit=4096)
    return any(argv[i:i + 2] == ["-m", "argus.driver"] for i in range(len(argv)))


def _hostname() -> str:
    return socket.gethostname()


def _capture(shared_root: str, submission_id: str, pids: list[int], job_folder: Path | None,
             node_id: str) -> StacksSummary:
    tool = py_spy()
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
    summary = StacksSummary(submission_id=submission_id, captured_at=time.time(), hostname=_hostname(),
                            processes=dumped, skipped=len(pids) - len(dumped), dump_bytes=len(body), note=note,
                            node_id=node_id)
    name = _name(submission_id, node_id)
    safefs.write_atomic(_stacks_dir(shared_root) / f"{name}.txt", body)
    if job_folder is not None:
        _user_copy(job_folder, body)
    safefs.write_atomic(_stacks_dir(shared_root) / f"{name}.json", msgspec.json.encode(summary))
    return summary


class StackDesk:
    """The driver's side: answers the reactor's request for its attempt's stacks, once: one stat a second, and the dumps taken on a thread, so that the command's output
    is still read meanwhile (a full pipe would block the very processes being dumped). The
    request stays for the nodes' keepers; the reactor removes it when the attempt ends."""

    CHECK_S = 1.0

    def __init__(self, shared_root: str, submission_id: str, job_folder: Path) -> None:
        self.shared_root, self.submission_id, self.job_folder = shared_root, submission_id, job_folder
        self._checked_at = 0.0
        self._busy: threading.Thread | None = None

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self.CHECK_S or self._busy is not None:
            return
        self._checked_at = now
        if stacks_requested(self.shared_root, self.submission_id):
            self._busy = threading.Thread(target=self._answer, name="argus-stacks", daemon=True)
            self._busy.start()

    def _answer(self) -> None:
        try:
            capture_stacks(self.shared_root, self.submission_id, self.job_folder, exclude=(os.getpid(),))
        except OSError:
            pass  # the control plane's folder is unwritable: the reactor stops the job after its wait
