"""Shared pieces of the reactor integration tests: config, task submission, waiting."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from argus.config import ArgusConfig, load_config
from argus.events import Demand, EventMeta, TaskCancelRequested, TaskSubmitted, task_stream
from argus.lifecycle import TaskState
from argus.store import EventStore
from projections import TaskView, load_task

_counter = 0


def write_config_file(cluster: Any, *, postgres_url: str = "", **scheduler: Any) -> str:
    """An Argus config file pointing at ``cluster``, with fast scheduler settings (and the
    log shared through PostgreSQL at ``postgres_url``, if given)."""
    global _counter
    _counter += 1
    doc: dict[str, Any] = {
        "address": cluster.job_server_url, "gcs_address": cluster.address,
        "shared_root": str(cluster.shared_root), "entrypoint_num_cpus": 0.5,
        "v2": {"scheduler": {"poll_interval_s": 0.2, "retry_interval_s": 1.0,
                             "lease_ttl_s": 3.0, **scheduler},
               "taskspec": {"python": sys.executable}},  # as `argus up` does
    }
    if postgres_url:
        doc["v2"]["postgres"] = {"url": postgres_url}
    path = Path(cluster.temp_dir) / f"argus-config-{_counter}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def reactor_config(cluster: Any, **scheduler: Any) -> ArgusConfig:
    return load_config(write_config_file(cluster, **scheduler))


def make_dataset(shared_root: Path, user: str) -> Path:
    path = shared_root / "users" / user / "datasets" / "toy.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"what is {i} mod 2", "reward_model": {"ground_truth": str(i % 2)},
             "data_source": "toy"} for i in range(16)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def toy_command(shared_root: Path, user: str, *, nnodes: int, gpus: int, steps: int = 3,
                sleep_s: float = 0.0, train_file: str | None = None, extra: str = "") -> str:
    train = train_file or str(make_dataset(shared_root, user))
    return (
        # The interpreter as the API writes it into an expanded command (v2.taskspec.python).
        f"PYTHONUNBUFFERED=1 {shlex.quote(sys.executable)} -m argus.examples.toy_trainer "
        f"data.train_files={shlex.quote(train)} trainer.nnodes={nnodes} "
        f"trainer.n_gpus_per_node={gpus} trainer.total_training_steps={steps} "
        f"trainer.default_local_dir=${{ARGUS_JOB_DIR}}/checkpoints "
        f"+trainer.step_sleep_s={sleep_s} {extra}"
    ).strip()


async def submit_task(
    store: EventStore, task_id: str, *, user: str = "alice", command: str,
    nnodes: int = 1, gpus: int = 1, max_attempts: int = 3, priority: int = 0, preemptible: bool = False,
    time_limit_s: float | None = None, gpu_types: tuple[str, ...] = (),
) -> str:
    """Append TaskSubmitted as the API does (demand as verl needs it: 3 CPUs per GPU + 1)."""
    event = TaskSubmitted(
        task_id=task_id, user=user, workload="ppo", kind="advanced",
        spec_raw=f"kind: advanced\ncommand: {command}\n", spec={}, command_raw=command,
        command=command, demand=Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=gpus * 3 + 1,
                                       gpu_types=gpu_types),
        priority=priority, max_attempts=max_attempts, preemptible=preemptible, time_limit_s=time_limit_s,
        submitted_at=time.time(),
    )
    await store.append(task_stream(task_id), 0, [event], owner=user, meta=EventMeta(actor=f"user:{user}"))
    return task_id


async def request_cancel(store: EventStore, task_id: str, by: str = "alice") -> None:
    await store.append(task_stream(task_id), None,
                       [TaskCancelRequested(task_id=task_id, by=by, requested_at=time.time())],
                       owner=by, meta=EventMeta(actor=f"user:{by}"))


def unique_id(prefix: str) -> str:
    return f"{prefix}-{time.strftime('%H%M%S')}-{int(time.time() * 1000) % 100000:05d}"


async def task_view(store: EventStore, task_id: str) -> TaskView | None:
    return await store.read_snapshot(lambda db: load_task(db, task_id))


async def wait_state(store: EventStore, task_id: str, states: set[TaskState],
                     timeout_s: float = 60.0) -> TaskView:
    deadline = time.monotonic() + timeout_s
    view = None
    while time.monotonic() < deadline:
        view = await task_view(store, task_id)
        if view is not None and view.state in states:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"{task_id} did not reach {states} in {timeout_s}s; last: {view}")


async def wait_reason(store: EventStore, task_id: str, reason: str | set[str], timeout_s: float = 30.0) -> TaskView:
    """Wait until the task waits for ``reason``. (Its first reason may be another: on a
    loaded machine the first capacity read can time out, and the task waits for
    ``capacity_unknown`` until the next turn sees the cluster.)"""
    deadline = time.monotonic() + timeout_s
    view = None
    while time.monotonic() < deadline:
        view = await task_view(store, task_id)
        if view is not None and view.wait_reason in ({reason} if isinstance(reason, str) else reason):
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"{task_id} did not wait for {reason} in {timeout_s}s; last: {view}")


async def event_types(store: EventStore, task_id: str) -> list[str]:
    return [r.type for r in await store.read_stream(task_stream(task_id))]
