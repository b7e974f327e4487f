"""The toy trainer as a real Ray job: gateway → driver → trainer on a private cluster."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from argus.config import ArgusConfig
from argus.events.catalog import FailureKind
from argus.examples.toy_policy import make_example_dataset
from argus.rayjobs import DuplicateSubmission, JobObservation, RayGateway, build_submission, job_dir
from argus.reactor.classify import classify_failure

pytestmark = pytest.mark.ray

VERL_MSG = re.compile(r"Total available GPUs \d+(\.\d+)? is less than total desired GPUs \d+")


@pytest.fixture(scope="module")
def gw(ray_cluster) -> RayGateway:
    return RayGateway(ray_cluster.job_server_url, ray_cluster.address)


@pytest.fixture(scope="module")
def dataset(ray_cluster) -> Path:
    return make_example_dataset(ray_cluster.shared_root / "users/alice/datasets/toy.jsonl", n=64)


def submit_toy(gw: RayGateway, cluster, task_id: str, overrides: str) -> str:
    config = ArgusConfig(shared_root=str(cluster.shared_root))
    command = f"{sys.executable} -m argus.examples.toy_trainer {overrides}"
    payload = build_submission(task_id=task_id, attempt_no=1, user="alice", command=command, config=config,
                               spec_raw="kind: advanced\n", spec={"kind": "advanced"}, python=sys.executable)
    gw.submit(payload)
    return payload.submission_id


def wait_for(gw: RayGateway, sid: str, statuses: set[str], timeout_s: float = 120) -> JobObservation:
    deadline = time.monotonic() + timeout_s
    obs = None
    while time.monotonic() < deadline:
        obs = gw.status(sid)
        if obs is not None and obs.status in statuses:
            return obs
        time.sleep(0.5)
    raise AssertionError(f"{sid} never reached {statuses}; last: {obs}\n{gw.logs_tail(sid, 4000)}")


def wait_capacity(gw: RayGateway, pred, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = gw.capacity()
        if pred(nodes):
            return nodes
        time.sleep(0.3)
    raise AssertionError(f"capacity never matched; last {nodes}")


def test_capacity_reports_two_idle_worker_nodes(gw, ray_cluster):
    t0 = time.perf_counter()
    nodes = gw.capacity()
    elapsed_ms = (time.perf_counter() - t0) * 1000
    assert len(nodes) == 2, nodes  # the head carries no worker_node resource
    assert all(n.total_gpus == 4 and n.total_cpus == 16 for n in nodes)
    assert elapsed_ms < 2000
    wait_capacity(gw, lambda ns: all(n.free_gpus == 4 for n in ns))


def test_toy_trainer_job_succeeds(gw, ray_cluster, dataset):
    sid = submit_toy(gw, ray_cluster, "alice-ppo-ok", f"data.train_files={dataset} trainer.n_gpus_per_node=2 "
                     "trainer.total_training_steps=3 +unknown.key=1")
    with pytest.raises(DuplicateSubmission):  # the same submission id is refused
        submit_toy(gw, ray_cluster, "alice-ppo-ok", "data.train_files=x")
    obs = wait_for(gw, sid, {"SUCCEEDED", "FAILED", "STOPPED"})
    logs = gw.logs_tail(sid, 200_000)
    assert obs.status == "SUCCEEDED", logs
    assert obs.driver_exit_code == 0
    assert obs.driver_node_id in {n.node_id for n in gw.capacity()}, "driver ran on a worker node"

    jd = Path(job_dir(str(ray_cluster.shared_root), "alice", sid))
    assert (jd / "exit_code").read_text().strip() == "0"
    assert json.loads((jd / "result.json").read_text())["exit_code"] == 0
    assert json.loads((jd / "spec.json").read_text()) == {"kind": "advanced"}
    driver_log = (jd / "driver.log").read_text()
    assert re.search(r"step:3 - critic/score/mean:[0-9.]+", driver_log), driver_log[-3000:]
    assert "ignores unknown override 'unknown.key'" in driver_log
    assert "step:3" in logs  # Ray's job log has the same output
    metrics = [json.loads(x) for x in (jd / "argus_examples/toy.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3] and "critic/score/mean" in metrics[0]["data"]
    assert (jd / "checkpoints/argus_examples/toy/global_step_3/policy.npy").is_file()


def test_more_gpus_than_free_fails_like_verl(gw, ray_cluster, dataset):
    sid = submit_toy(gw, ray_cluster, "alice-ppo-big", f"data.train_files={dataset} trainer.nnodes=3 "
                     "trainer.n_gpus_per_node=4")
    obs = wait_for(gw, sid, {"SUCCEEDED", "FAILED", "STOPPED"})
    assert obs.status == "FAILED"
    tail = gw.logs_tail(sid, 65_536)
    assert VERL_MSG.search(tail) and "desired GPUs 12" in tail
    kind, evidence = classify_failure(obs.status, obs.message, tail, obs.driver_exit_code)
    assert kind == FailureKind.INSUFFICIENT_RESOURCES
    assert VERL_MSG.search(evidence)


def test_missing_train_file_is_a_user_error(gw, ray_cluster):
    sid = submit_toy(gw, ray_cluster, "alice-ppo-nofile", "data.train_files=/nonexistent/train.jsonl")
    obs = wait_for(gw, sid, {"SUCCEEDED", "FAILED", "STOPPED"})
    assert obs.status == "FAILED" and obs.driver_exit_code == 1
    kind, evidence = classify_failure(obs.status, obs.message, gw.logs_tail(sid), obs.driver_exit_code)
    assert kind == FailureKind.USER_ERROR and "/nonexistent/train.jsonl" in evidence


def test_stop_running_job_and_capacity_follows_its_placement_group(gw, ray_cluster, dataset):
    sid = submit_toy(gw, ray_cluster, "alice-ppo-long", f"data.train_files={dataset} trainer.n_gpus_per_node=3 "
                     "trainer.total_training_steps=500 trainer.step_sleep_s=1")
    wait_for(gw, sid, {"RUNNING"})
    # While its placement group holds 3 GPUs on one node, capacity shows 1 free there.
    held = wait_capacity(gw, lambda ns: sorted(n.free_gpus for n in ns) == [1, 4])
    assert min(n.free_cpus for n in held) <= 16 - 3 * 3
    assert gw.stop(sid) is True
    obs = wait_for(gw, sid, {"STOPPED", "SUCCEEDED", "FAILED"}, timeout_s=60)
    assert obs.status == "STOPPED"
    assert classify_failure(obs.status, obs.message, "", obs.driver_exit_code)[0] == FailureKind.CANCELED
    wait_capacity(gw, lambda ns: all(n.free_gpus == 4 for n in ns))
    jd = Path(job_dir(str(ray_cluster.shared_root), "alice", sid))
    deadline = time.monotonic() + 10
    while not (jd / "result.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    result = json.loads((jd / "result.json").read_text())
    assert result["forwarded_signal"] == 15 and result["exit_code"] != 0


def test_unknown_submission(gw):
    assert gw.status("no-such-task--a01") is None
    assert gw.stop("no-such-task--a01") is False
    assert gw.logs_tail("no-such-task--a01") == ""
