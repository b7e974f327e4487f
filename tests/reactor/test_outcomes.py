"""Retries bounded on purpose, per failure kind (pure: outcome_events)."""

from __future__ import annotations

import pytest

from argus.config import SchedulerConfig
from argus.events import Demand, FailureKind, RetryScheduled, TaskFailed
from argus.lifecycle import TaskState
from argus.reactor.attempts import outcome_events
from projections import AttemptView, TaskView

K = FailureKind
T0 = 1_000_000.0


def task(*failures: FailureKind, max_attempts: int = 3) -> TaskView:
    """A task whose earlier attempts failed with ``failures``, its latest one running."""
    attempts = [AttemptView(attempt_no=i + 1, submission_id=f"t--a{i + 1:02d}", ray_status="FAILED",
                            failure_kind=k, decided_at=T0) for i, k in enumerate(failures)]
    attempts.append(AttemptView(attempt_no=len(attempts) + 1, submission_id="t--latest",
                                ray_status="RUNNING", decided_at=T0))
    return TaskView(task_id="t", user="u", workload="ppo", kind="advanced", state=TaskState.RUNNING,
                    priority=0, max_attempts=max_attempts,
                    demand=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4), seq=1, created_at=T0,
                    updated_at=T0, stream_version=3, attempts=tuple(attempts))


def outcome(t: TaskView, kind: FailureKind, *, after_s: float = 60.0, **config: float) -> object:
    events = outcome_events(t, ray_status="FAILED", exit_code=1, kind=kind, evidence="why",
                            now=T0 + after_s, config=SchedulerConfig(**config))  # type: ignore[arg-type]
    return events[-1]


def test_resource_races_do_not_count_against_max_attempts() -> None:
    t = task(*[K.INSUFFICIENT_RESOURCES] * 10, max_attempts=2)
    assert isinstance(outcome(t, K.INSUFFICIENT_RESOURCES), RetryScheduled)


def test_resource_retries_end_at_max_pending_s_with_the_reason() -> None:
    t = task(K.INSUFFICIENT_RESOURCES)
    assert isinstance(outcome(t, K.INSUFFICIENT_RESOURCES, after_s=3599, max_pending_s=3600), RetryScheduled)
    final = outcome(t, K.INSUFFICIENT_RESOURCES, after_s=3601, max_pending_s=3600)
    assert isinstance(final, TaskFailed) and final.failure_kind is K.INSUFFICIENT_RESOURCES
    assert "wait at most 3600 s" in final.error_summary and "why" in final.error_summary
    assert "max_pending_s" not in final.error_summary  # the setting's name is the admin's, not the user's
    assert isinstance(outcome(t, K.INSUFFICIENT_RESOURCES, after_s=10**7, max_pending_s=0), RetryScheduled)


def test_cluster_loss_counts_within_max_attempts() -> None:
    assert isinstance(outcome(task(K.CLUSTER_LOST, max_attempts=3), K.CLUSTER_LOST), RetryScheduled)
    final = outcome(task(K.CLUSTER_LOST, K.INSUFFICIENT_RESOURCES, K.CLUSTER_LOST, max_attempts=3),
                    K.CLUSTER_LOST)
    assert isinstance(final, TaskFailed) and "max_attempts" in final.error_summary


@pytest.mark.parametrize("kind", [K.USER_ERROR, K.RUNTIME_ERROR, K.UNKNOWN])
def test_the_tasks_own_failures_are_not_retried(kind: FailureKind) -> None:
    final = outcome(task(), kind)
    assert isinstance(final, TaskFailed) and final.error_summary == "why"
