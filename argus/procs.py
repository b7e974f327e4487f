"""Free local ports and child processes in their own process group.

Shared by ``argus up`` (argus/cli/stack.py) and the test harnesses that start real Ray
nodes (tests/support/ray_cluster.py, tests/nodepool/cluster.py). Other Ray clusters may
share the host, so a child is started in its own session and stopped by signalling its
process group: that reaches ``ray start`` and everything it spawned (raylet, GCS, agents)
and nothing else; never ``ray stop`` or kill-by-name.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["PortBook", "free_port_range", "free_ports", "kill_group", "reap_group", "signal_group",
           "spawn_group"]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free on ``host`` right now ("" = all interfaces).

    The sockets stay open until all are bound, so the kernel cannot hand out one twice."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


# Ports Ray gives a component it was not given one for (the Ray client server's 10001 on
# every node, the dashboard's 8265, GCS's 6379, the agent's 52365): ``ray start`` refuses a
# port or a worker-port range that covers one ("is trying to use a port number 10001 that
# is used by other components"), so none is ever handed out here.
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365})


def free_port_range(width: int, host: str = "127.0.0.1") -> int:
    """First port of ``width`` consecutive ports, all free on ``host`` right now (for Ray's
    ``--min-worker-port``/``--max-worker-port``). Tries 200 random bases in 10002..32767,
    as Ray's own default range starts: above its client server's 10001, and below Linux's
    usual ephemeral range, from which outgoing connections take their ports (and could
    take one before a Ray worker, started later, binds it)."""
    for _ in range(200):
        base = random.randint(10_002, 32_768 - width)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + width):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {width} consecutive free ports")


class PortBook:
    """The ports given to the Ray nodes of one cluster on this host, so that no two nodes
    get the same one. ``free_ports`` guarantees distinct ports within one call only: called
    once per node, it gave a head and a worker the same port now and then (~0.4 % of starts
    of ``argus up``; the worker's agent could not bind it and the worker crashed in a loop)."""

    _TRIES = 100

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.given: set[int] = set(RAY_DEFAULT_PORTS)  # as if given: Ray's own, on every node

    def ports(self, count: int) -> list[int]:
        """``count`` distinct ports, free on the host now and given to no one else here."""
        for _ in range(self._TRIES):
            found = free_ports(count, self.host)
            if self.given.isdisjoint(found):
                self.given.update(found)
                return found
        raise RuntimeError(f"no {count} free ports apart from the {len(self.given)} already given")

    def port_range(self, width: int) -> int:
        """First of ``width`` consecutive ports, free now and overlapping none given here."""
        for _ in range(self._TRIES):
            base = free_port_range(width, self.host)
            span = range(base, base + width)
            if self.given.isdisjoint(span):
                self.given.update(span)
                return base
        raise RuntimeError(f"no {width} consecutive free ports apart from the {len(self.given)} already given")


def spawn_group(argv: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                cwd: Path | str | None = None, stdin: int | None = None,
                die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session (and so of a new process group), its
    stdout and stderr appended to ``log_path``.

    ``die_with_parent``: the child gets SIGKILL when this process dies (Linux
    PR_SET_PDEATHSIG), so that a killed test run leaves no Ray node behind."""
    preexec: Callable[[], None] | None = None
    if die_with_parent:
        # Imported here: only this option needs the argus.nodepool package.
        from argus.nodepool.process import die_with_parent as _die_with_parent

        parent = os.getpid()  # taken before the fork: in the child it is the parent's pid
        preexec = lambda: _die_with_parent(parent)

    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(argv), env=None if env is None else dict(env), cwd=cwd,
                                stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                                # preexec_fn only with die_with_parent (a prctl call),
                                # as the callers that want it have always done.
                                start_new_session=True, preexec_fn=preexec)  # noqa: PLW1509


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (started by :func:`spawn_group`
    or with ``start_new_session=True``, so its group id is its pid); no-op if it is gone."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap_group(proc: subprocess.Popen[bytes], wait_s: float, kill_wait_s: float = 5.0) -> None:
    """Wait up to ``wait_s`` for the leader to exit, then SIGKILL the whole group and wait up
    to ``kill_wait_s`` more for the leader. The SIGKILL is sent even when the leader has
    exited: the group may outlive its leader (a raylet still holding ports)."""
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(timeout=kill_wait_s)
    except subprocess.TimeoutExpired:
        pass


def kill_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process group led by ``proc``, give it ``grace_s`` to exit, then SIGKILL
    whatever of the group is left (see :func:`reap_group`)."""
    signal_group(proc, signal.SIGTERM)
    reap_group(proc, grace_s)
