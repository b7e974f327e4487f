"""An in-memory Ray behind the ``RayPort``: fast reactor tests now, the simulator later.

Passive and deterministic: nothing happens to a job unless a call says so (``start``,
``succeed``, ``fail``, ``forget``), nothing sleeps, and times come from the injected
``clock``. What it does on its own is what the real gateway does on its own:

- ``submit`` of a known submission id raises ``DuplicateSubmission`` with Ray's words
  (``already exists``), whatever state that job is in: Ray keeps ended jobs too;
- every call raises ``RayUnavailable`` while the fake is made unavailable;
- ``capacity`` is the configured worker nodes less what RUNNING jobs hold: their gang
  (read from the payload, see ``demand_from_payload``) and their driver's CPUs.

A job holds nothing while PENDING: in real Ray the gang is placed only after the driver
has started (verl creates its placement groups then). ``placement_lag_s`` > 0 models the
rest of that lag: a RUNNING job's gang is placed only that long after it started, so
``capacity`` shows its GPUs free meanwhile (what misled admission on ``argus up``). A gang
that no longer fits when it is due is a ``placement_failures`` entry, and its job then
waits on its placement groups, as verl does. Nodes can be lost (``lose_node``: the jobs
holding resources there fail) and return (``return_node``, under a new id as a
restarted raylet has).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Iterable

from argus.events.catalog import Demand, NodeCapacity, SubmissionPayload
from argus.lifecycle import AttemptStatus
from argus.rayjobs.gateway import DuplicateSubmission, JobObservation, RayUnavailable
from argus.rayjobs.port import RayPort
from argus.rayjobs.submission import decode_context
from argus.taskspec.builders import demand_for

__all__ = ["DoesNotFit", "FakeJob", "FakeRay", "demand_from_payload", "worker_nodes"]

S = AttemptStatus

# Ray's own messages (ray.dashboard.modules.job), so that classification sees real text.
_STOPPED_MSG = "Job was intentionally stopped."
_SUCCEEDED_MSG = "Job finished successfully."
_ENTRYPOINT_FAILED = ("Job entrypoint command failed with exit code {code}, last available logs "
                      "(truncated to 20,000 chars):\n{logs}")
_CONTEXT_RE = re.compile(r"--context\s+(\S+)")
_TRAINER_RE = {key: re.compile(rf"trainer\.{key}=(\d+)") for key in ("nnodes", "n_gpus_per_node")}


class DoesNotFit(ValueError):
    """``FakeRay.start``: the job's gang and driver do not fit the free nodes now."""


def worker_nodes(count: int, gpus: float = 8.0, cpus: float = 64.0, prefix: str = "node",
                 gpu_type: str = "") -> list[NodeCapacity]:
    """``count`` idle worker nodes, ``node-01`` … (ids sort in creation order)."""
    return [
        NodeCapacity(node_id=f"{prefix}-{i:02d}", ip=f"10.0.0.{i}", total_gpus=gpus, free_gpus=gpus,
                     total_cpus=cpus, free_cpus=cpus, gpu_type=gpu_type)
        for i in range(1, count + 1)
    ]


def demand_from_payload(payload: SubmissionPayload) -> Demand | None:
    """The gang the job's driver will ask Ray for, read where the driver reads it: the spec
    inside the entrypoint's ``--context`` (``nnodes``, ``n_gpus_per_node``, ``workload``),
    else ``trainer.nnodes=`` / ``trainer.n_gpus_per_node=`` on its command. CPUs per node
    as verl reserves them (``demand_for``). None: no gang (the job holds only its driver)."""
    found = _CONTEXT_RE.search(payload.entrypoint)
    if found is None:
        return None
    try:
        ctx = decode_context(found.group(1))
    except Exception:  # not an Argus entrypoint: nothing to read a gang from
        return None
    spec = ctx.spec
    nnodes, gpus = spec.get("nnodes"), spec.get("n_gpus_per_node")
    if not (isinstance(nnodes, int) and isinstance(gpus, int)):
        hits = [_TRAINER_RE[key].search(ctx.command) for key in ("nnodes", "n_gpus_per_node")]
        if hits[0] is None or hits[1] is None:
            return None
        nnodes, gpus = int(hits[0].group(1)), int(hits[1].group(1))
    workload, model = spec.get("workload"), spec.get("gpu_type")
    models = (model,) if isinstance(model, str) else tuple(map(str, model)) if isinstance(model, (list, tuple)) else None
    return demand_for(nnodes, gpus, workload=workload if isinstance(workload, str) else "ppo", gpu_type=models)


@dataclass
class FakeJob:
    """One job as the fake Ray keeps it."""

    payload: SubmissionPayload
    submitted_at: float
    status: AttemptStatus = S.PENDING
    message: str = "Job has not started yet."
    error_type: str | None = None
    end_time: float | None = None
    driver_exit_code: int | None = None
    driver_node_id: str | None = None
    logs: str = ""
    demand: Demand | None = None
    held: dict[str, tuple[float, float]] = field(default_factory=dict)  # node id -> (GPUs, CPUs)
    place_at: float | None = None  # RUNNING, gang not placed yet: when it will be
    pending_pgs: list[str] = field(default_factory=list)  # placement groups Ray cannot place (a hang)

    def observe(self) -> JobObservation:
        # Ray's start_time is when the job was submitted, not when it began running.
        return JobObservation(
            submission_id=self.payload.submission_id, status=self.status, message=self.message,
            error_type=self.error_type, start_time=self.submitted_at, end_time=self.end_time,
            driver_exit_code=self.driver_exit_code, driver_node_id=self.driver_node_id,
        )


class FakeRay:
    """A ``RayPort`` in memory. ``nodes``: the alive worker nodes (their ``free_*`` are the
    baseline, before what this fake's jobs hold); ``clock``: Ray's clock (pass the
    reactor's); ``demand_of``: the gang a payload will hold once RUNNING."""

    def __init__(
        self,
        nodes: Iterable[NodeCapacity] = (),
        *,
        clock: Callable[[], float] = time.time,
        demand_of: Callable[[SubmissionPayload], Demand | None] = demand_from_payload,
        placement_lag_s: float = 0.0,
        stop_grace_s: float = 0.0,
    ) -> None:
        self.nodes: list[NodeCapacity] = sorted(nodes, key=lambda n: n.node_id)
        self.placement_lag_s = placement_lag_s
        self.stop_grace_s = stop_grace_s  # from ``stop`` to the end (Ray's SIGTERM, then kill)
        # Jobs holding resources, waiting for their gang's placement, or being stopped: a
        # cluster that ran thousands of jobs (``argus sim``) is counted over these only.
        # (a dict, kept in insertion order: summing CPUs in another order rounds otherwise)
        self._holding: dict[str, None] = {}
        self._lagging: set[str] = set()
        self._stopping: dict[str, float] = {}  # submission id -> when its stop ends it
        self._held_version = 0
        self.ended: list[str] = []  # submission ids in the order their jobs ended
        self._free: tuple[tuple[int, int], list[NodeCapacity]] | None = None
        self._on: dict[str, dict[str, tuple[float, float]]] = {}  # node id -> holding job -> (GPUs, CPUs)
        self._dirty: set[str] | None = None  # nodes whose holders changed since ``_free`` (None: all)
        self.placement_failures: list[str] = []  # jobs whose gang did not fit when it was due
        self.joined_at: dict[str, float] = {n.node_id: clock() for n in self.nodes}
        self.clock = clock
        self.demand_of = demand_of
        self.jobs: dict[str, FakeJob] = {}
        self.calls: list[tuple[str, str]] = []  # (method, submission id) of every port call
        self.capacity_reads: list[float] = []  # when ``capacity`` answered
        self.closed = False
        self._unavailable: str | None = None
        self._lose_next_reply = False
        self._refuse_next: str | None = None

    # ------------------------------------------------------------------ the port
    async def submit(self, payload: SubmissionPayload) -> None:
        sid = payload.submission_id
        self._enter("submit", sid)
        if sid in self.jobs:
            raise DuplicateSubmission(
                f"Request failed with status code 400: Job with submission_id {sid} already exists. "
                "Please use a different submission_id."
            )
        if self._refuse_next is not None:
            why, self._refuse_next = self._refuse_next, None
            raise RuntimeError(f"Request failed with status code 400: {why}")
        self.jobs[sid] = FakeJob(payload=payload, submitted_at=self.clock(), demand=self.demand_of(payload))
        if self._lose_next_reply:
            # Ray took the job, the caller never heard: the case exactly-once recovery is for.
            self._lose_next_reply = False
            raise RayUnavailable(f"job server: read timed out (submit {sid})")

    async def status(self, submission_id: str) -> JobObservation | None:
        self._enter("status", submission_id)
        self._place_due()
        job = self.jobs.get(submission_id)
        return None if job is None else job.observe()

    async def statuses(self, submission_ids: Collection[str]) -> dict[str, JobObservation | None]:
        self._enter("statuses", ",".join(sorted(submission_ids)))
        self._place_due()
        return {sid: (None if (job := self.jobs.get(sid)) is None else job.observe()) for sid in submission_ids}

    async def stop(self, submission_id: str) -> bool:
        """Stops at once, or ``stop_grace_s`` later (real Ray takes a moment: the next
        ``status`` may still say RUNNING)."""
        self._enter("stop", submission_id)
        job = self.jobs.get(submission_id)
        if job is None or job.status.is_terminal():
            return False
        if self.stop_grace_s > 0 and job.status is S.RUNNING:
            self._stopping.setdefault(submission_id, self.clock() + self.stop_grace_s)
        else:
            self._end(job, S.STOPPED, _STOPPED_MSG)
        return True

    async def logs_tail(self, submission_id: str, max_bytes: int = 65_536) -> str:
        self._enter("logs_tail", submission_id)
        job = self.jobs.get(submission_id)
        if job is None:
            return ""
        return job.logs.encode("utf-8", "replace")[-max_bytes:].decode("utf-8", "ignore")

    async def capacity(self) -> list[NodeCapacity]:
        self._enter("capacity", "")
        self.capacity_reads.append(self.clock())
        return self.free_nodes()

    async def pending_placements(self, submission_ids: Collection[str]) -> dict[str, list[str]]:
        self._enter("pending_placements", ",".join(sorted(submission_ids)))
        return {sid: list(self.jobs[sid].pending_pgs) if sid in self.jobs else [] for sid in submission_ids}

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ controls: Ray itself
    def make_unavailable(self, reason: str = "connection refused") -> None:
        """Every port call raises RayUnavailable until ``make_available``."""
        self._unavailable = reason

    def make_available(self) -> None:
        self._unavailable = None

    def lose_next_submit_reply(self) -> None:
        """The next new submission reaches Ray, but its caller gets RayUnavailable."""
        self._lose_next_reply = True

    def refuse_next_submit(self, why: str = "invalid runtime_env") -> None:
        """The next new submission is refused by Ray (HTTP 400, a RuntimeError)."""
        self._refuse_next = why

    def set_nodes(self, nodes: Iterable[NodeCapacity]) -> None:
        """Nodes joined or left. What jobs hold on a node that left is no longer counted."""
        self.nodes = sorted(nodes, key=lambda n: n.node_id)
        self._changed()

    def changes_due(self) -> list[float]:
        """When this Ray changes by itself: stops whose grace ends, gangs placed late."""
        return [*self._stopping.values(),
                *(job.place_at for sid in self._lagging if (job := self.jobs[sid]).place_at is not None)]

    def lose_node(self, node_id: str) -> None:
        """The node died: it leaves, and every job holding resources there fails."""
        self.nodes = [n for n in self.nodes if n.node_id != node_id]
        self.joined_at.pop(node_id, None)
        self._changed()
        for sid, job in self.jobs.items():
            if node_id in job.held and not job.status.is_terminal():
                self.fail(sid, f"The node {node_id} running this job's actors died unexpectedly.",
                          error_type="NODE_DIED")

    def return_node(self, node: NodeCapacity) -> None:
        """A node (re)joins: pass a new ``node_id`` for a restarted raylet."""
        self.nodes = sorted([*(n for n in self.nodes if n.node_id != node.node_id), node], key=lambda n: n.node_id)
        self.joined_at[node.node_id] = self.clock()
        self._changed()

    def free_nodes(self) -> list[NodeCapacity]:
        """The nodes as ``capacity`` reports them: baseline free less what jobs hold."""
        self._place_due()
        return self._free_now()

    def _free_now(self) -> list[NodeCapacity]:
        # Made again only when what jobs hold, or the nodes, changed (``_changed``), and
        # then only for the nodes whose holders changed (``_dirty``; None: every node).
        if self._free is not None and self._free[0] == (len(self.nodes), self._held_version):
            return list(self._free[1])
        before = {n.node_id: n for n in self._free[1]} if self._free is not None and self._dirty is not None else {}
        out = []
        for node in self.nodes:
            made = before.get(node.node_id)
            if made is None or node.node_id in self._dirty:  # type: ignore[operator]
                g = c = 0.0
                for gpus, cpus in self._on.get(node.node_id, {}).values():  # in the order the jobs took them
                    g, c = g + gpus, c + cpus
                made = NodeCapacity(node_id=node.node_id, ip=node.ip, total_gpus=node.total_gpus,
                                    free_gpus=node.free_gpus - g, total_cpus=node.total_cpus,
                                    free_cpus=node.free_cpus - c, gpu_type=node.gpu_type)
            out.append(made)
        self._free = ((len(self.nodes), self._held_version), out)
        self._dirty = set()
        return list(out)

    def _hold(self, sid: str, placement: dict[str, tuple[float, float]]) -> None:
        """The job takes ``placement`` (node id -> (GPUs, CPUs))."""
        self.jobs[sid].held = placement
        self._holding[sid] = None
        for node_id, use in placement.items():
            self._on.setdefault(node_id, {})[sid] = use
        self._changed(placement)

    def _unhold(self, sid: str) -> None:
        """The job gives back what it holds."""
        job = self.jobs[sid]
        for node_id in job.held:
            self._on[node_id].pop(sid, None)
        self._changed(job.held)
        job.held = {}
        self._holding.pop(sid, None)

    def _changed(self, nodes: Iterable[str] | None = None) -> None:
        """What jobs hold on ``nodes`` (None: the nodes themselves) changed: their free
        counts are made again."""
        self._held_version += 1
        if nodes is None:
            self._dirty = None
        elif self._dirty is not None:
            self._dirty.update(nodes)

    # ------------------------------------------------------------------ controls: one job
    def job(self, submission_id: str) -> FakeJob:
        """The job (KeyError: Ray has no such job)."""
        return self.jobs[submission_id]

    def submit_count(self, submission_id: str) -> int:
        """How many times ``submit`` was called for this id (accepted or not)."""
        return self.calls.count(("submit", submission_id))

    def fits(self, submission_id: str) -> bool:
        return self._placement(self.job(submission_id)) is not None

    def start(self, submission_id: str) -> FakeJob:
        """PENDING → RUNNING: the driver and the gang take their resources (first fit over
        nodes in id order, one node per gang member). Raises DoesNotFit when they cannot."""
        job = self.job(submission_id)
        if job.status is not S.PENDING:
            raise ValueError(f"{submission_id} is {job.status.value}, not PENDING")
        if self.placement_lag_s > 0:  # its gang is placed later (``_place_due``)
            job.place_at = self.clock() + self.placement_lag_s
            self._lagging.add(submission_id)
            job.driver_node_id = self.nodes[0].node_id if self.nodes else None
            job.status, job.message = S.RUNNING, "Job is currently running."
            return job
        placement = self._placement(job)
        if placement is None:
            raise DoesNotFit(f"{submission_id}: {job.demand} does not fit {self.free_nodes()}")
        self._hold(submission_id, placement)
        job.driver_node_id = next(iter(placement), None)
        job.status, job.message = S.RUNNING, "Job is currently running."
        return job

    def succeed(self, submission_id: str, *, logs: str = "") -> FakeJob:
        job = self.job(submission_id)
        job.driver_exit_code = 0
        job.logs += logs
        return self._end(job, S.SUCCEEDED, _SUCCEEDED_MSG)

    def fail(self, submission_id: str, message: str = "", *, error_type: str | None = None,
             exit_code: int | None = None, logs: str = "") -> FakeJob:
        """The job FAILED. With an ``exit_code`` and no message, Ray's own words for a
        failed entrypoint (which end with the log) and its JOB_ENTRYPOINT_COMMAND_ERROR."""
        job = self.job(submission_id)
        job.logs += logs
        job.driver_exit_code = exit_code
        if exit_code is not None and not message:
            message = _ENTRYPOINT_FAILED.format(code=exit_code, logs=job.logs[-20_000:])
            error_type = error_type or "JOB_ENTRYPOINT_COMMAND_ERROR"
        job.error_type = error_type
        return self._end(job, S.FAILED, message)

    def hang_on_placement(self, submission_id: str, groups: Iterable[str] = ("global_pool:0",)) -> FakeJob:
        """The job runs but waits for placement groups Ray cannot place (verl >= 0.6 waits
        without a timeout): they stay PENDING until it is stopped."""
        job = self.job(submission_id)
        job.pending_pgs = list(groups)
        return job

    def fail_for_resources(self, submission_id: str) -> FakeJob:
        """The job FAILED the way verl fails fast when the cluster's free GPUs are fewer than
        its gang (exit code 1, the ValueError inside a RayTaskError in the log)."""
        job = self.job(submission_id)
        free = sum(n.free_gpus for n in self.free_nodes()) + sum(g for g, _ in job.held.values())
        want = job.demand.total_gpus if job.demand is not None else 0
        log = ("ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()\n"
               f"ValueError: Total available GPUs {free} is less than total desired GPUs {want}\n")
        return self.fail(submission_id, exit_code=1, logs=log)

    def forget(self, submission_id: str) -> None:
        """Ray lost the job (a head restarted without its GCS state): ``status`` says None."""
        self._unhold(submission_id)
        del self.jobs[submission_id]
        self._lagging.discard(submission_id)
        self._stopping.pop(submission_id, None)

    # ------------------------------------------------------------------ inside
    def _enter(self, method: str, submission_id: str) -> None:
        self.calls.append((method, submission_id))
        if self.closed:
            raise RuntimeError("FakeRay is closed")
        if self._unavailable is not None:
            raise RayUnavailable(self._unavailable)

    def _end(self, job: FakeJob, status: AttemptStatus, message: str) -> FakeJob:
        if job.status.is_terminal():
            raise ValueError(f"{job.payload.submission_id} already ended {job.status.value}")
        job.status, job.message = status, message
        job.end_time = self.clock()
        sid = job.payload.submission_id
        self._unhold(sid)
        job.place_at = None
        self.ended.append(sid)
        self._lagging.discard(sid)
        self._stopping.pop(sid, None)
        return job

    def _place_due(self) -> None:
        """End the stops whose grace is over; place the gangs whose placement lag is over,
        in the order they became due."""
        now = self.clock()
        for sid, at in sorted(self._stopping.items(), key=lambda item: (item[1], item[0])):
            if at <= now:
                self._end(self.jobs[sid], S.STOPPED, _STOPPED_MSG)
        due = sorted((job.place_at, sid) for sid in self._lagging
                     if (job := self.jobs[sid]).place_at is not None and job.place_at <= now)
        for _, sid in due:
            job = self.jobs[sid]
            job.place_at = None
            self._lagging.discard(sid)
            placement = self._placement(job)
            if placement is None:
                self.placement_failures.append(sid)
                job.pending_pgs = ["global_pool:0"]  # verl >= 0.6 waits for it without a timeout
            else:
                self._hold(sid, placement)

    def _placement(self, job: FakeJob) -> dict[str, tuple[float, float]] | None:
        """node id -> (GPUs, CPUs) for the gang's nodes, the driver's CPUs on the first: on
        the nodes Argus admitted it onto (its ``argus_nodes``), where it names them (a gang
        whose node died before it was placed waits), else first fit in id order."""
        driver = job.payload.entrypoint_num_cpus
        demand = job.demand or Demand(nnodes=1, n_gpus_per_node=0, cpus_per_node=0.0)
        chosen: dict[str, tuple[float, float]] = {}
        planned = [n for n in job.payload.metadata.get("argus_nodes", "").split(",") if n]
        models = {m.casefold() for m in demand.gpu_types}
        for node in self._free_now():
            if planned and node.node_id not in planned:
                continue
            if models and node.gpu_type.casefold() not in models:
                continue  # as Ray places a job whose groups ask for accelerator_type:<model>
            cpus = demand.cpus_per_node + (driver if not chosen else 0.0)
            if node.free_gpus >= demand.n_gpus_per_node and node.free_cpus >= cpus:
                chosen[node.node_id] = (float(demand.n_gpus_per_node), cpus)
                if len(chosen) == demand.nnodes:
                    return chosen
        return None


if TYPE_CHECKING:
    def _fake_is_a_port(fake: FakeRay) -> RayPort:
        return fake  # mypy fails here if the fake drifts from the port
