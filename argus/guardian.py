"""The guardian of a local stack: ``python -m argus.guardian --parent PID --marker ID``.

``argus up`` starts its Ray nodes under watchdogs that die with it (PR_SET_PDEATHSIG), and
each watchdog's ``ray start`` dies with the watchdog. But Ray's agents (dashboard agent,
runtime-env agent) are re-parented to init when their raylet is SIGKILLed and live on. A
kill -9 of ``argus up`` runs no cleanup code of its own, so this small process does it:
it waits for ``argus up`` to go, then SIGKILLs every process of the stack, removes the
stack's Ray temp dir, and exits.
A process is the stack's if its environment carries the stack's marker
(``ARGUS_STACK_ID=<uuid>``, inherited by everything the stack started) or, for Ray's own
processes, whose proctitle overwrites the environment's memory, if it holds a file open
under the stack's private Ray temp dir. Precise marks, never a process name: other Ray
clusters and other stacks on the host are left alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
from pathlib import Path

__all__ = ["MARKER_ENV", "kill_marked", "marked_pids"]

MARKER_ENV = "ARGUS_STACK_ID"


def _holds_file_under(entry: Path, prefix: str) -> bool:
    try:
        fds = list((entry / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(prefix):
                return True
        except OSError:
            continue
    return False


def marked_pids(marker: str, temp_dir: str, proc: Path = Path("/proc")) -> list[int]:
    """The stack's processes (not this one): ``ARGUS_STACK_ID=<marker>`` in the
    environment, or a file open under ``temp_dir``."""
    needle = f"{MARKER_ENV}={marker}".encode() + b"\0"
    prefix = temp_dir.rstrip("/") + "/"
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ or _holds_file_under(entry, prefix):
            found.append(int(entry.name))
    return found


def kill_marked(marker: str, temp_dir: str) -> int:
    """SIGKILL every process of the stack; returns how many were signalled."""
    pids = marked_pids(marker, temp_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m argus.guardian", description=__doc__.split("\n")[0])
    parser.add_argument("--parent", type=int, required=True, help="pid of argus up")
    parser.add_argument("--marker", required=True, help="the stack's ARGUS_STACK_ID")
    parser.add_argument("--temp-dir", required=True, help="the stack's private Ray temp dir")
    args = parser.parse_args(argv)
    # Its own session: a Ctrl-C to the terminal's group reaches argus up, which stops the
    # stack in order; the guardian only cleans up after a death that ran no cleanup.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)  # argus up's own clean stop: nothing to do
    while not stop and _alive(args.parent) and os.getppid() == args.parent:
        time.sleep(0.5)
    if not stop:
        # Twice: a process may fork between the scan and the kill.
        kill_marked(args.marker, args.temp_dir)
        time.sleep(0.5)
        kill_marked(args.marker, args.temp_dir)
        # As argus up's own stop does: Ray's sockets and session files are of no use once
        # its processes are gone, and each kill -9 left a few MB in /tmp.
        shutil.rmtree(args.temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
