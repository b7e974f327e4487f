"""Ray's start-up limits scaled to the host's load, and a failed start's cause in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.nodepool.startup import (
    HostLoad,
    describe_limits,
    diagnose_ray_exit,
    ray_session_logs,
    ray_startup_env,
    tail_text,
)

QUIET, BUSY = HostLoad(load1=0.3, cores=2), HostLoad(load1=34.0, cores=2)


def test_limits_grow_with_the_load_within_bounds() -> None:
    assert QUIET.scale() == 2  # twice Ray's defaults even on a quiet host
    assert BUSY.scale() == 10  # 17 per core, capped
    assert HostLoad(load1=9.0, cores=2).scale() == 5
    quiet, busy = ray_startup_env(QUIET, {}), ray_startup_env(BUSY, {})
    assert quiet == {"RAY_DASHBOARD_STARTUP_TIMEOUT_S": "120",
                     "RAY_agent_register_timeout_ms": "60000",
                     "RAY_raylet_start_wait_time_s": "20"}
    assert busy["RAY_agent_register_timeout_ms"] == "300000"


def test_an_operators_own_setting_is_kept() -> None:
    env = ray_startup_env(BUSY, {"RAY_agent_register_timeout_ms": "5000"})
    assert "RAY_agent_register_timeout_ms" not in env
    assert describe_limits({**env, "RAY_agent_register_timeout_ms": "5000"}).split() == [
        "RAY_DASHBOARD_STARTUP_TIMEOUT_S=600", "RAY_agent_register_timeout_ms=5000",
        "RAY_raylet_start_wait_time_s=100"]


@pytest.mark.parametrize("printed, cause", [
    ("[raylet] Timed out waiting for file /tmp/ray/s/ports: dashboard_agent_listen_port",
     "Ray's raylet timed out waiting for its dashboard agent"),
    ("Exception: The current node timed out during startup. This could happen because",
     "Ray's node did not register with the GCS within Ray's 30 s start-up limit"),
    ("OSError: [Errno 98] Address already in use", "a port Ray needs is already in use"),
    ("Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds.",
     "Ray could not reach the GCS"),
])
def test_known_causes_are_named(printed: str, cause: str) -> None:
    said = diagnose_ray_exit(["some banner\n" + printed], BUSY, rc=1, ran_s=75)
    assert said == f"{cause}: the host is overloaded (load 34 on 2 cores)"
    assert diagnose_ray_exit([printed], QUIET, rc=1, ran_s=75) == f"{cause} (load 0 on 2 cores)"


def test_an_unknown_cause_gives_the_exit_and_its_last_error_line() -> None:
    said = diagnose_ray_exit(["ok\nRuntimeError: the thing broke\nbye\n"], QUIET, rc=3, ran_s=4.2)
    assert said == ("Ray exited (rc=3) after 4 s; it last said: RuntimeError: the thing broke "
                    "(load 0 on 2 cores)")


def test_logs_are_read_bounded_and_under_the_nodes_temp_dir(tmp_path: Path) -> None:
    log = tmp_path / "session_latest" / "logs" / "raylet.out"
    log.parent.mkdir(parents=True)
    log.write_text("x" * 100_000 + "the end")
    assert ray_session_logs(["ray", "start", f"--temp-dir={tmp_path}"])[0] == log
    assert tail_text(log, limit=7) == "the end"
    assert len(tail_text(log)) == 64 * 1024
    assert tail_text(tmp_path / "absent") == ""
