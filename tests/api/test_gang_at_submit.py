"""A gang no node of the cluster could ever hold is refused at submit (it would wait for
ever and, under strict FIFO, hold everyone behind it): 400, what to change, nothing written."""

from __future__ import annotations

import time

from argus.events import CapacityObserved, NodeCapacity, cluster_stream
from argus.store import AppendBatch
from tests.api.conftest import ADVANCED, Env, put_dataset


def _spec(nnodes: int, gpus: int) -> str:
    return (ADVANCED.replace("nnodes: 1", f"nnodes: {nnodes}")
            .replace("n_gpus_per_node: 1", f"n_gpus_per_node: {gpus}")
            .replace("trainer.nnodes=1", f"trainer.nnodes={nnodes}")
            .replace("trainer.n_gpus_per_node=1", f"trainer.n_gpus_per_node={gpus}"))


async def _observe(env: Env, *gpus: int, cpus: float = 32.0, models: tuple[str, ...] = ()) -> None:
    nodes = [NodeCapacity(node_id=f"n{i}", ip="10.0.0.1", total_gpus=g, free_gpus=0, total_cpus=cpus,
                          free_cpus=0, gpu_type=models[i] if models else "") for i, g in enumerate(gpus)]
    await env.store.append_batches([AppendBatch(stream=cluster_stream, expected_version=None,
                                                events=[CapacityObserved(nodes=nodes, observed_at=time.time())])])


async def _submit(env: Env, spec: str) -> tuple[int, dict, int]:
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=spec)
    return r.status_code, r.json(), (await env.store.head_position()) - before


async def test_too_many_gpus_per_node_is_refused(env: Env) -> None:
    put_dataset(env.shared, "alice")
    await _observe(env, 4, 4)  # busy right now: free counts do not matter, totals do
    status, body, written = await _submit(env, _spec(1, 8))
    assert status == 400 and written == 0, body
    assert "largest with 4 GPUs" in body["detail"] and "n_gpus_per_node ≤ 4" in body["detail"]
    assert "nnodes=2, n_gpus_per_node=4" in body["detail"]  # the same 8 GPUs, shaped to fit
    status, body, written = await _submit(env, _spec(2, 4))
    assert status == 201 and written == 1, body


async def test_too_many_nodes_is_refused(env: Env) -> None:
    put_dataset(env.shared, "alice")
    await _observe(env, 4, 2)
    status, body, written = await _submit(env, _spec(2, 4))
    assert status == 400 and written == 0
    assert "nnodes ≤ 1" in body["detail"]


async def test_cpus_count_too(env: Env) -> None:
    """verl puts CPUs in every GPU bundle: a node with the GPUs but too few CPUs never fits."""
    put_dataset(env.shared, "alice")
    await _observe(env, 8, cpus=2)
    status, body, written = await _submit(env, _spec(1, 4))
    assert status == 400 and written == 0
    assert "CPUs" in body["detail"]


async def test_validate_says_the_same(env: Env) -> None:
    put_dataset(env.shared, "alice")
    await _observe(env, 4)
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks/validate", headers=env.h("alice"), content=_spec(1, 8))
    assert r.status_code == 200 and r.json()["ok"] is False
    assert r.json()["errors"][0]["field"] == "n_gpus_per_node"
    assert await env.store.head_position() == before


async def test_configured_shape_before_any_observation(env: Env) -> None:
    put_dataset(env.shared, "alice")
    status, body, written = await _submit(env, _spec(1, 8))
    assert status == 201, "no shape known and none configured: accepted"
    sched = env.config.v2.scheduler
    sched.assumed_nodes, sched.assumed_node_gpus, sched.assumed_node_cpus = 1, 4, 14
    status, body, written = await _submit(env, _spec(1, 8))
    assert status == 400 and written == 0 and "as configured" in body["detail"]
    await _observe(env, 8)  # an observation beats the configured shape
    status, body, written = await _submit(env, _spec(1, 8))
    assert status == 201, body


async def test_a_gpu_model_no_node_has_is_refused_and_one_some_have_is_judged_on_those(env: Env) -> None:
    put_dataset(env.shared, "alice")
    await _observe(env, 4, 8, models=("A100", "H100"))
    status, body, written = await _submit(env, _spec(1, 4) + "gpu_type: V100\n")
    assert status == 400 and written == 0, body
    assert body["extra"]["errors"][0]["field"] == "gpu_type"
    assert "models: A100 ×1, H100 ×1" in body["detail"] and "ask for one of A100, H100" in body["detail"]
    status, body, written = await _submit(env, _spec(1, 8) + "gpu_type: a100\n")  # the A100 node has 4
    assert status == 400 and written == 0 and "accept more GPU models" in body["detail"], body
    status, body, written = await _submit(env, _spec(1, 8) + "gpu_type: [A100, h100]\n")
    assert status == 201 and written == 1, body
    view = (await env.client.get(f"/api/v2/tasks/{body['task_id']}", headers=env.h("alice"))).json()
    assert view["demand"]["gpu_types"] == ["A100", "h100"]
