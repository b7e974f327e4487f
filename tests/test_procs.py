"""argus.procs: free ports and process groups (everything started here is stopped by pid)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from argus.procs import (
    PortBook,
    free_port_range,
    free_ports,
    kill_group,
    reap_group,
    signal_group,
    spawn_group,
)


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for its reaper counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _wait_log_line(log: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if lines:
            return lines[0]
        time.sleep(0.05)
    raise AssertionError(f"nothing written to {log}")


def test_free_ports_are_distinct_and_free() -> None:
    for host in ("127.0.0.1", ""):
        ports = free_ports(8, host=host)
        assert len(set(ports)) == 8
        assert all(_bindable(p) for p in ports)


def test_free_port_range_is_consecutive_and_free() -> None:
    base = free_port_range(16)
    assert 10_002 <= base <= 32_768 - 16  # above Ray's 10001, below the kernel's usual ephemeral range
    assert all(_bindable(p) for p in range(base, base + 16))


def test_a_port_book_never_gives_one_port_to_two_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """free_ports is distinct within one call only: the book draws again when a call
    repeats a port it gave (the head and worker of argus up once got the same one), and
    a range that overlaps a port it gave is drawn again too."""
    book = PortBook()
    head = book.ports(6)
    draws = iter([[head[2], *free_ports(5)], free_ports(6)])  # the first draw repeats one of head's
    monkeypatch.setattr("argus.procs.free_ports", lambda count, host: next(draws))
    worker = book.ports(6)
    assert set(head).isdisjoint(worker) and len(set(worker)) == 6
    assert next(draws, None) is None  # it did draw twice
    # The first range covers one of head's, the second Ray's client server's 10001 (which
    # `ray start` refused on a worker for ever, CI saw it): both are drawn again.
    bases = iter([head[0] - 3, 9_990, free_port_range(16)])
    monkeypatch.setattr("argus.procs.free_port_range", lambda width, host: next(bases))
    base = book.port_range(16)
    assert next(bases, None) is None
    assert 10_001 not in range(base, base + 16)
    assert set(range(base, base + 16)).isdisjoint(head + worker)
    assert all(_bindable(p) for p in worker)


@contextmanager
def shell_group(script: str, log: Path, **kw: object) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A shell leading its own group that prints its background child's pid (a grandchild
    of ours, in the group); the group is killed at the end if the test did not."""
    proc = spawn_group(["sh", "-c", script], log, **kw)  # type: ignore[arg-type]
    try:
        yield proc, int(_wait_log_line(log))
    finally:
        if proc.poll() is None:  # the test failed before the kill
            signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=5)


def test_kill_group_reaches_the_whole_group(tmp_path: Path) -> None:
    with shell_group("sleep 300 & echo $!; wait", tmp_path / "out.log", cwd=tmp_path) as (proc, grandchild):
        assert os.getpgid(proc.pid) == proc.pid == os.getpgid(grandchild)
        assert os.getsid(proc.pid) != os.getsid(0)
        kill_group(proc, grace_s=5.0)
        assert proc.returncode is not None
        assert _wait_gone(grandchild)


def test_kill_group_escalates_to_sigkill(tmp_path: Path) -> None:
    # SIGTERM ignored (inherited by the sleep): only the SIGKILL after the grace stops them.
    with shell_group("trap '' TERM; sleep 300 & echo $!; wait", tmp_path / "out.log") as (proc, grandchild):
        started = time.monotonic()
        kill_group(proc, grace_s=0.5)
        assert proc.returncode == -signal.SIGKILL
        assert 0.5 <= time.monotonic() - started < 5.0
        assert _wait_gone(grandchild)


def test_reap_group_kills_what_outlives_the_leader(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    # The leader exits at once; its background child stays in the group.
    proc = spawn_group(["sh", "-c", "sleep 300 & echo $!"], log)
    grandchild = int(_wait_log_line(log))
    try:
        assert proc.wait(timeout=5) == 0 and not _gone(grandchild)
        reap_group(proc, wait_s=0.1)
        assert _wait_gone(grandchild)
    finally:
        if not _gone(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_spawn_group_die_with_parent(tmp_path: Path) -> None:
    """The child of a process that dies is killed with it (PR_SET_PDEATHSIG)."""
    log = tmp_path / "out.log"
    middle = (f"from pathlib import Path; from argus.procs import spawn_group; "
              f"p = spawn_group(['sleep', '300'], Path({str(log)!r}), die_with_parent=True); "
              f"print(p.pid)")
    out = subprocess.run([sys.executable, "-c", middle], capture_output=True, text=True,
                         timeout=30, check=True)
    child = int(out.stdout.strip())
    try:
        assert _wait_gone(child)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
