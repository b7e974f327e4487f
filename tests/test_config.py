"""Configuration that means what it says: every scheduler knob reachable from the file and
the environment; unknown and removed keys refused with their names."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.config import ConfigError, load_config
from argus.scheduler.policy import PolicyConfig


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


def test_tick_s_was_removed_and_says_what_replaced_it(tmp_path: Path) -> None:
    path = tmp_path / "argus.yaml"
    path.write_text("v2:\n  scheduler:\n    tick_s: 1\n")
    with pytest.raises(ConfigError, match="tick_s.*removed.*poll_interval_s"):
        load_config(path, environ={})
    with pytest.raises(ConfigError, match="ARGUS_V2__SCHEDULER__TICK_S.*removed.*poll_interval_s"):
        load_config(None, environ={"ARGUS_V2__SCHEDULER__TICK_S": "1"})


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
