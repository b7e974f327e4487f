"""Building a Ray job submission for one attempt, and the context the driver receives.

The whole driver context (spec raw and expanded, the command) travels *inside the
entrypoint* as one ``--context`` argument (msgspec JSON, zlib, urlsafe base64). Why there:
the entrypoint is part of ``SubmissionPayload``, which the reactor records in
``AttemptStarting`` before calling Ray, so a resubmission after a crash is byte-for-byte the
same submission, and nothing has to be written to the shared filesystem by the control
plane before Ray runs the job.
"""

from __future__ import annotations

import base64
import copy
import os
import posixpath
import re
import shlex
import zlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from argus import layout
from argus.config import ArgusConfig
from argus.confine.sandbox import Sandbox
from argus.events.catalog import Demand, SubmissionPayload
from argus.rayjobs.output import OutputLimits
from argus.taskspec.sizes import parse_bytes
from argus.scheduler.gpumodel import ACCELERATOR_PREFIX
from argus.taskspec.checks import hub_ids
from argus.taskspec.hub import in_cache

__all__ = [
    "DriverContext",
    "MAX_CONTEXT_CHARS",
    "build_submission",
    "decode_context",
    "attempt_of",
    "encode_context",
    "hub_env",
    "job_dir",
    "output_limits",
    "pinned_model",
    "ray_worker_rotation",
    "submission_id_for",
]

# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); stay well below it.
MAX_CONTEXT_CHARS = 96 * 1024


class DriverContext(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``argus.driver`` needs to set up the job dir and run the command."""

    task_id: str
    user: str
    submission_id: str
    attempt_no: int
    shared_root: str
    command: str  # expanded: what runs (bash -c, not a login shell)
    command_raw: str = ""
    spec_raw: str = ""
    spec: dict[str, Any] = {}
    # v2.sandbox: how the command runs confined (argus.confine.command); None: not.
    sandbox: Sandbox | None = None
    # How much of the output is kept (argus.rayjobs.output); None (an older context): the default.
    output: OutputLimits | None = None


def submission_id_for(task_id: str, attempt_no: int) -> str:
    """Deterministic Ray submission id of an attempt (docs/design.md §4)."""
    return f"{task_id}--a{attempt_no:02d}"


_SUBMISSION_RE = re.compile(r"^(.+)--a(\d{2,})$")


def attempt_of(name: str) -> tuple[str, int | None]:
    """The task id and attempt number a folder of ``jobs/`` belongs to: ``<task>--aNN``
    (an attempt's, :func:`submission_id_for`) or ``<task>`` (the task's own; None)."""
    match = _SUBMISSION_RE.match(name)
    return (match.group(1), int(match.group(2))) if match else (name, None)


def hub_env(config: ArgusConfig, user: str, command: str) -> dict[str, str]:
    """The Hugging Face variables of a job (v2.hub; docs/data.md): ``HF_HOME`` in the
    user's home (the hub library, ``datasets`` and the tokens write there), and
    ``HF_HUB_CACHE`` the shared, read-only ``<shared>/hf`` when the cluster is offline or
    it holds every hub id the command names. Else (online, a model missing there) the
    hub cache stays ``$HF_HOME/hub``, where the job can download it: jobs cannot write
    the shared one. Offline: ``HF_HUB_OFFLINE`` and its siblings too."""
    hub = config.v2.hub
    if not hub.shared_cache:
        return {}
    root = str(PurePosixPath(config.shared_root))
    env = {"HF_HOME": f"{layout.home(root, user)}/.cache/huggingface"}
    shared = layout.hub_cache(root)
    if hub.offline or all(in_cache(Path(shared), hub_id) for hub_id in hub_ids(command)):
        env["HF_HUB_CACHE"] = shared
    if hub.offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def job_dir(shared_root: str, user: str, submission_id: str) -> PurePosixPath:
    """Where an attempt's outputs go (docs/design.md §7)."""
    return PurePosixPath(layout.job_dir(shared_root, user, submission_id))


def encode_context(ctx: DriverContext) -> str:
    raw = zlib.compress(msgspec.json.encode(ctx), 9)
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_context(text: str) -> DriverContext:
    return msgspec.json.decode(zlib.decompress(base64.urlsafe_b64decode(text)), type=DriverContext)


def _sandbox(config: ArgusConfig) -> Sandbox | None:
    box = config.v2.sandbox
    if box.mode == "none":
        return None
    if box.mode == "bwrap":
        return Sandbox(bwrap=box.bwrap, read_only=list(box.read_only), writable=list(box.writable))
    # Landlock: the event log's folder (the database, and with `argus up` its token and
    # config) is never reachable, even when a checkout of Argus that holds it is readable.
    db_path = config.v2.sqlite.db_path
    data = os.path.dirname(os.path.abspath(db_path)) if db_path else ""
    hidden = [p for p in (data, *box.hidden) if p.startswith("/")]
    return Sandbox(mode=box.mode, read_only=list(box.read_only), writable=list(box.writable), hidden=hidden)


def output_limits(config: ArgusConfig, spec: dict[str, Any] | None) -> OutputLimits:
    """The attempt's output budget: the spec's ``output_budget`` (checked at submission)
    within ``v2.output.max_budget_bytes``, else the admin's ``v2.output.budget_bytes``."""
    out = config.v2.output
    budget = out.budget_bytes
    asked = (spec or {}).get("output_budget")
    if asked is not None:
        try:
            budget = max(64 * 1024, min(parse_bytes(asked), out.max_budget_bytes))
        except ValueError:
            pass  # checked at submission: an older spec keeps the default
    return OutputLimits(budget_bytes=budget, ray_copy_bytes=min(out.ray_copy_bytes, budget),
                        stop_over=out.on_exceed == "stop")


def ray_worker_rotation(limits: OutputLimits) -> dict[str, str]:
    """Ray's log rotation for the job's Ray workers (their ``worker-*.out``/``.err``): each
    stream of each worker keeps at most a quarter of the budget, in two files (the core
    worker reads these variables when it starts, after the job's runtime env is applied)."""
    return {"RAY_ROTATION_MAX_BYTES": str(max(1, limits.budget_bytes // 8)), "RAY_ROTATION_BACKUP_COUNT": "1"}


def pinned_model(demand: Demand, node_models: Sequence[str]) -> str:
    """The GPU model to pin a job of ``demand`` to: the one model of the nodes it was
    admitted onto, when it names models; "" otherwise (any node, or a mix)."""
    models = set(node_models)
    return next(iter(models)) if demand.gpu_types and len(models) == 1 else ""


def build_submission(
    *,
    task_id: str,
    attempt_no: int,
    user: str,
    command: str,
    config: ArgusConfig,
    spec_raw: str = "",
    spec: dict[str, Any] | None = None,
    command_raw: str = "",
    env_vars: dict[str, str] | None = None,
    python: str = "python3",
    node_ids: tuple[str, ...] = (),
    gpu_type: str = "",
) -> SubmissionPayload:
    """The payload for attempt ``attempt_no`` of ``task_id``: entrypoint ``<python> -m
    argus.driver --context …`` (``python``: the deployment's interpreter, v2.taskspec.python), driver pinned to a worker (``entrypoint_resources``), and a
    runtime_env whose PYTHONPATH holds the verl code path and the user's ``code/``.
    ``gpu_type``: the GPU model of the nodes it was admitted onto, when it names models
    (``pinned_model``): the driver is pinned to a node of that model (Ray's
    ``accelerator_type:<model>`` resource) and the job is told it (``ARGUS_GPU_TYPE``), so
    its own placement groups can ask for it too, as verl's ``RayResourcePool(accelerator_type=…)``
    does. Raises ValueError when the spec is too large to travel in the entrypoint."""
    sid = submission_id_for(task_id, attempt_no)
    ctx = DriverContext(
        task_id=task_id, user=user, submission_id=sid, attempt_no=attempt_no,
        shared_root=config.shared_root, command=command, command_raw=command_raw or command,
        spec_raw=spec_raw, spec=dict(spec or {}), sandbox=_sandbox(config),
        output=output_limits(config, spec),
    )
    blob = encode_context(ctx)
    if len(blob) > MAX_CONTEXT_CHARS:
        raise ValueError(f"task spec too large for the entrypoint ({len(blob)} encoded chars, "
                         f"limit {MAX_CONTEXT_CHARS}); shorten the spec or the command")
    entrypoint = f"{shlex.quote(python)} -m argus.driver --context {blob}"

    runtime_env: dict[str, Any] = copy.deepcopy(config.runtime_env)
    runtime_env["env_vars"] = _job_env(config, runtime_env, user=user, command=command, sid=sid, gpu_type=gpu_type,
                                       env_vars=env_vars or {}, limits=ctx.output or OutputLimits())
    entrypoint_resources = dict(config.entrypoint_resources)
    if gpu_type:  # a sliver, as verl's resource pools ask: it only says which kind of node
        entrypoint_resources[ACCELERATOR_PREFIX + gpu_type] = 0.001

    return SubmissionPayload(
        submission_id=sid,
        entrypoint=entrypoint,
        entrypoint_num_cpus=config.entrypoint_num_cpus,
        entrypoint_resources=entrypoint_resources,
        runtime_env=runtime_env,
        metadata={"argus_task_id": task_id, "argus_user": user, "argus_attempt": str(attempt_no),
                  # where Argus's ledger holds the gang (``ray job list`` shows it; the fake
                  # Ray places there); Ray itself may place it elsewhere on a multi-node cluster
                  **({"argus_nodes": ",".join(node_ids)} if node_ids else {})},
    )


def _job_env(config: ArgusConfig, runtime_env: dict[str, Any], *, user: str, command: str, sid: str,
             gpu_type: str, env_vars: dict[str, str], limits: OutputLimits) -> dict[str, str]:
    """The job's environment variables: the operator's ``runtime_env``'s, a PYTHONPATH with
    the verl code and the user's ``code/``, the hub cache's, the stop's grace, the GPU model,
    the spec's ``env_vars``, then what Argus sets last (the attempt's id, Ray's log rotation)."""
    merged_env = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
    user_code = posixpath.join(layout.home(str(PurePosixPath(config.shared_root)), user), "code")
    paths = [p for p in (config.user_code_path, user_code) if p]
    if merged_env.get("PYTHONPATH"):
        paths.append(merged_env["PYTHONPATH"])
    merged_env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
    for name, value in hub_env(config, user, command).items():
        merged_env.setdefault(name, value)  # the operator's runtime_env wins
    # Ray's job supervisor (which runs in this runtime env) waits this long after SIGTERM
    # before it kills the job: the grace period of every stop (preemption, cancel, limit).
    merged_env.setdefault("RAY_JOB_STOP_WAIT_TIME_S", str(max(1, round(config.v2.scheduler.preempt_grace_s))))
    if gpu_type:
        merged_env["ARGUS_GPU_TYPE"] = gpu_type
    merged_env.update(env_vars)
    # Every process of the attempt carries its id, its Ray workers too (they get the job's
    # runtime env): how its driver finds them to dump their stacks (argus.nodepool.stacks).
    merged_env["ARGUS_SUBMISSION_ID"] = sid
    # What each of its Ray workers prints is bounded too (set last, as the id).
    merged_env.update(ray_worker_rotation(limits))
    return merged_env
