"""The shared model cache for jobs (v2.hub; docs/data.md): a confined job loads a tiny
model from ``<shared>/hf`` by its hub id, offline, with no way to the network; it cannot
write the cache. At submit, a hub id missing from the cache is refused on an offline
cluster and warned about on an online one."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import sys
from pathlib import Path

import pytest

from argus.config import ArgusConfig
from argus.confine import abi_version
from argus.driver import prepare_job_dir, run_command
from argus.rayjobs.submission import build_submission, decode_context, hub_env
from argus.taskspec import TaskSpecError
from argus.taskspec.prepare import prepare_task

HUB_ID = "argus-test/tiny-lm"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_model_in_cache(cache: Path, hub_id: str = HUB_ID) -> None:
    """A tiny model in the hub's cache layout, as ``huggingface_hub`` leaves it: blobs by
    hash, a snapshot of links into them, ``refs/main`` naming the snapshot."""
    weights = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    files = {"config.json": json.dumps({"model_type": "tiny", "hidden_size": 2}).encode(),
             "model.safetensors": struct.pack("<Q", len(header)) + header + weights}
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "blobs").mkdir()
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, body in files.items():
        blob = hashlib.sha256(body).hexdigest()
        (repo / "blobs" / blob).write_bytes(body)
        (snap / name).symlink_to(f"../../blobs/{blob}")


# What the job runs: the hub library resolves the id (no download: offline, and the
# endpoint is a closed port), then the weights are read from the safetensors file.
LOAD = """
import json, os, struct, sys
from huggingface_hub import snapshot_download
path = snapshot_download(%r)
assert path.startswith(os.environ["HF_HUB_CACHE"]), path
raw = open(os.path.join(path, "model.safetensors"), "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
meta = json.loads(raw[8:8 + n])
lo, hi = meta["w"]["data_offsets"]
print("LOADED", json.load(open(os.path.join(path, "config.json")))["model_type"],
      struct.unpack("<4f", raw[8 + n + lo:8 + n + hi]))
try:
    open(os.path.join(os.environ["HF_HUB_CACHE"], "planted"), "w")
    print("CACHE-WRITTEN")
except OSError:
    print("CACHE-READ-ONLY")
""" % HUB_ID


@pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")
def test_a_confined_job_loads_a_model_by_hub_id_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("huggingface_hub")
    shared = tmp_path / "shared"
    (shared / "users" / "alice").mkdir(parents=True)
    tiny_model_in_cache(shared / "hf")
    config = ArgusConfig(shared_root=str(shared))
    config.v2.hub.offline = True
    config.v2.sqlite.db_path = str(tmp_path / "data" / "argus.sqlite3")
    script = shared / "users" / "alice" / "load.py"
    script.write_text(LOAD)
    payload = build_submission(task_id="alice-t1", attempt_no=1, user="alice", config=config,
                               command=f"{sys.executable} {script} actor_rollout_ref.model.path={HUB_ID}",
                               python=sys.executable)
    env = payload.runtime_env["env_vars"]
    assert env["HF_HUB_CACHE"] == str(shared / "hf") and env["HF_HUB_OFFLINE"] == "1"
    assert env["HF_HOME"] == str(shared / "users" / "alice" / ".cache" / "huggingface")
    for name, value in env.items():  # as Ray hands the runtime env to the driver
        if name.startswith(("HF_", "TRANSFORMERS_")):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # no hub: any request fails
    ctx = decode_context(payload.entrypoint.split("--context ", 1)[1])
    path = prepare_job_dir(ctx)
    result = run_command(ctx, path, out=io.BytesIO())
    log = (path / "driver.log").read_text()
    assert "confined to their user's files" in log, log
    assert "LOADED tiny (1.0, 2.0, 3.0, 4.0)" in log, log
    assert "CACHE-READ-ONLY" in log and not (shared / "hf" / "planted").exists(), log
    assert result.exit_code == 0, log


def test_the_jobs_hub_cache(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    tiny_model_in_cache(shared / "hf")
    config = ArgusConfig(shared_root=str(shared))
    cached = f"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path={HUB_ID}"
    missing = "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Org/not-here"
    # online: the shared cache when it holds every model named, else the user's own
    assert hub_env(config, "alice", cached)["HF_HUB_CACHE"] == str(shared / "hf")
    assert "HF_HUB_CACHE" not in hub_env(config, "alice", missing)
    assert "HF_HUB_OFFLINE" not in hub_env(config, "alice", cached)
    config.v2.hub.offline = True
    assert hub_env(config, "alice", missing)["HF_HUB_CACHE"] == str(shared / "hf")
    config.v2.hub.shared_cache = False
    assert hub_env(config, "alice", cached) == {}
    # the operator's runtime_env wins
    config.v2.hub.shared_cache = True
    config.runtime_env = {"env_vars": {"HF_HUB_CACHE": "/mine"}}
    payload = build_submission(task_id="a-t", attempt_no=1, user="alice", command=cached, config=config)
    assert payload.runtime_env["env_vars"]["HF_HUB_CACHE"] == "/mine"


SPEC = """\
kind: basic
workload: grpo
nnodes: 1
n_gpus_per_node: 1
model_id: {model}
train_file: $HOME/datasets/t.parquet
"""


@pytest.mark.parametrize("offline", [False, True])
def test_a_hub_id_missing_from_the_cache_at_submit(tmp_path: Path, offline: bool) -> None:
    shared = tmp_path / "shared"
    (shared / "users" / "alice" / "datasets").mkdir(parents=True)
    (shared / "users" / "alice" / "datasets" / "t.parquet").write_bytes(b"x")
    tiny_model_in_cache(shared / "hf")
    ok = prepare_task(SPEC.format(model=HUB_ID), user="alice", task_id="alice-t1", shared_root=shared,
                      hub_offline=offline)
    assert not any("model cache" in w for w in ok.warnings)
    if offline:
        with pytest.raises(TaskSpecError) as exc:
            prepare_task(SPEC.format(model="Org/not-here"), user="alice", task_id="alice-t2",
                         shared_root=shared, hub_offline=True)
        [problem] = exc.value.problems
        assert problem.field == "model_id" and "common/hf/models--Org--not-here" in problem.message
        assert "v2.hub.offline" in problem.message
    else:
        task = prepare_task(SPEC.format(model="Org/not-here"), user="alice", task_id="alice-t2",
                            shared_root=shared)
        [warning] = [w for w in task.warnings if "model cache" in w]
        assert warning.startswith("model_id: 'Org/not-here' is not in the shared model cache")
