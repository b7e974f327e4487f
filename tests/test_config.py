"""Configuration that means what it says: every scheduler knob reachable from the file and
the environment; unknown keys refused with their names; the seed platform's keys that Argus replaced
ignored with a warning naming the replacement."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from argus.config import ConfigError, SchedulerConfig, load_config
from argus.scheduler.policy import PolicyConfig

SEED_STYLE = Path(__file__).parent / "fixtures" / "seed_style_dev.yaml"


def test_scheduler_knobs_from_the_file_reach_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "argus.yaml"
    path.write_text("v2:\n  scheduler:\n    policy: fairshare\n    max_running_tasks: 5\n"
                    "    max_running_per_user: 2\n    backfill: true\n    preemption: false\n"
                    "    preempt_grace_s: 12\n    move_after_s: 7200\n    fairshare:\n      shares: {alice: 2}\n"
                    "      quotas: {bob: 8}\n")
    policy = PolicyConfig.from_scheduler(load_config(path, environ={}).v2.scheduler)
    assert policy == PolicyConfig(policy="fairshare", max_running_tasks=5, max_running_per_user=2,
                                  backfill=True, preemption=False, preempt_grace_s=12, move_after_s=7200,
                                  shares={"alice": 2}, quotas={"bob": 8})


def test_scheduler_knobs_from_the_environment(tmp_path: Path) -> None:
    env = {"ARGUS_V2__SCHEDULER__MAX_RUNNING_PER_USER": "3", "ARGUS_V2__SCHEDULER__BACKFILL": "true",
           "ARGUS_V2__SCHEDULER__FAIRSHARE__SHARES": "{alice: 2, bob: 0.5}",
           "ARGUS_V2__SCHEDULER__FAIRSHARE__HALF_LIFE_S": "3600",
           "ARGUS_ROLE": "worker"}  # not ours: the node pool's, ignored
    sched = load_config(None, environ=env).v2.scheduler
    assert sched.max_running_per_user == 3 and sched.backfill is True
    assert sched.fairshare.shares == {"alice": 2, "bob": 0.5} and sched.fairshare.half_life_s == 3600


@pytest.mark.parametrize("var", ["ARGUS_V2__SCHEDULER__MAX_RUNING_TASKS", "ARGUS_V2__SCHEDULR__POLICY",
                                 "ARGUS_V2__API__PORTT"])
def test_a_misspelt_variable_is_refused_with_its_name(var: str) -> None:
    with pytest.raises(ConfigError, match=var):
        load_config(None, environ={var: "1"})


def test_an_unknown_key_in_the_file_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "argus.yaml"
    path.write_text("v2:\n  scheduler:\n    max_runing_tasks: 3\n")
    with pytest.raises(ConfigError, match="max_runing_tasks"):
        load_config(path, environ={})


def test_a_seed_style_config_loads_with_a_warning_per_replaced_key(caplog: pytest.LogCaptureFixture) -> None:
    """The seed platform's dev.yaml (its v1.1 keys, its v2: section with tick_s) loads: each
    key Argus replaced is one logged line naming its replacement; the rest means what it says."""
    said: list[str] = []
    with caplog.at_level(logging.WARNING, logger="argus.config"):
        config = load_config(SEED_STYLE, environ={}, warnings=said)
    assert len(said) == 1 and "\n" not in said[0], said
    assert "v2.scheduler.tick_s" in said[0] and "v2.scheduler.poll_interval_s" in said[0]
    assert [r.getMessage() for r in caplog.records] == said
    assert config.v2.scheduler.poll_interval_s == SchedulerConfig().poll_interval_s  # not carried over
    assert config.v2.scheduler.max_running_tasks == 1 and config.v2.auth.token_env == "MVP_INTERNAL_TOKEN"
    assert config.v2.sqlite.db_path == "/private/common/db/mvp_v2.sqlite3"
    assert config.entrypoint_resources == {"worker_node": 1} and config.user_code_path == "/private/user/code"


def test_seed_keys_from_the_environment_and_elsewhere_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "argus.yaml"
    path.write_text("ray:\n  verl_code_path: /private/common/code/verl\nv2:\n  scheduler:\n    tick_s: 1\n")
    said: list[str] = []
    config = load_config(path, environ={"ARGUS_V2__SCHEDULER__TICK_S": "2"}, warnings=said)
    assert any("ray.verl_code_path" in w and "user_code_path" in w for w in said), said
    assert any("ARGUS_V2__SCHEDULER__TICK_S" in w and "poll_interval_s" in w for w in said), said
    assert config.user_code_path == ""
    # A key the seeds never had is still refused, by name, next to one they had.
    path.write_text("v2:\n  scheduler:\n    tick_s: 1\n    tick_ss: 1\n")
    with pytest.raises(ConfigError, match="tick_ss"):
        load_config(path, environ={})


def test_a_database_password_is_never_shown() -> None:
    from argus.config import redact_url

    assert redact_url("postgresql://argus:s3cret@db:5432/argus") == "postgresql://argus:***@db:5432/argus"
    assert redact_url("postgresql://argus@db/argus") == "postgresql://argus@db/argus"
    assert redact_url("postgresql://db/argus") == "postgresql://db/argus"
    assert redact_url("") == ""
    # libpq's URI form: the password as a query parameter (any case), sslpassword too.
    assert (redact_url("postgresql://db/argus?user=a&password=s3cret&sslmode=require")
            == "postgresql://db/argus?user=a&password=***&sslmode=require")
    assert redact_url("postgresql://a:b@h/d?PASSWORD=x&sslpassword=y") == "postgresql://a:***@h/d?PASSWORD=***&sslpassword=***"


def test_a_drivers_error_never_shows_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from argus.config import hide_secrets
    from argus.store.postgres import describe_open_failure

    monkeypatch.setenv("PGPASSWORD", "envpw")
    said = describe_open_failure("postgresql://u:p%40ss@h/d?password=q1",
                                 OSError("connect to u:p@ss@h failed; q1; envpw"))
    assert "p@ss" not in said and "q1" not in said and "envpw" not in said
    assert said.startswith("the PostgreSQL log at postgresql://u:***@h/d?password=*** did not answer")
    assert hide_secrets("nothing to hide", "postgresql://db/argus") == "nothing to hide"
