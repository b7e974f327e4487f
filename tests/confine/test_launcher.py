"""The pieces of worker confinement that need no Ray: the raylet's command rewritten, the
launcher's reading of it, claims on disk, and process ancestry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from argus.confine.claims import descends_from
from argus.confine.raystart import launcher_prefix, prefix_worker_command, split_denied
from argus.confine.registry import Claim, _plain_claim, read_claim, write_claim
from argus.confine import interpreter_paths, worker
from argus.confine.worker import Options, parse, raylet_command
from argus.nodepool.config import NodePoolConfig

WORKER = ["/venv/bin/python3", "/ray/_private/workers/setup_worker.py", "/ray/_private/workers/default_worker.py",
          "--node-ip-address=10.0.0.1", "--cluster-id=abc", "RAY_WORKER_DYNAMIC_OPTION_PLACEHOLDER"]


def test_only_the_python_worker_command_is_prefixed() -> None:
    raylet = ["/ray/raylet", "--node_id=x", f"--python_worker_command={subprocess.list2cmdline(WORKER)}",
              "--java_worker_command=java x"]
    got = prefix_worker_command(raylet, launcher_prefix(["--shared-root", "/srv/shared"]))
    assert got[0:2] == raylet[0:2] and got[3] == raylet[3]
    assert got[2] == ("--python_worker_command=" + subprocess.list2cmdline(
        [sys.executable, "-I", "-S", worker.__file__, "--shared-root", "/srv/shared",
         *(arg for path in interpreter_paths() for arg in ("--read", path)), "--", *WORKER]))
    assert "--read" in got[2] and sys.prefix in got[2]  # the virtualenv, which the launcher cannot see


def test_the_launcher_drops_setup_worker_as_the_raylet_would() -> None:
    assert raylet_command(WORKER) == [WORKER[0], *WORKER[2:]]  # no runtime_env: straight to the worker
    with_env = [*WORKER, "--language=PYTHON", "--serialized-runtime-env-context={}"]
    assert raylet_command(with_env) == with_env


def test_claims_are_written_once_whole_and_read_back(tmp_path: Path) -> None:
    claim = Claim(job_id="02000000", user="alice", submission_id="alice-t1--a01", driver_pid=42)
    write_claim(str(tmp_path), "cluster", claim)
    path = tmp_path / "cluster" / "02000000.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_claim(str(tmp_path), "cluster", "02000000") == claim
    assert read_claim(str(tmp_path), "cluster", "03000000", wait_s=0.05) is None
    (tmp_path / "cluster" / "04000000.json").symlink_to(path)  # a link is never followed
    assert read_claim(str(tmp_path), "cluster", "04000000") is None


def test_a_claim_reads_back_the_same_with_or_without_json() -> None:
    """The launcher reads a claim as written for a valid user id without importing json
    (``registry._plain_claim``); anything else is json's to read, with the same result."""
    plain = Claim(job_id="02000000", user="alice", submission_id="alice-t1--a01", driver_pid=42)
    assert _plain_claim(plain.to_json()) == plain == Claim.from_json(plain.to_json())
    odd = Claim(job_id="02000000", user='al"ice\\é\n', submission_id="", driver_pid=0)
    assert _plain_claim(odd.to_json()) is None and Claim.from_json(odd.to_json()) == odd
    spaced = b'{"job_id": "02000000", "user": "alice", "submission_id": "", "driver_pid": 7} '
    assert _plain_claim(spaced) is None and Claim.from_json(spaced) == Claim("02000000", "alice", "", 7)
    for bad in (b'{"job_id": "02000000", "user": "alice", "submission_id": "", "driver_pid": 07}',
                b'{"job_id": "02000000", "user": "alice", "submission_id": "", "driver_pid": true}',
                b'{"job_id": "02000000", "user": "alice", "submission_id": ""}', b"", b"[]"):
        assert _plain_claim(bad) is None
        with pytest.raises(ValueError):
            Claim.from_json(bad)


@pytest.mark.parametrize("job", ["", "02000000"])
def test_the_launcher_imports_neither_typing_nor_enum_nor_json(tmp_path: Path, job: str) -> None:
    """Its start-up is paid before every Ray worker: typing (with re), enum and json were
    half of it."""
    write_claim(str(tmp_path / "ray" / "confine"), "abc", Claim(job_id="02000000", user="alice"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RAY_JOB_ID": job}
    result = subprocess.run([sys.executable, "-X", "importtime", "-I", "-S", worker.__file__, "--shared-root",
                             str(tmp_path), "--", "/bin/true", "--cluster-id=abc"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    imported = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "argus.confine.registry" in imported
    assert not imported & {"typing", "re", "enum", "json", "collections", "functools", "importlib.util", "sysconfig"}


def test_descends_from_follows_parents() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert descends_from(child.pid, os.getpid())
        assert descends_from(os.getpid(), os.getpid())
        assert not descends_from(os.getpid(), child.pid)
        assert not descends_from(999_999_999, os.getpid())
    finally:
        child.kill()
        child.wait()


def test_the_node_pool_starts_ray_through_the_launcher_when_it_confines() -> None:
    off = NodePoolConfig(confine="none", ray_bin="/bin/ray")
    assert off.ray_start() == ["/bin/ray", "start"]
    on = NodePoolConfig(confine="landlock", shared_root="/srv/shared")
    assert on.ray_start() == [sys.executable, "-m", "argus.confine.raystart", "--shared-root", "/srv/shared",
                              "--mode", "landlock", "--", "start"]


def test_every_confining_node_denies_its_jobs_rays_doors_to_unconfined_code() -> None:
    """The head: its dashboard, its agent's and its client server's ports (as its extra
    arguments set them, else Ray's defaults), also published for the workers; a worker: the
    head's (from the discovery record) and its own agent's."""
    from datetime import datetime, timezone

    from argus.nodepool.discovery import make_head_record
    from argus.nodepool.head import head_argv
    from argus.nodepool.worker import worker_argv

    def denied(argv: list[str]) -> set[int]:
        return {int(argv[i + 1]) for i, a in enumerate(argv) if a == "--deny-connect"}

    head = NodePoolConfig(confine="landlock", shared_root="/s", dashboard_port=8300,
                          ray_extra_args=["--dashboard-agent-listen-port=41000"])
    argv = head_argv(head, "10.0.0.1")
    assert denied(argv) == {8300, 41000, 10001} and argv.index("--deny-connect") < argv.index("--")
    record = make_head_record(cluster_name="c", head_ip="10.0.0.1", gcs_port=6379, dashboard_port=8300,
                              ttl_s=60, agent_listen_port=41000, client_port=10001,
                              now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    worker = NodePoolConfig(confine="landlock", shared_root="/s",
                            ray_extra_args=["--dashboard-agent-listen-port", "42000"])
    assert denied(worker_argv(worker, record, "10.0.0.2")) == {8300, 41000, 10001, 42000}
    assert split_denied(["--mode", "auto", "--deny-connect", "8300", "--read", "/a"]) == (
        ["--mode", "auto", "--read", "/a"], [8300])


def test_the_launchers_arguments() -> None:
    got = parse(["--shared-root", "/s", "--read", "/a", "--read", "/b", "--", "python", "--x"])
    assert got == Options(shared_root="/s", mode="auto", read=["/a", "/b"], hide=[], command=["python", "--x"])
    for bad in (["--shared-root", "/s"], ["--", "x"], ["--shared-root", "/s", "--what", "y", "--", "x"],
                ["--shared-root", "--", "x"]):
        with pytest.raises(SystemExit):
            parse(bad)


def test_only_the_first_ray_job_showing_the_commands_secret_is_claimed() -> None:
    """A driver naming this attempt and one of its process ids is not enough (a job that
    speaks Ray's protocol itself could say both): it must show the secret the driver gave
    the command's job config, and only the first such job gets the claim."""
    import json
    from types import SimpleNamespace

    from argus.confine.claims import first_job_judge
    from argus.confine.command import CLAIM_SECRET_KEY, RAY_JOB_CONFIG, with_claim_secret

    env = {RAY_JOB_CONFIG: json.dumps({"metadata": {"job_submission_id": "alice-t--a01"}, "runtime_env": {}})}
    with_claim_secret(env, "s3cret")
    assert json.loads(env[RAY_JOB_CONFIG])["metadata"] == {"job_submission_id": "alice-t--a01",
                                                           CLAIM_SECRET_KEY: "s3cret"}
    untouched: dict[str, str] = {}
    with_claim_secret(untouched, "s3cret")  # not under Ray's job supervisor: nothing to do
    assert untouched == {}

    said: list[str] = []
    judge = first_job_judge(submission_id="alice-t--a01", user="alice", command_pid=os.getpid(), secret="s3cret",
                            say=said.append)

    def job(pid: int, **metadata: str) -> SimpleNamespace:
        return SimpleNamespace(driver_pid=pid, config=SimpleNamespace(metadata=metadata))

    me = os.getpid()
    assert judge("01000000", job(me, job_submission_id="bob-t--a01", **{CLAIM_SECRET_KEY: "s3cret"})) is None
    assert judge("02000000", job(me, job_submission_id="alice-t--a01")) is None  # no secret: forged
    assert judge("03000000", job(1, job_submission_id="alice-t--a01", **{CLAIM_SECRET_KEY: "s3cret"})) is None
    claim = judge("04000000", job(me, job_submission_id="alice-t--a01", **{CLAIM_SECRET_KEY: "s3cret"}))
    assert claim == Claim(job_id="04000000", user="alice", submission_id="alice-t--a01", driver_pid=me)
    # Once shown in the job table, the secret is anyone's to copy: no second claim.
    assert judge("05000000", job(me, job_submission_id="alice-t--a01", **{CLAIM_SECRET_KEY: "s3cret"})) is None
    assert len(said) == 3


def test_the_launchers_records_keep_their_fields_through_pickle_and_copy() -> None:
    import copy
    import pickle

    from argus.confine.job import Decision
    from argus.confine.landlock import Rule
    from argus.confine.rules import Confinement

    for record in (Claim(job_id="02000000", user="alice", submission_id="alice-t1--a01", driver_pid=7),
                   Rule("/home", 3), Decision(True, "confined", 7), Confinement(home="/h", read=("/usr",)),
                   Options("/shared", "auto", ["/r"], [], ["python"])):
        for again in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
            assert again == record and type(again) is type(record)
            assert [getattr(again, name) for name in record._fields] == list(record)  # type: ignore[attr-defined]
