"""Gateway behaviour without a cluster: unreachable Ray is one named exception."""

from __future__ import annotations

import pytest

from argus.config import ArgusConfig
from argus.rayjobs import (
    AsyncRayGateway,
    RayGateway,
    RayUnavailable,
    build_submission,
    decode_context,
)
from tests.support.ray_cluster import free_ports


async def test_unreachable_ray_is_ray_unavailable():
    port, gcs = free_ports(2)
    gw = AsyncRayGateway(RayGateway(f"http://127.0.0.1:{port}", None))
    with pytest.raises(RayUnavailable):
        await gw.status("x--a01")
    with pytest.raises(RayUnavailable):
        await gw.capacity()  # no GCS address configured


def test_build_submission_is_deterministic_and_pins_the_driver():
    config = ArgusConfig(shared_root="/shared", user_code_path="/opt/verl",
                         runtime_env={"env_vars": {"PYTHONPATH": "/extra", "HF_HOME": "/hf"}})
    a = build_submission(task_id="bob-ppo-20250101-000000-abcd", attempt_no=2, user="bob",
                         command="python -m verl.trainer.main_ppo a=1", config=config,
                         spec_raw="workload: ppo\n", spec={"workload": "ppo"})
    b = build_submission(task_id="bob-ppo-20250101-000000-abcd", attempt_no=2, user="bob",
                         command="python -m verl.trainer.main_ppo a=1", config=config,
                         spec_raw="workload: ppo\n", spec={"workload": "ppo"})
    assert a == b
    assert a.submission_id == "bob-ppo-20250101-000000-abcd--a02"
    assert a.entrypoint_resources == {"worker_node": 1.0}
    env = a.runtime_env["env_vars"]
    assert env["PYTHONPATH"] == "/opt/verl:/shared/users/bob/code:/extra" and env["HF_HOME"] == "/hf"
    assert config.runtime_env["env_vars"]["PYTHONPATH"] == "/extra", "config not mutated"
    blob = a.entrypoint.split("--context ", 1)[1]
    ctx = decode_context(blob)
    assert ctx.command == "python -m verl.trainer.main_ppo a=1" and ctx.spec == {"workload": "ppo"}
    assert ctx.submission_id == a.submission_id and ctx.shared_root == "/shared"


def test_build_submission_refuses_oversized_spec():
    import os

    with pytest.raises(ValueError, match="too large"):
        build_submission(task_id="t", attempt_no=1, user="u", command="true", config=ArgusConfig(),
                         spec_raw=os.urandom(100_000).hex())
