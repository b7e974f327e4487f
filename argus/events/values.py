"""Value objects carried inside events: a task's gang (``Demand``), a node as Ray reported
it (``NodeCapacity``) and what was handed to Ray (``SubmissionPayload``). Re-exported by
``argus.events.catalog`` with the events that carry them."""

from __future__ import annotations

import enum

import msgspec

__all__ = ["Demand", "HoldKind", "NodeCapacity", "StackedProcess", "SubmissionPayload"]


# omit_defaults: a demand or node without a GPU model encodes as it did before models were
# known, so events written since read the same to older code and compare equal byte for byte.
class Demand(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """What a task needs at once (the gang): ``nnodes`` nodes, each with
    ``n_gpus_per_node`` GPUs and ``cpus_per_node`` CPUs; ``gpu_types``: the GPU models it
    accepts (any node's GPUs when empty; sorted, as ``argus.scheduler.gpumodel`` matches them)."""

    nnodes: int
    n_gpus_per_node: int
    cpus_per_node: float
    gpu_types: tuple[str, ...] = ()

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node


class NodeCapacity(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One alive worker node as Ray reported it; ``gpu_type``: its GPU model, from Ray's
    ``accelerator_type:<model>`` resource ("" when it has none)."""

    node_id: str
    ip: str
    total_gpus: float
    free_gpus: float
    total_cpus: float
    free_cpus: float
    gpu_type: str = ""


class SubmissionPayload(msgspec.Struct, frozen=True, kw_only=True):
    """Everything handed to Ray's JobSubmissionClient.submit_job, kept verbatim so that a
    resubmission after a crash is the same submission."""

    submission_id: str
    entrypoint: str
    entrypoint_num_cpus: float
    entrypoint_resources: dict[str, float]
    runtime_env: dict[str, object]
    metadata: dict[str, str]


class StackedProcess(msgspec.Struct, frozen=True, kw_only=True):
    """One process dumped: its pid, command line, and innermost frame of its first thread."""

    pid: int
    command: str
    top_frame: str = ""


class HoldKind(str, enum.Enum):
    """Why a node admits no new attempt (``NodeHeld``)."""

    DRAIN = "drain"  # an admin's, until undrained
    QUARANTINE = "quarantine"  # processes of ended attempts still run there, until it is clean
