"""Reading a cluster trace as gang demand (openb: Alibaba's GPU cluster trace of 2023,
``openb_pod_list_*.csv`` and ``openb_node_list_gpu_node.csv``).

A pod becomes a task: arrival = ``creation_time``; run time = ``deletion_time -
scheduled_time``; ``num_gpu`` whole GPUs (a shared GPU, ``gpu_milli`` < 1000, counts as
one) and ``cpu_milli / 1000`` CPUs on one node. Rows without a GPU or without a run time
are skipped and counted. A pod's ``gpu_spec`` (GPU models it accepts, ``|``-separated; empty:
any) becomes its demand's ``gpu_types`` and a node's ``model`` its ``gpu_type``
(``gpu_spec="obey"``); a pod no node of the (subset) cluster could ever hold, for its
models or its size, is skipped and counted, as Argus refuses it at submit. With
``gpu_spec="ignore"`` every pod takes any model, and the pods that named one are counted
as relaxed. The trace has no user column: a task's user is
``user-NN``, NN = the first 8 hex digits of SHA-256 of the pod name modulo ``users``
(deterministic, about uniform). Every transformation below is deterministic for a seed.
"""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path

import msgspec

from argus.events import Demand
from argus.scheduler.gpumodel import normalize

__all__ = ["GangMix", "Marks", "ModelMix", "SimNode", "SimTask", "Trace", "load_openb"]


class SimTask(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    user: str
    arrival: float
    runtime: float
    demand: Demand
    priority: int = 0
    preemptible: bool = False
    time_limit: float | None = None  # the spec's time_limit_s (None: none, or the run time with exact estimates)
    cancel_at: float | None = None  # its user cancels it then (None: never)


class SimNode(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    gpus: float
    cpus: float
    gpu_type: str = ""


class Trace(msgspec.Struct, frozen=True, kw_only=True):
    tasks: list[SimTask]
    nodes: list[SimNode]
    skipped_no_gpu: int = 0
    skipped_no_runtime: int = 0
    skipped_too_big: int = 0  # a gang no nodes of the (subset) cluster could ever hold
    skipped_no_model: int = 0  # of those: it fits by size, but no node has a model it accepts
    relaxed_model: int = 0  # gpu_spec="ignore": pods whose models were set aside


class GangMix(msgspec.Struct, frozen=True):
    """Turn a deterministic fraction of tasks into multi-node gangs (the trace has only
    single-node tasks; verl runs span nodes). ``0.1:2x8,0.05:4x8``: 10% become 2 nodes x 8
    GPUs, another 5% 4 x 8; CPUs per node and run time are kept."""

    parts: tuple[tuple[float, int, int], ...]

    @classmethod
    def parse(cls, text: str) -> "GangMix":
        parts = []
        for item in filter(None, (p.strip() for p in text.split(","))):
            try:
                share, shape = item.split(":")
                nnodes, gpus = shape.lower().split("x")
                parts.append((float(share), int(nnodes), int(gpus)))
            except ValueError as exc:
                raise ValueError(f"gang mix {item!r}: write SHARE:NODESxGPUS, e.g. 0.1:2x8") from exc
        if sum(p[0] for p in parts) > 1:
            raise ValueError("gang mix: the shares add up to more than 1")
        return cls(tuple(parts))


class ModelMix(msgspec.Struct, frozen=True):
    """Give GPU models to tasks that name none (the shared openb trace's pods name none;
    Alibaba's published variants give some a model). ``0.33:0.1``: a seeded-hash third of
    the tasks name one model; of those, a tenth name a *scarce* model (one whose nodes are
    at most 5 % of the cluster's, at least one node), the rest a model drawn in proportion
    to its nodes. Only models with nodes that could hold the task's gang (by GPUs and CPUs)
    are drawn from; a scarce draw with no scarce model able to hold it draws in proportion
    instead, and a task no model could hold is left as it is. Deterministic for a seed."""

    share: float
    scarce: float

    @classmethod
    def parse(cls, text: str) -> "ModelMix":
        try:
            share, scarce = (float(x) for x in text.split(":"))
        except ValueError as exc:
            raise ValueError(f"gpu model mix {text!r}: write SHARE:SCARCE, e.g. 0.33:0.1") from exc
        if not (0 <= share <= 1 and 0 <= scarce <= 1):
            raise ValueError("gpu model mix: both parts are fractions from 0 to 1")
        return cls(share, scarce)

    def apply(self, task: SimTask, nodes: list[SimNode], seed: int) -> SimTask:
        """``task`` naming a model by the rule above, or as it is."""
        if task.demand.gpu_types or _unit("model:" + task.task_id, seed) >= self.share:
            return task
        d = task.demand
        holders: dict[str, int] = {}  # model -> its nodes that could hold one gang member
        for n in nodes:
            if n.gpu_type and n.gpus >= d.n_gpus_per_node and n.cpus >= d.cpus_per_node:
                holders[n.gpu_type] = holders.get(n.gpu_type, 0) + 1
        holders = {m: k for m, k in holders.items() if k >= d.nnodes}
        if not holders:
            return task
        counts: dict[str, int] = {}
        for n in nodes:
            counts[n.gpu_type] = counts.get(n.gpu_type, 0) + 1
        scarce = {m: k for m, k in holders.items() if counts[m] <= max(1, len(nodes) // 20)}
        pool = scarce if scarce and _unit("scarce:" + task.task_id, seed) < self.scarce else holders
        pick = _unit("which-model:" + task.task_id, seed) * sum(pool.values())
        for model in sorted(pool):
            pick -= pool[model]
            if pick < 0:
                break
        return msgspec.structs.replace(task, demand=msgspec.structs.replace(d, gpu_types=(model,)))


class Marks(msgspec.Struct, frozen=True, kw_only=True):
    """Priorities and preemptibility the trace does not have, given to deterministic
    fractions of its tasks: ``priorities`` (share, priority) pairs (``0.2:10`` gives 20% of
    tasks priority 10), ``preemptible`` the fraction that may be preempted."""

    priorities: tuple[tuple[float, int], ...] = ()
    preemptible: float = 0.0

    @classmethod
    def parse(cls, priority_mix: str | None, preemptible: float) -> "Marks":
        parts = []
        for item in filter(None, (p.strip() for p in (priority_mix or "").split(","))):
            try:
                share, priority = item.split(":")
                parts.append((float(share), int(priority)))
            except ValueError as exc:
                raise ValueError(f"priority mix {item!r}: write SHARE:PRIORITY, e.g. 0.2:10") from exc
        if sum(p[0] for p in parts) > 1:
            raise ValueError("priority mix: the shares add up to more than 1")
        if not 0 <= preemptible <= 1:
            raise ValueError("preemptible: a fraction from 0 to 1")
        return cls(priorities=tuple(parts), preemptible=preemptible)

    def apply(self, task: SimTask, seed: int) -> SimTask:
        u = _unit("priority:" + task.task_id, seed)
        priority = task.priority
        for share, value in self.priorities:
            if u < share:
                priority = value
                break
            u -= share
        preemptible = _unit("preemptible:" + task.task_id, seed) < self.preemptible
        return msgspec.structs.replace(task, priority=priority, preemptible=preemptible)


def _unit(text: str, seed: int) -> float:
    """A deterministic number in [0, 1) for ``text``."""
    return int(hashlib.sha256(f"{seed}:{text}".encode()).hexdigest()[:12], 16) / 16**12


def _user(name: str, users: int) -> str:
    return f"user-{int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % users:02d}"


def load_openb(
    pods: Path,
    nodes: Path,
    *,
    nodes_subset: int | None = None,
    load: float | None = None,
    gang_mix: GangMix | None = None,
    marks: Marks | None = None,
    seed: int = 0,
    users: int = 16,
    limit: int | None = None,
    gpu_spec: str = "obey",
    model_mix: ModelMix | None = None,
) -> Trace:
    """The trace as tasks and nodes. ``nodes_subset``: that many nodes, chosen by a
    seeded hash of their names; ``load``: arrivals compressed (or stretched) so that the
    tasks offer that fraction of the (subset) cluster's GPU capacity over the arrival span;
    ``limit``: the first N usable tasks by arrival; ``gpu_spec``: "obey" the pods' GPU
    models or "ignore" them (module docstring); ``model_mix``: give models to tasks that
    name none (``ModelMix``), after the gang mix, on the (subset) cluster's nodes."""
    if gpu_spec not in ("obey", "ignore"):
        raise ValueError(f"gpu_spec: {gpu_spec!r}; write obey or ignore")
    node_list = _read_nodes(nodes, nodes_subset, seed)
    tasks, no_gpu, no_runtime, relaxed = _read_pods(pods, users, obey_models=gpu_spec == "obey")
    tasks.sort(key=lambda t: (t.arrival, t.task_id))
    if gang_mix is not None:
        tasks = [_as_gang(t, gang_mix, seed) for t in tasks]
    if model_mix is not None:
        tasks = [model_mix.apply(t, node_list, seed) for t in tasks]
    if marks is not None:
        tasks = [marks.apply(t, seed) for t in tasks]
    # A gang no set of nodes of this cluster could ever hold is refused at submit in Argus
    # (the first-contact rule): skipped here, and counted.
    fits = [t for t in tasks if _can_ever_fit(t, node_list)]
    too_big = len(tasks) - len(fits)
    no_model = sum(1 for t in tasks if t.demand.gpu_types and not _can_ever_fit(t, node_list)
                   and _can_ever_fit(t, node_list, models=False))
    if limit is not None:
        fits = fits[:limit]
    if load is not None and fits:
        fits = _at_load(fits, node_list, load)
    return Trace(tasks=fits, nodes=node_list, skipped_no_gpu=no_gpu, skipped_no_runtime=no_runtime,
                 skipped_too_big=too_big, skipped_no_model=no_model, relaxed_model=relaxed)


def _read_nodes(path: Path, subset: int | None, seed: int) -> list[SimNode]:
    """The trace's nodes, or ``subset`` of them chosen by a seeded hash of their names."""
    with open(path, newline="") as f:
        nodes = [SimNode(node_id=row["sn"], gpus=float(row["gpu"]), cpus=int(row["cpu_milli"]) / 1000,
                         gpu_type=(row.get("model") or "").strip()) for row in csv.DictReader(f)]
    if subset is not None:
        nodes = sorted(nodes, key=lambda n: _unit(n.node_id, seed))[:subset]
        nodes.sort(key=lambda n: n.node_id)
    return nodes


def _read_pods(path: Path, users: int, obey_models: bool) -> tuple[list[SimTask], int, int, int]:
    """The usable pods as tasks (in file order), and how many had no GPU, no run time, or
    models set aside (``obey_models`` False)."""
    tasks, no_gpu, no_runtime, relaxed = [], 0, 0, 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"] or 0)
            if gpus <= 0:
                no_gpu += 1
                continue
            if not row["deletion_time"] or not row["scheduled_time"]:
                no_runtime += 1
                continue
            runtime = float(row["deletion_time"]) - float(row["scheduled_time"])
            if runtime <= 0:
                no_runtime += 1
                continue
            models = normalize([m.strip() for m in re.split(r"[|,]", row.get("gpu_spec") or "") if m.strip()])
            if models and not obey_models:
                models, relaxed = (), relaxed + 1
            demand = Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=int(row["cpu_milli"]) / 1000,
                            gpu_types=models)
            tasks.append(SimTask(task_id=row["name"], user=_user(row["name"], users),
                                 arrival=float(row["creation_time"]), runtime=runtime, demand=demand))
    return tasks, no_gpu, no_runtime, relaxed


def _can_ever_fit(task: SimTask, nodes: list[SimNode], models: bool = True) -> bool:
    """Whether idle nodes could hold ``task``'s gang (of its GPU models, unless not ``models``)."""
    d = task.demand
    wanted = {m.casefold() for m in d.gpu_types} if models else set()
    return sum(1 for n in nodes if n.gpus >= d.n_gpus_per_node and n.cpus >= d.cpus_per_node
               and (not wanted or n.gpu_type.casefold() in wanted)) >= d.nnodes


def _as_gang(task: SimTask, mix: GangMix, seed: int) -> SimTask:
    u = _unit("gang:" + task.task_id, seed)
    for share, nnodes, gpus in mix.parts:
        if u < share:
            return msgspec.structs.replace(task, demand=Demand(
                nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=task.demand.cpus_per_node))
        u -= share
    return task


def _at_load(tasks: list[SimTask], nodes: list[SimNode], load: float) -> list[SimTask]:
    """Scale arrival times so that GPU-seconds asked / (GPUs x arrival span) = ``load``."""
    capacity = sum(n.gpus for n in nodes)
    asked = sum(t.runtime * t.demand.total_gpus for t in tasks)
    start = tasks[0].arrival
    span = tasks[-1].arrival - start
    if span <= 0 or capacity <= 0:
        return tasks
    factor = (asked / (capacity * load)) / span
    return [msgspec.structs.replace(t, arrival=start + (t.arrival - start) * factor) for t in tasks]
