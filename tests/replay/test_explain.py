"""explain and task: answers built from the recorded decisions and evidence, with numbers."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from argus.cli.replay import replay
from argus.replay import TaskNotFound, explain, task_timeline
from tests.replay.scenario import A, B, C, D, E, EVIDENCE, Scenario


def test_explain_task_that_waited_for_resources(scenario: Scenario) -> None:
    text = explain(scenario.db, A).text
    assert "is SUCCEEDED after 1 attempt." in text
    assert (
        "Waited 44 s before attempt 1: 2 s QUEUED until the scheduler's next decision "
        "(from 10:00:04 to 10:00:06); 42 s in PENDING_RESOURCES: needs 2 nodes × 4 GPUs; "
        "free GPUs per node [4, 2] (no_capacity_per_node, from 10:00:06 to 10:00:48)."
    ) in text
    assert "Attempt 1 SUCCEEDED after running 10 min 0 s." in text


def test_explain_task_that_retried(scenario: Scenario) -> None:
    lines = explain(scenario.db, B).lines
    assert lines[0].endswith("is SUCCEEDED after 2 attempts.")
    assert (
        f"Attempt 1 failed INSUFFICIENT_RESOURCES (exit code 1): '{EVIDENCE}'; "
        "retried after 60 s as attempt 2, which SUCCEEDED."
    ) in lines
    [wait2] = [line for line in lines if line.startswith("Waited") and "before attempt 2" in line]
    assert wait2.startswith("Waited 10 min 45 s before attempt 2: 60 s in retry backoff")
    assert "9 min 44 s in PENDING_RESOURCES: needs 2 nodes × 4 GPUs; free GPUs per node [0, 0]" in wait2


def test_explain_canceled_task(scenario: Scenario) -> None:
    text = explain(scenario.db, C).text
    assert "is CANCELED with no attempt." in text
    assert "Waited 6 s and attempt 1 never started: 1 s QUEUED" in text
    assert "5 s in PENDING_RESOURCES: Ray is unreachable: capacity unknown (capacity_unknown" in text
    assert "Canceled by alice at 10:00:20; no Ray job was running." in text


def test_explain_failed_and_still_waiting(scenario: Scenario) -> None:
    failed = explain(scenario.db, D).text
    assert "Attempt 1 failed USER_ERROR (exit code 1)" in failed
    assert "not retried: USER_ERROR is not retryable." in failed
    waiting = explain(scenario.db, E).text
    assert "is PENDING_RESOURCES with no attempt." in waiting
    assert "since 10:11:41, still waiting at the end of the log" in waiting


def test_explain_is_deterministic(scenario: Scenario) -> None:
    assert explain(scenario.db, B).lines == explain(scenario.db, B).lines


def test_task_timeline_every_event_with_actor_and_changes(scenario: Scenario) -> None:
    tl = task_timeline(scenario.db, B)
    assert [e.type for e in tl.entries] == [
        "TaskSubmitted", "AttemptStarting", "AttemptSubmitted", "AttemptRunning", "AttemptEnded",
        "RetryScheduled", "TaskDeferred", "AttemptStarting", "AttemptSubmitted", "AttemptRunning",
        "AttemptEnded", "TaskSucceeded",
    ]
    assert [e.version for e in tl.entries] == list(range(1, 13))
    assert tl.entries[0].actor == "user:bob" and tl.entries[0].source == "api"
    assert {e.actor for e in tl.entries[1:]} == {"reactor:r1"}
    assert "state: RUNNING → PENDING_RESOURCES" in tl.entries[5].changes
    assert "a1.failure_kind: - → INSUFFICIENT_RESOURCES" in tl.entries[4].changes
    assert [(a.attempt_no, a.ray_status) for a in tl.attempts] == [(1, "FAILED"), (2, "SUCCEEDED")]
    assert tl.wait_by_reason == {"queued": 2.0, "retry_backoff": 60.0, "no_capacity_per_node": 584.0}
    assert tl.waited_s == 646.0


def test_unknown_task(scenario: Scenario) -> None:
    with pytest.raises(TaskNotFound):
        explain(scenario.db, "nobody-ppo-20260101-000000-0000")
    res = CliRunner().invoke(replay, ["--db", str(scenario.db), "task", "nope"])
    assert res.exit_code == 2 and "no task 'nope'" in res.output


def test_cli_task_and_explain(scenario: Scenario) -> None:
    runner = CliRunner()
    res = runner.invoke(replay, ["--db", str(scenario.db), "task", B])
    assert res.exit_code == 0, res.output
    assert "attempt 1" in res.output and "attempt 2" in res.output and EVIDENCE in res.output
    assert "↳ state: RUNNING → PENDING_RESOURCES" in res.output
    doc = json.loads(runner.invoke(replay, ["--db", str(scenario.db), "explain", A, "--json"]).output)
    assert doc["state"] == "SUCCEEDED" and doc["waits"][1]["free_gpus_per_node"] == [4.0, 2.0]


def test_a_cpu_bound_deferral_keeps_its_own_reason() -> None:
    """A task short of CPUs (GPUs free) is explained by the CPUs, not by a GPU list that
    would contradict it."""
    from argus.events import Demand
    from argus.replay.explain import _segment
    from argus.replay.waits import WaitSegment

    seg = WaitSegment(before_attempt=1, state="PENDING_RESOURCES", reason="no_capacity_per_node",
                      message="needs 1 node with 1 GPU and 4 CPUs free; free CPUs per node [2]",
                      start=0.0, end=10.0, needed=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4),
                      free_gpus_per_node=[4.0, 0.0], position=7)
    text = _segment(seg)
    assert "free CPUs per node [2]" in text and "free GPUs" not in text
