"""Reading the GCS from a child process, so that Ray's client can never take Argus down.

Ray's in-process GCS client aborts the whole process when the GCS stays away longer than
its reconnect timeout ("Failed to connect to GCS within 60 seconds … The program will
terminate") or when a restarted head answers with another cluster id (``WrongClusterID``).
The API and the reactor must outlive any head, so the client lives in a small child,
``python -m argus.rayjobs.probe GCS_ADDRESS``: it reads one request line on stdin and
answers one JSON line on stdout. When it dies, hangs or answers garbage, the parent kills
it, reports Ray unavailable, and starts a fresh one on the next call.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from argus.procs import reap_group

__all__ = ["GcsProbe", "ProbeFailed"]


class ProbeFailed(Exception):
    """The probe could not answer: the GCS is unreachable or the child died."""


def _serve(gcs_address: str) -> int:
    """The child: answer ``capacity`` requests until stdin closes."""
    from ray._private.state import GlobalState
    from ray._raylet import GcsClientOptions  # type: ignore[attr-defined]  # Ray's Cython module

    state = GlobalState()
    state._initialize_global_state(GcsClientOptions.create(
        gcs_address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False))
    for line in sys.stdin:
        if line.strip() != "capacity":
            continue
        try:
            nodes = state.node_table()
            available = state.available_resources_per_node()
            answer: dict[str, Any] = {"nodes": [
                {"node_id": n["NodeID"], "ip": n.get("NodeManagerAddress", ""), "alive": bool(n.get("Alive")),
                 "total": n.get("Resources") or {}, "free": available.get(n["NodeID"])}
                for n in nodes]}
        except Exception as exc:  # grpc / RaySystemError: the GCS did not answer
            answer = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


class GcsProbe:
    """The parent's handle on the child for one GCS address. Thread-safe; one request at a
    time. ``timeout_s`` bounds a request, child start included."""

    def __init__(self, gcs_address: str, timeout_s: float = 15.0) -> None:
        self.gcs_address = gcs_address
        self.timeout_s = timeout_s
        self._child: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        from argus.nodepool.process import die_with_parent

        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        parent = os.getpid()
        child = subprocess.Popen(
            [sys.executable, "-m", "argus.rayjobs.probe", self.gcs_address],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            # Its own group: Ray's client may fork helpers, signalled together. It dies with
            # this process, and with this probe object (a gateway that is dropped).
            start_new_session=True, preexec_fn=lambda: die_with_parent(parent))  # noqa: PLW1509
        self._finalizer = weakref.finalize(self, reap_group, child, 0)
        return child

    def _kill(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()  # reaped here: its pid must not be signalled again later
        reap_group(child, 0)  # SIGKILL its whole group, then wait
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Kill the child at once, even while a request waits on it (the request then fails
        on the child's closed pipe): a shutdown never waits on a GCS that does not answer."""
        child = self._child
        if child is not None:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
        if self._lock.acquire(timeout=2.0):  # the request sees the pipe close and lets go
            try:
                self._kill()
            finally:
                self._lock.release()

    def nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, with total and free resources. Raises ProbeFailed, at
        once when an earlier request is still waiting for a GCS that does not answer (the
        callers' timeouts are shorter than ours: they must not queue up behind it)."""
        if not self._lock.acquire(blocking=False):
            raise ProbeFailed(f"GCS {self.gcs_address}: an earlier request is still waiting")
        try:
            return self._request()
        finally:
            self._lock.release()

    def _request(self) -> list[dict[str, Any]]:
        """One request to the child (started if need be), under the lock."""
        if self._child is None or self._child.poll() is not None:
            self._kill()
            self._child = self._start()
        child = self._child
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write(b"capacity\n")
            child.stdin.flush()
            line = self._read_line(child, time.monotonic() + self.timeout_s)
            answer = json.loads(line)
        except (OSError, ValueError, ProbeFailed) as exc:
            self._kill()
            raise ProbeFailed(f"GCS {self.gcs_address}: {exc or type(exc).__name__}") from exc
        if "error" in answer:
            self._kill()  # its client may be wedged on a dead GCS: start afresh
            raise ProbeFailed(f"GCS {self.gcs_address}: {answer['error']}")
        return list(answer["nodes"])

    @staticmethod
    def _read_line(child: subprocess.Popen[bytes], deadline: float) -> bytes:
        assert child.stdout is not None
        fd = child.stdout.fileno()
        data = b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProbeFailed("no answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise ProbeFailed(f"the probe exited (rc={child.poll()})")
            data += chunk
        return data


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
