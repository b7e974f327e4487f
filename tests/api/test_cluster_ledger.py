"""``GET /cluster`` shows the ledger next to Ray's count: a task admitted onto a node holds
its gang there (with its driver's CPUs) even while Ray still says every GPU is free."""

from __future__ import annotations

import time

from argus.events import AttemptStarting, CapacityObserved, EventMeta, NodeCapacity, cluster_stream, task_stream
from argus.rayjobs import build_submission
from argus.store import AppendBatch
from tests.api.conftest import ADVANCED, Env, put_dataset


async def test_cluster_shows_what_is_committed_next_to_rays_free_count(env: Env) -> None:
    put_dataset(env.shared, "alice")
    nodes = [NodeCapacity(node_id=f"n{i}", ip=f"10.0.0.{i}", total_gpus=4, free_gpus=4, total_cpus=32,
                          free_cpus=32) for i in range(2)]
    await env.store.append_batches([AppendBatch(stream=cluster_stream, expected_version=None,
                                                events=[CapacityObserved(nodes=nodes, observed_at=time.time())])])
    r = await env.client.post("/api/v2/tasks", headers=env.h("alice"), content=ADVANCED.replace(
        "n_gpus_per_node: 1", "n_gpus_per_node: 3").replace("trainer.n_gpus_per_node=1", "trainer.n_gpus_per_node=3"))
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    payload = build_submission(task_id=task_id, attempt_no=1, user="alice", command="true", config=env.config)
    await env.store.append(task_stream(task_id), None, [AttemptStarting(
        task_id=task_id, attempt_no=1, submission_id=payload.submission_id, payload=payload,
        decided_at=time.time(), node_ids=["n1"], node_ips=["10.0.0.1"])], owner="alice",
        meta=EventMeta(actor="reactor:test"))

    body = (await env.client.get("/api/v2/cluster", headers=env.h("bob"))).json()
    ledger = {n["node_id"]: n for n in body["ledger"]}
    driver = env.config.entrypoint_num_cpus
    assert ledger["n0"] == {"node_id": "n0", "committed_gpus": 0.0, "committed_cpus": 0.0,
                            "admissible_gpus": 4.0, "admissible_cpus": 32.0}
    assert ledger["n1"]["committed_gpus"] == 3.0 and ledger["n1"]["committed_cpus"] == 3 * 3 + 1 + driver
    assert ledger["n1"]["admissible_gpus"] == 1.0  # Ray says 4 free; 3 are promised
    assert [n["free_gpus"] for n in body["nodes"]] == [4.0, 4.0]  # Ray's count, as observed


async def test_an_admin_drains_a_node_and_everyone_sees_it(env: Env) -> None:
    nodes = [NodeCapacity(node_id="n0", ip="10.0.0.9", total_gpus=4, free_gpus=4, total_cpus=32, free_cpus=32)]
    await env.store.append_batches([AppendBatch(stream=cluster_stream, expected_version=None,
                                                events=[CapacityObserved(nodes=nodes, observed_at=time.time())])])
    url = "/api/v2/cluster/nodes/n0/drain"
    assert (await env.client.post(url, headers=env.h("alice"), json={"reason": "x"})).status_code == 403
    r = await env.client.post("/api/v2/cluster/nodes/nope/drain", headers=env.h("admin"), json={"reason": "x"})
    assert r.status_code == 404 and "argus cluster" in r.json()["detail"], r.text
    assert (await env.client.post(url, headers=env.h("admin"), json={"reason": ""})).status_code == 400
    r = await env.client.post(url, headers=env.h("admin"), json={"reason": "fan failure"})
    assert r.status_code == 200, r.text
    holds = (await env.client.get("/api/v2/cluster", headers=env.h("bob"))).json()["holds"]
    assert [(h["node_id"], h["kind"], h["reason"], h["ip"]) for h in holds] == [("n0", "drain", "fan failure", "10.0.0.9")]
    r = await env.client.post("/api/v2/cluster/nodes/n0/undrain", headers=env.h("admin"))
    assert r.status_code == 200 and r.json()["holds"] == []


async def test_cluster_says_when_each_node_was_last_seen_not_only_when_capacity_changed(env: Env) -> None:
    """An unchanged cluster records nothing new, so ``observed_at`` ages while every node
    is fine: each node's watchdog's last report says when it was last seen, and its host."""
    import msgspec

    from argus.nodepool.keeper import NodeReport, report_path

    changed = time.time() - 3600
    nodes = [NodeCapacity(node_id=f"n{i}", ip=f"10.0.0.{i}", total_gpus=4, free_gpus=4, total_cpus=32,
                          free_cpus=32) for i in range(2)]
    await env.store.append_batches([AppendBatch(stream=cluster_stream, expected_version=None,
                                                events=[CapacityObserved(nodes=nodes, observed_at=changed)])])
    now = time.time()
    for node_id, host in (("n0", "gpu-a"), ("gone", "gpu-z")):  # a report of a node no longer alive: left out
        path = report_path(str(env.shared), node_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(msgspec.json.encode(NodeReport(node_id=node_id, hostname=host, checked_at=now)))
    body = (await env.client.get("/api/v2/cluster", headers=env.h("bob"))).json()
    assert body["observed_at"] == changed
    assert body["seen"] == [{"node_id": "n0", "hostname": "gpu-a", "checked_at": now}]
