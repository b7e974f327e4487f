"""The one place where Argus talks to Ray (docs/design.md §1: "where Ray is touched").

``RayGateway`` is synchronous: jobs go through Ray's Jobs SDK (``JobSubmissionClient`` on
the job server URL: plain HTTP), capacity is read from the GCS with the
same accessor verl's ``ray._private.state.available_resources_per_node()`` uses, but
*without* ``ray.init`` and in a child process (``probe``): Ray's GCS client aborts its
process when the head is gone too long or comes back as another cluster, and the control
plane must outlive any head. Where Ray is can be re-read before each call (``following``:
the discovery record may move). ``AsyncRayGateway`` runs each call in a thread and turns
every way of not reaching Ray into one exception, ``RayUnavailable``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Collection
from typing import Any, Callable, TypeVar

import msgspec

from argus.events.catalog import NodeCapacity, SubmissionPayload
from argus.lifecycle import AttemptStatus
from argus.rayjobs.probe import GcsProbe, ProbeFailed
from argus.scheduler.gpumodel import gpu_type_of

__all__ = [
    "AsyncRayGateway",
    "DuplicateSubmission",
    "JobObservation",
    "RayGateway",
    "RayUnavailable",
    "WORKER_RESOURCE",
    "is_duplicate_submission",
]

# Nodes that carry this custom resource are training workers; the head carries none.
WORKER_RESOURCE = "worker_node"

T = TypeVar("T")


class RayUnavailable(Exception):
    """Ray (job server or GCS) could not be reached; capacity and job states are unknown."""


class DuplicateSubmission(RuntimeError):
    """Ray already has a job with this submission id (exactly-once recovery: record it)."""


class JobObservation(msgspec.Struct, frozen=True, kw_only=True):
    """What Ray says about one job right now. Times are UNIX seconds (Ray gives ms)."""

    submission_id: str
    status: AttemptStatus  # one of Ray's: PENDING | RUNNING | STOPPED | SUCCEEDED | FAILED
    message: str = ""
    error_type: str | None = None  # Ray's JobErrorType value, when Ray says why it failed
    start_time: float | None = None
    end_time: float | None = None
    driver_exit_code: int | None = None
    driver_node_id: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal()


def _ms(value: int | None) -> float | None:
    return None if not value else value / 1000.0


def _observation(submission_id: str, info: Any) -> JobObservation:
    """A JobObservation from Ray's JobDetails/JobInfo."""
    return JobObservation(
        submission_id=submission_id,
        status=AttemptStatus.from_ray(info.status),
        message=info.message or "",
        error_type=_error_type(getattr(info, "error_type", None)),
        start_time=_ms(info.start_time),
        end_time=_ms(info.end_time),
        driver_exit_code=getattr(info, "driver_exit_code", None),
        driver_node_id=getattr(info, "driver_node_id", None),
    )


def _error_type(value: object) -> str | None:
    """JobDetails.error_type as its bare string (Ray may hand the JobErrorType enum)."""
    if not value:
        return None
    return str(getattr(value, "value", value))


def is_duplicate_submission(exc: BaseException) -> bool:
    """True when Ray refused a submission because the id is taken (``already exists``)."""
    return "already exists" in str(exc)


def _is_not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "404" in text or "does not exist" in text


def _gpus(resources: dict[str, float]) -> float:
    # verl's rule, verbatim: GPU if the node reports GPU at all, else NPU, else 0.
    return resources.get("GPU", 0) if "GPU" in resources else resources.get("NPU", 0)


class RayGateway:
    """Synchronous Ray access. ``job_server_url``: ``http://head:8265``; ``gcs_address``:
    ``head:6379`` (needed only by ``capacity``). Clients are created lazily and dropped
    after a connection failure, so a restarted head is picked up on the next call."""

    def __init__(self, job_server_url: str, gcs_address: str | None = None,
                 *, http_timeout_s: float = 10.0,
                 locate: Callable[[], tuple[str, str]] | None = None) -> None:
        self.job_server_url = job_server_url
        self.gcs_address = gcs_address
        self.http_timeout_s = http_timeout_s
        self._locate = locate
        self._client: Any = None
        self._probe: GcsProbe | None = None
        self._lock = threading.Lock()

    @classmethod
    def following(cls, locate: Callable[[], tuple[str, str]]) -> "RayGateway":
        """A gateway that asks ``locate()`` for ``(job_server_url, gcs_address)`` before each
        call and moves when the answer changes (a head restarted on another port). A
        ``locate`` that raises makes the call RayUnavailable."""
        return cls("", "", locate=locate)

    def _follow(self) -> None:
        if self._locate is None:
            return
        try:
            url, gcs = self._locate()
        except Exception as exc:
            raise RayUnavailable(f"where is Ray? {exc}") from exc
        with self._lock:
            if (url, gcs) != (self.job_server_url, self.gcs_address):
                self.job_server_url, self.gcs_address = url, gcs
                self._client = None
                if self._probe is not None:
                    self._probe.close()
                    self._probe = None

    def close(self) -> None:
        """Stop the GCS probe child, at once: not under the gateway's lock, which a call
        still waiting on a Ray that does not answer may hold (a shutdown must not wait on
        Ray's timeouts; that call then fails)."""
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    # -- clients -----------------------------------------------------------------------
    def _jobs(self) -> Any:
        with self._lock:
            if self._client is None:
                from ray.job_submission import JobSubmissionClient

                try:
                    self._client = JobSubmissionClient(self.job_server_url)
                except (ConnectionError, OSError) as exc:
                    raise RayUnavailable(f"job server {self.job_server_url}: {exc}") from exc
            return self._client

    def _call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(client)``; a transport failure drops the client and becomes RayUnavailable."""
        self._follow()
        client = self._jobs()
        try:
            return fn(client)
        except (ConnectionError, OSError) as exc:  # requests' errors are OSErrors
            with self._lock:
                self._client = None
            raise RayUnavailable(f"job server {self.job_server_url}: {exc}") from exc


    # -- jobs --------------------------------------------------------------------------
    def submit(self, payload: SubmissionPayload) -> None:
        """Submit exactly this payload. Raises DuplicateSubmission when Ray already has the
        submission id (the caller records it as submitted, docs/design.md §4)."""
        def go(client: Any) -> None:
            try:
                client.submit_job(
                    entrypoint=payload.entrypoint,
                    submission_id=payload.submission_id,
                    runtime_env=payload.runtime_env or None,
                    metadata=payload.metadata or None,
                    entrypoint_num_cpus=payload.entrypoint_num_cpus,
                    entrypoint_resources=payload.entrypoint_resources or None,
                )
            except RuntimeError as exc:
                if is_duplicate_submission(exc):
                    raise DuplicateSubmission(str(exc)) from exc
                raise

        self._call(go)

    def status(self, submission_id: str) -> JobObservation | None:
        """The job's current state, or None when Ray has no job with this id."""
        def go(client: Any) -> JobObservation | None:
            try:
                info = client.get_job_info(submission_id)
            except RuntimeError as exc:
                if _is_not_found(exc):
                    return None
                raise
            return _observation(submission_id, info)

        return self._call(go)

    def statuses(self, submission_ids: Collection[str]) -> dict[str, JobObservation | None]:
        """The state of each of these jobs in one listing of Ray's jobs (None: unknown)."""
        def go(client: Any) -> dict[str, JobObservation | None]:
            wanted = set(submission_ids)
            found: dict[str, JobObservation | None] = dict.fromkeys(wanted)
            for info in client.list_jobs():
                sid = getattr(info, "submission_id", None)
                if sid in wanted:
                    found[sid] = _observation(sid, info)
            return found

        return self._call(go) if submission_ids else {}

    def pending_placements(self, submission_ids: Collection[str]) -> dict[str, list[str]]:
        """Each job's PENDING placement groups (Ray's state API: one listing of the jobs, for
        their Ray job ids, and one of the pending placement groups)."""
        wanted = set(submission_ids)
        if not wanted:
            return {}

        def go(client: Any) -> dict[str, str]:
            return {info.job_id: info.submission_id for info in client.list_jobs()
                    if getattr(info, "submission_id", None) in wanted and getattr(info, "job_id", None)}

        by_job = self._call(go)
        from ray.util.state import list_placement_groups

        try:
            pending = list_placement_groups(address=self.job_server_url, filters=[("state", "=", "PENDING")],
                                            limit=10_000, raise_on_missing_output=False)
        except (ConnectionError, OSError) as exc:
            raise RayUnavailable(f"state API {self.job_server_url}: {exc}") from exc
        except Exception as exc:  # RayStateApiException: the dashboard did not answer
            raise RayUnavailable(f"state API {self.job_server_url}: {exc}") from exc
        found: dict[str, list[str]] = {sid: [] for sid in wanted}
        for pg in pending:
            sid = by_job.get(pg.creator_job_id)
            if sid is not None:
                found[sid].append(pg.name or pg.placement_group_id)
        return found

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job (SIGTERM to the driver, SIGKILL after a grace period).
        True if it was running; False if it had ended or does not exist."""
        def go(client: Any) -> bool:
            try:
                return bool(client.stop_job(submission_id))
            except RuntimeError as exc:
                if _is_not_found(exc):
                    return False
                raise

        return self._call(go)

    def logs_tail(self, submission_id: str, max_bytes: int = 65_536) -> str:
        """The last ``max_bytes`` of the job's driver log ("" when there is no such job).
        Ray returns the whole log; the driver also keeps it in the job dir."""
        def go(client: Any) -> str:
            try:
                text: str = client.get_job_logs(submission_id)
            except RuntimeError as exc:
                if _is_not_found(exc):
                    return ""
                raise
            data = text.encode("utf-8", "replace")[-max_bytes:]
            return data.decode("utf-8", "ignore")

        return self._call(go)

    # -- capacity ----------------------------------------------------------------------
    def capacity(self) -> list[NodeCapacity]:
        """Free GPUs/CPUs of every ALIVE node that carries ``worker_node``, sorted by node id.
        Two GCS reads (~1 ms each on a small cluster) in the probe child, no ``ray.init``."""
        self._follow()
        with self._lock:
            if not self.gcs_address:
                raise RayUnavailable("capacity needs the GCS address (gcs_address is not set)")
            if self._probe is None:
                self._probe = GcsProbe(self.gcs_address)
            probe = self._probe
        try:
            nodes = probe.nodes()
        except ProbeFailed as exc:
            raise RayUnavailable(str(exc)) from exc
        out = []
        for node in nodes:
            total = node["total"]
            free = node["free"]
            if not node["alive"] or WORKER_RESOURCE not in total or free is None:
                continue  # (free None: died between the two reads)
            out.append(NodeCapacity(
                node_id=node["node_id"], ip=node["ip"],
                total_gpus=float(_gpus(total)), free_gpus=float(_gpus(free)),
                total_cpus=float(total.get("CPU", 0)), free_cpus=float(free.get("CPU", 0)),
                gpu_type=gpu_type_of(total),
            ))
        return sorted(out, key=lambda n: n.node_id)


class AsyncRayGateway:
    """The reactor's view (a ``RayPort``): same calls, awaited in a worker thread. Every
    failure to reach Ray is ``RayUnavailable``; Ray's answers (None, False,
    DuplicateSubmission) pass through.

    The threads are the gateway's own: a call to a Ray that does not answer holds its
    thread until its timeout, and on the loop's default executor a few of those starved
    everything else in the process that uses it (the API's file reads hung while the head
    was away)."""

    def __init__(self, gateway: RayGateway, threads: int = 4) -> None:
        self.sync = gateway
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="ray-gateway")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))
        except (RayUnavailable, DuplicateSubmission):
            raise
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise RayUnavailable(str(exc)) from exc
        except RuntimeError as exc:
            # The SDK reports HTTP 5xx (head restarting, GCS gone) as RuntimeError.
            if "status code 5" in str(exc):
                raise RayUnavailable(str(exc)) from exc
            raise

    def close(self) -> None:
        """Stop the GCS probe child and the gateway's threads (those still waiting on Ray
        finish on their own)."""
        self.sync.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def submit(self, payload: SubmissionPayload) -> None:
        await self._run(self.sync.submit, payload)

    async def status(self, submission_id: str) -> JobObservation | None:
        return await self._run(self.sync.status, submission_id)

    async def statuses(self, submission_ids: Collection[str]) -> dict[str, JobObservation | None]:
        return await self._run(self.sync.statuses, submission_ids)

    async def stop(self, submission_id: str) -> bool:
        return await self._run(self.sync.stop, submission_id)

    async def logs_tail(self, submission_id: str, max_bytes: int = 65_536) -> str:
        return await self._run(self.sync.logs_tail, submission_id, max_bytes)

    async def capacity(self) -> list[NodeCapacity]:
        return await self._run(self.sync.capacity)

    async def pending_placements(self, submission_ids: Collection[str]) -> dict[str, list[str]]:
        return await self._run(self.sync.pending_placements, submission_ids)
