"""The Ray child of a watchdog: ``ray start … --block`` in its own process group.

Why a process group: ``ray start`` spawns the raylet, GCS, dashboard, agents; they inherit
its group, so one ``killpg`` reaches all of them without touching any other Ray on the
host (``ray stop`` would kill every Ray of the machine). Why PR_SET_PDEATHSIG: if the
watchdog itself is killed (``kill -9``, OOM), its Ray child must die with it, or the
restarted watchdog would start a second Ray node in the same container.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import IO, Sequence

__all__ = ["RayChild", "StopFlag", "detect_node_ip", "die_with_parent", "port_open"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec (Linux only; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent may have died before prctl took effect.
    if os.getppid() != parent_pid:
        os._exit(1)


class RayChild:
    """One ``ray start --block`` run. Output is copied line by line to ``sink`` (stdout)
    and to ``tee`` (the node's ray.log) by a daemon thread."""

    def __init__(self, argv: Sequence[str], *, sink: IO[str] | None = None,
                 tee: IO[str] | None = None, env: dict[str, str] | None = None,
                 ready_marker: str = "Ray runtime started") -> None:
        self.argv = list(argv)
        # Set when `ray start` reports that all its processes are up and registered.
        self.ready = threading.Event()
        self._ready_marker = ready_marker
        # Its last lines, kept to say why it exited (bounded: Ray can print a lot).
        self.last_lines: deque[str] = deque(maxlen=80)
        parent = os.getpid()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: die_with_parent(parent),
            env=env,
        )
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self._sink = sink or sys.stdout
        self._tee = tee
        self._pump = threading.Thread(target=self._copy_output, name="ray-output", daemon=True)
        self._pump.start()

    def _copy_output(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            if self._ready_marker and self._ready_marker in line:
                self.ready.set()
            self.last_lines.append(line[:1000])
            for out in (self._sink, self._tee):
                if out is None:
                    continue
                try:
                    out.write(line)
                    out.flush()
                except (OSError, ValueError):
                    pass

    @property
    def runtime_s(self) -> float:
        return time.monotonic() - self.started

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace_s: float) -> int:
        """SIGTERM the whole group, wait up to ``grace_s`` for ``ray start`` to finish its
        own cleanup, then SIGKILL whatever of the group is left. Returns the exit code."""
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # Always sweep: the leader may be gone while a raylet or agent still holds ports.
        self._signal_group(signal.SIGKILL)
        rc = self.proc.wait()
        self._pump.join(timeout=2)
        return rc

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def port_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def detect_node_ip(override: str = "", towards: str | None = None) -> str:
    """The IP this node should advertise: ``override`` if set, else the source address of
    the route towards ``towards`` (the head, for workers) or a public address, else the
    address of the host name, else loopback. No packet is sent (UDP connect only)."""
    if override:
        return override
    for target in [t for t in (towards, "10.255.255.255", "192.0.2.1") if t]:
        try:
            family = socket.AF_INET6 if ":" in target else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((target, 9))
                ip = sock.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
        except OSError:
            continue
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class StopFlag:
    """Set by SIGTERM/SIGINT; the watchdog loops sleep on it so that a stop request
    interrupts any wait at once (supervisord stop, docker stop, Ctrl-C)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> "StopFlag":
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        self.signum = signum
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if a stop was requested."""
        return self.event.wait(max(0.0, seconds))
