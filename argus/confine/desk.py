"""A node's claim desk: one GCS client, kept by the node's watchdog, claims for users the
Ray jobs that the job drivers on this host start.

Without it each job driver watches Ray's job table itself (``argus.confine.claims.
ClaimWatcher``), and to do so imports Ray: a quarter of a second of CPU, at the same moment
as the job's own command imports Ray. On a small node the two imports compete, and the job
starts later (docs/security.md has the figures). The watchdog of a confining worker node
(``argus.nodepool.worker``) runs the desk: it imports Ray once, when the node starts.

- The desk says it is open by touching ``<registry>/desks/<host>/open`` every second.
- A driver that finds its host's desk open writes a ``ClaimRequest`` (its attempt, its
  user, the secret it put in the command's job config, the command's pid) into the desk's
  ``requests/`` folder and watches nothing itself; it removes the request when the command
  ends. A driver that finds no desk open watches for itself, as before.
- The desk polls the job table for each request (every 20 ms) and judges each job as the
  driver would (``first_job_judge``): the first Ray job that names the attempt, shows the
  secret, and whose driver is one of the command's processes, on this host. Once it has
  claimed that job, the request is done and the desk removes it.

The registry is out of every confined job's reach, so no job can write a request. A
request is read only from the desk's own folder, without following a link, and at most
4 KiB of it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from argus.confine.claims import Judge, connect_gcs, first_job_judge, jobs_in_order, yield_to_jobs
from argus.confine.registry import write_claim, write_private

__all__ = ["ClaimDesk", "ClaimRequest", "desk_is_open", "request_claim", "withdraw_request"]

# How often an open desk says so, and how long a driver trusts that it still is.
HEARTBEAT_S = 1.0
OPEN_FOR_S = 5.0
# How often the job table is read while a request waits, and the request folder otherwise.
POLL_S = 0.02
IDLE_S = 0.1
# A request the desk has not claimed for within this long is dropped (its driver died
# without withdrawing it, or its command never started Ray).
REQUEST_TTL_S = 24 * 3600.0


class ClaimRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a driver asks of its host's desk: claim for ``user`` the first Ray job of the
    command ``command_pid`` that names ``submission_id`` and shows ``secret``."""

    submission_id: str
    user: str
    secret: str
    command_pid: int
    made_at: float


def _safe(name: str) -> str:
    """``name`` as one file name (anything but letters, digits, ``-_.`` becomes ``_``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _desk_dir(registry: str) -> str:
    """This host's desk folder (several watchdogs of one host share it: they judge the same
    jobs alike, and a claim is written whole)."""
    return os.path.join(registry, "desks", _safe(socket.gethostname()) or "host")


def desk_is_open(registry: str, now: float | None = None) -> bool:
    """Whether this host's desk said it was open within the last ``OPEN_FOR_S``."""
    try:
        said = os.stat(os.path.join(_desk_dir(registry), "open"), follow_symlinks=False).st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - said <= OPEN_FOR_S


def _request_path(registry: str, submission_id: str) -> str:
    return os.path.join(_desk_dir(registry), "requests", f"{_safe(submission_id)}.json")


def request_claim(registry: str, request: ClaimRequest) -> None:
    """Hand ``request`` to this host's desk (written whole, readable by this Unix user only)."""
    write_private(_request_path(registry, request.submission_id), msgspec.json.encode(request))


def withdraw_request(registry: str, submission_id: str) -> None:
    """The command ended: its request, if the desk still has it, is void."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_request_path(registry, submission_id))


def _read_request(path: str) -> ClaimRequest | None:
    """The request at ``path`` (None: a link, unreadable, or not a request)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            return msgspec.json.decode(f.read(4096), type=ClaimRequest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


class _Served:
    """A request the desk is serving: what it asks, its judge, and the jobs judged."""

    def __init__(self, request: ClaimRequest, judge: Judge) -> None:
        self.request, self.judge = request, judge
        self.seen: set[str] = set()


class ClaimDesk(threading.Thread):
    """Claims the Ray jobs of this host's requests at the cluster ``gcs_address``.
    ``connect(address)`` makes the GCS client (Ray's ``GcsClient``; a test gives its own)."""

    def __init__(self, *, registry: str, gcs_address: str, on_line: Callable[[str], None] = lambda _line: None,
                 connect: Callable[[str], Any] | None = None) -> None:
        super().__init__(name="argus-claim-desk", daemon=True)
        self.registry, self.gcs_address, self.on_line = registry, gcs_address, on_line
        self.connect = connect
        self.stopping = threading.Event()
        self.ready = threading.Event()  # connected, and said open
        self.folder = _desk_dir(registry)
        # By request file name: a request is written once, so each file is read once.
        self._serving: dict[str, _Served | None] = {}  # None: not a request
        self._last_error = ""

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        yield_to_jobs()  # as the drivers' own watchers did
        try:
            gcs = (self.connect or connect_gcs)(self.gcs_address)
            cluster = gcs.cluster_id.hex()
        except Exception as exc:  # no Ray here, or no GCS: drivers watch for themselves
            self.on_line(f"claim desk closed: cannot reach Ray's GCS at {self.gcs_address}: {exc}")
            return
        requests = os.path.join(self.folder, "requests")
        os.makedirs(requests, mode=0o700, exist_ok=True)
        said_open = 0.0
        while not self.stopping.is_set():
            if time.monotonic() - said_open >= HEARTBEAT_S:
                self._say_open()
                said_open = time.monotonic()
                self.ready.set()
            try:
                names = {n for n in os.listdir(requests) if n.endswith(".json")}
            except OSError:
                names = set()
            for name in set(self._serving) - names:  # withdrawn or done
                del self._serving[name]
            for name in names - set(self._serving):
                request = _read_request(os.path.join(requests, name))
                self._serving[name] = None if request is None else _Served(request, self._judge(request))
            serving = [s for s in self._serving.values() if s is not None]
            for served in serving:
                self._serve(gcs, cluster, served)
            self.stopping.wait(POLL_S if serving else IDLE_S)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.folder, "open"))

    def _judge(self, request: ClaimRequest) -> Judge:
        return first_job_judge(submission_id=request.submission_id, user=request.user,
                               command_pid=request.command_pid, secret=request.secret,
                               say=lambda line: self.on_line(f"{request.submission_id}: {line}"))

    def _say_open(self) -> None:
        path = os.path.join(self.folder, "open")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            os.utime(path)
        except OSError as exc:
            self.on_line(f"claim desk: cannot say it is open at {path}: {exc}")

    def _serve(self, gcs: Any, cluster: str, served: _Served) -> None:
        request = served.request
        if time.time() - request.made_at > REQUEST_TTL_S:
            withdraw_request(self.registry, request.submission_id)
            return
        try:
            jobs = gcs.get_all_job_info(job_or_submission_id=request.submission_id,
                                        skip_submission_job_info_field=True, skip_is_running_tasks_field=True,
                                        timeout=5)
        except Exception as exc:  # the GCS restarting: try again (said once, not every poll)
            if str(exc) != self._last_error:
                self._last_error = str(exc)
                self.on_line(f"claim desk: reading Ray's jobs: {exc}")
            return
        self._last_error = ""
        for job_id, info in jobs_in_order(jobs):
            if job_id in served.seen:
                continue
            served.seen.add(job_id)
            claim = served.judge(job_id, info)
            if claim is not None:
                write_claim(self.registry, cluster, claim)
                self.on_line(f"claimed Ray job {job_id} for {request.user} ({request.submission_id})")
                # Done: a later job of the same command gets no claim anyway.
                withdraw_request(self.registry, request.submission_id)
                return
