"""A worker node's hygiene: what of an ended attempt still runs here (docs/runs.md, "Node
hygiene").

A stopped run can leave processes behind that still hold GPUs (AReaL #622, vLLM #20860),
and the next job on that node then fails. The reactor publishes which attempts are live
(``live.json``, ``write_live``); each node's keeper (run by ``argus node worker``, every
``CHECK_S``) finds the processes of this host that belong to an attempt
(``ARGUS_SUBMISSION_ID`` in their environment: a job's command, its children and its Ray
workers all carry it), and reports those whose attempt has not been live for ``grace_s``
(Ray's stop takes seconds), with their pids and commands; on a GPU host also any process
``nvidia-smi`` says holds a GPU while belonging to no live attempt. The reactor
quarantines a node whose report names leftovers of an attempt that ran there, and lifts
the quarantine when a report finds it clean (``argus.reactor.holds``).

A report also names the processes of attempts that left the live set less than
``grace_s`` ago (``ending``), and which live set it judged (``live_at``): a node an
attempt ended on admits again only once a report judged after the end finds none of its
processes (``argus.reactor.clearing``). So the keeper looks again as soon as the live set
changes (one ``stat`` a tick, ``due``), not only every ``CHECK_S``.

The keeper also answers the reactor's requests for a stalled attempt's stacks for its
node (``argus.nodepool.stacks.answer_for_node``), once each, on a thread: a multi-node
job's Ray workers on other hosts than its driver are dumped there.

Files, in the control plane's folder of the shared root, out of every job's reach:
``ray/attempts/live.json`` (the reactor's) and ``ray/nodes/<node id>.json`` (each keeper's).
A live set older than ``LIVE_FRESH_S`` (a reactor down or restarting) judges nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from argus import layout, proctable, safefs
from argus.nodepool.stacks import answer_for_node, attempts_dir, requested

__all__ = [
    "LiveAttempts", "Leftover", "NodeKeeper", "NodeReport", "gpu_holders", "raylet_node_id", "read_live",
    "read_node_reports", "write_live",
]

CHECK_S = 5.0
LIVE_FRESH_S = 120.0
LIVE_HEARTBEAT_S = 30.0  # the reactor rewrites live.json at least this often
MAX_LEFTOVERS = 50
MAX_REPORT_BYTES = 64 * 1024
MAX_NODES = 10_000


class LiveAttempts(msgspec.Struct, frozen=True, kw_only=True):
    """The attempts the reactor follows (started, submitted or running), at ``written_at``."""

    written_at: float
    submission_ids: list[str]


class Leftover(msgspec.Struct, frozen=True, kw_only=True):
    """A process of no live attempt: ``submission_id`` the attempt it belongs to ("": none,
    a process holding a GPU)."""

    pid: int
    submission_id: str
    command: str


class NodeReport(msgspec.Struct, frozen=True, kw_only=True):
    """A keeper's last look at its node: ``leftovers`` past the grace, ``ending`` within it,
    judged against the live set written at ``live_at``."""

    node_id: str
    hostname: str
    checked_at: float
    leftovers: list[Leftover] = []
    ending: list[Leftover] = []
    live_at: float = 0.0


def _folder(shared_root: str) -> Path:
    return Path(layout.control_dir(shared_root))


def _read(path: Path) -> bytes | None:
    body = safefs.read_bounded(path, MAX_REPORT_BYTES)
    return body if body is not None and len(body) <= MAX_REPORT_BYTES else None


def _live_path(shared_root: str) -> Path:
    return attempts_dir(shared_root) / "live.json"


def write_live(shared_root: str, live: LiveAttempts) -> None:
    safefs.write_atomic(_live_path(shared_root), msgspec.json.encode(live))


def report_path(shared_root: str, node_id: str) -> Path:
    return _folder(shared_root) / "nodes" / f"{node_id}.json"


def read_node_report(shared_root: str, node_id: str) -> NodeReport | None:
    """One node's keeper's last report (None: no keeper there, or unreadable)."""
    body = _read(report_path(shared_root, node_id))
    try:
        report = None if body is None else msgspec.json.decode(body, type=NodeReport)
    except msgspec.DecodeError:
        return None
    return report if report is not None and report.node_id == node_id else None


def read_live(shared_root: str) -> LiveAttempts | None:
    body = _read(_live_path(shared_root))
    try:
        return None if body is None else msgspec.json.decode(body, type=LiveAttempts)
    except msgspec.DecodeError:
        return None


def read_node_reports(shared_root: str) -> list[NodeReport]:
    """Every keeper's last report (the first ``MAX_NODES``)."""
    folder = _folder(shared_root) / "nodes"
    reports = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith("."))
    except OSError:
        return []
    for name in names[:MAX_NODES]:
        body = _read(folder / name)
        try:
            report = None if body is None else msgspec.json.decode(body, type=NodeReport)
        except msgspec.DecodeError:
            continue
        if report is not None and f"{report.node_id}.json" == name:
            reports.append(report)
    return reports


def gpu_holders(nvidia_smi: str | None) -> list[int]:
    """The pids ``nvidia-smi`` says hold a GPU (none without it, or when it fails)."""
    if not nvidia_smi:
        return []
    try:
        done = subprocess.run([nvidia_smi, "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_pids(done.stdout.decode("ascii", "replace")) if done.returncode == 0 else []


def parse_pids(text: str) -> list[int]:
    """``nvidia-smi --query-compute-apps=pid --format=csv,noheader``: one pid a line."""
    return [int(line.strip()) for line in text.splitlines() if line.strip().isdigit()]


def raylet_node_id(root_pid: int) -> str | None:
    """The Ray node id of the raylet below ``root_pid`` (``ray start --block``'s child),
    read from its ``--node_id=`` argument."""
    for pid in proctable.descendants_of(root_pid):
        argv = proctable.argv_of(pid)  # whole: the node id comes late in a raylet's arguments
        if argv and argv[0].endswith("/raylet"):
            for arg in argv:
                if arg.startswith("--node_id="):
                    return arg.split("=", 1)[1]
    return None


class NodeKeeper:
    """One node's look at what outlived its attempts; ``check`` writes its report, ``due``
    says when to call it."""

    def __init__(self, shared_root: str, node_id: str, *, grace_s: float = 30.0,
                 clock: Callable[[], float] = time.time, nvidia_smi: str | None = None) -> None:
        self.shared_root, self.node_id, self.grace_s, self.clock = shared_root, node_id, grace_s, clock
        self.nvidia_smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
        self._gone_since: dict[str, float] = {}  # submission id -> first seen not live
        self._checked_at = -1e18
        self._live_mtime = 0.0
        self._answered: set[str] = set()  # stacks requests answered
        self._answering: threading.Thread | None = None

    def due(self) -> bool:
        """Every ``CHECK_S``, and at once when the live set was rewritten (an attempt may
        have ended: its node admits again only once a report judged after that says so)."""
        try:
            mtime = os.stat(_live_path(self.shared_root)).st_mtime
        except OSError:
            mtime = 0.0
        return mtime != self._live_mtime or self.clock() - self._checked_at >= CHECK_S

    def check(self) -> NodeReport | None:
        """Look once; None (and no report) while the live set is not fresh."""
        now = self._checked_at = self.clock()
        try:
            self._live_mtime = os.stat(_live_path(self.shared_root)).st_mtime
        except OSError:
            self._live_mtime = 0.0
        live = read_live(self.shared_root)
        if live is None or now - live.written_at > LIVE_FRESH_S:
            self._gone_since.clear()  # judged again from scratch once the reactor is back
            return None
        self._answer_stacks()
        processes = proctable.attempt_processes(exclude=(os.getpid(),))
        leftovers, ending = self._judge(processes, set(live.submission_ids), now)
        report = NodeReport(node_id=self.node_id, hostname=os.uname().nodename, checked_at=now,
                            leftovers=leftovers, ending=ending, live_at=live.written_at)
        safefs.write_atomic(report_path(self.shared_root, self.node_id), msgspec.json.encode(report))
        return report

    def _judge(self, processes: dict[int, str], live: set[str], now: float) -> tuple[list[Leftover], list[Leftover]]:
        """The leftovers (of attempts out of the live set for ``grace_s``, or holding a GPU
        for no attempt) and the processes still ending (out of it for less)."""
        gone = {sid for sid in processes.values() if sid not in live}
        self._gone_since = {sid: self._gone_since.get(sid, now) for sid in gone}
        leftovers: list[Leftover] = []
        ending: list[Leftover] = []
        for pid, sid in processes.items():
            if sid in gone:
                past = now - self._gone_since[sid] >= self.grace_s
                (leftovers if past else ending).append(Leftover(pid=pid, submission_id=sid,
                                                                command=proctable.command_line(pid)))
        leftovers += [Leftover(pid=pid, submission_id="", command=proctable.command_line(pid))
                      for pid in gpu_holders(self.nvidia_smi) if pid not in processes]  # an attempt's: judged above
        return leftovers[:MAX_LEFTOVERS], ending[:MAX_LEFTOVERS]

    def _answer_stacks(self) -> None:
        """Start answering the stacks requests not yet answered (one thread at a time: a
        dump takes up to seconds per process)."""
        if self._answering is not None and self._answering.is_alive():
            return
        asked = requested(self.shared_root)
        self._answered &= set(asked)  # a request withdrawn is forgotten
        todo = [sid for sid in asked if sid not in self._answered]
        if not todo:
            return
        self._answered.update(todo)

        def answer() -> None:
            for sid in todo:
                try:
                    answer_for_node(self.shared_root, sid, self.node_id, exclude=(os.getpid(),))
                except OSError:
                    pass  # the reactor stops the job after its wait, noting this node did not answer

        self._answering = threading.Thread(target=answer, name="argus-keeper-stacks", daemon=True)
        self._answering.start()
