"""Small builders for valid events, shared by the store, projection and event tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from argus.rayjobs.submission import submission_id_for
from argus.events import (
    AttemptEnded,
    AttemptInterrupted,
    AttemptRunning,
    AttemptTimeLimitReached,
    AttemptPlacementTimedOut,
    AttemptPreempted,
    AttemptProgressed,
    AttemptStacksCaptured,
    AttemptStalled,
    AttemptStarting,
    AttemptSubmitted,
    CapacityObserved,
    CheckpointObserved,
    ClusterUnreachable,
    Demand,
    FailureKind,
    NodeCapacity,
    RetryScheduled,
    StackedProcess,
    SubmissionPayload,
    TaskCanceled,
    TaskCancelRequested,
    TaskDeferred,
    TaskFailed,
    TaskIncomplete,
    TaskSubmitted,
    TaskSucceeded,
    TokenIssued,
    SshKeyAdded,
    SshKeyRevoked,
    TokenRevoked,
    TokenUsed,
    UserCreated,
    UserDisabled,
    UserEnabled,
    UserLimitsSet,
)
from argus.events.catalog import EventBase

if TYPE_CHECKING:
    from projections import TaskView

T0 = 1_700_000_000.0
DEMAND = Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=8.0)


def submitted(task_id: str, user: str = "alice", *, priority: int = 0, at: float = T0) -> TaskSubmitted:
    return TaskSubmitted(
        task_id=task_id, user=user, workload="ppo", kind="advanced", spec_raw="kind: advanced\n",
        spec={"kind": "advanced"}, command_raw="python -m verl.trainer.main_ppo",
        command="python -m verl.trainer.main_ppo", demand=DEMAND, priority=priority,
        submitted_at=at,
    )


def deferred(task_id: str, reason: str = "no_capacity_per_node", at: float = T0) -> TaskDeferred:
    return TaskDeferred(
        task_id=task_id, reason=reason, message=f"{reason}: need 4 GPUs on one node",
        needed=DEMAND, free_gpus_per_node=[2.0, 1.0], decided_at=at,
    )




def starting(task_id: str, attempt_no: int = 1, at: float = T0, nodes: tuple[str, ...] = ()) -> AttemptStarting:
    sid = submission_id_for(task_id, attempt_no)
    payload = SubmissionPayload(
        submission_id=sid, entrypoint="python -m verl.trainer.main_ppo", entrypoint_num_cpus=1.0,
        entrypoint_resources={"worker_node": 1.0}, runtime_env={"env_vars": {"A": "1"}},
        metadata={"task_id": task_id},
    )
    return AttemptStarting(task_id=task_id, attempt_no=attempt_no, submission_id=sid, payload=payload, decided_at=at,
                           node_ids=list(nodes))


def attempt_submitted(task_id: str, attempt_no: int = 1, at: float = T0, recovered: bool = False) -> AttemptSubmitted:
    return AttemptSubmitted(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        recovered=recovered, submitted_at=at,
    )


def running(task_id: str, attempt_no: int = 1, at: float = T0) -> AttemptRunning:
    return AttemptRunning(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no), started_at=at
    )


def time_limit_reached(task_id: str, attempt_no: int = 1, at: float = T0, limit: float = 60.0) -> AttemptTimeLimitReached:
    return AttemptTimeLimitReached(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        time_limit_s=limit, ran_s=limit, reached_at=at,
    )


def placement_timed_out(task_id: str, attempt_no: int = 1, at: float = T0) -> AttemptPlacementTimedOut:
    return AttemptPlacementTimedOut(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        placement_groups=["global_pool:0"], pending_s=301.0, timeout_s=300.0, reached_at=at,
    )


def preempted(task_id: str, attempt_no: int = 1, at: float = T0, by: str = "t-high") -> AttemptPreempted:
    return AttemptPreempted(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        by_task_id=by, by_user="bob", reason="priority",
        message=f"preempted for {by} (priority 10 > 0)", preempted_at=at,
    )


def checkpoint(task_id: str, attempt_no: int = 1, at: float = T0, step: int = 2) -> CheckpointObserved:
    return CheckpointObserved(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        step=step, folder="checkpoints", saved_at=at - 1.0, observed_at=at,
    )


def progressed(task_id: str, attempt_no: int = 1, at: float = T0, step: int = 3) -> AttemptProgressed:
    return AttemptProgressed(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        step=step, step_at=at - 1.0, first_step=1, total_steps=10, step_time_s=2.0, observed_at=at,
    )


def stalled(task_id: str, attempt_no: int = 1, at: float = T0, step: int = 3) -> AttemptStalled:
    return AttemptStalled(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        step=step, since=at - 901.0, bound_s=900.0, why="v2.scheduler.stall.floor_s", reached_at=at,
    )


def interrupted(task_id: str, attempt_no: int = 1, at: float = T0) -> AttemptInterrupted:
    return AttemptInterrupted(task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
                              by="operator", reason="argus up was stopped", interrupted_at=at)


def stacks_captured(task_id: str, attempt_no: int = 1, at: float = T0) -> AttemptStacksCaptured:
    return AttemptStacksCaptured(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        hostname="w1", processes=[StackedProcess(pid=42, command="python3 -m trainer", top_frame="wait (x.py:3)")],
        skipped=1, dump_bytes=900, captured_at=at,
    )


def ended(
    task_id: str, attempt_no: int = 1, ray_status: str = "SUCCEEDED", *,
    failure_kind: FailureKind | None = None, exit_code: int | None = 0, at: float = T0,
) -> AttemptEnded:
    return AttemptEnded(
        task_id=task_id, attempt_no=attempt_no, submission_id=submission_id_for(task_id, attempt_no),
        ray_status=ray_status, exit_code=exit_code, failure_kind=failure_kind,
        evidence="" if failure_kind is None else f"evidence of {failure_kind.value}", ended_at=at,
    )


def retry(task_id: str, attempt_no: int = 1, kind: FailureKind = FailureKind.CLUSTER_LOST, at: float = T0) -> RetryScheduled:
    return RetryScheduled(task_id=task_id, failed_attempt_no=attempt_no, failure_kind=kind, next_run_at=at + 60, delay_s=60.0)


def succeeded(task_id: str, attempt_no: int = 1, at: float = T0) -> TaskSucceeded:
    return TaskSucceeded(task_id=task_id, attempt_no=attempt_no, finished_at=at)


def incomplete(task_id: str, attempt_no: int = 1, at: float = T0) -> TaskIncomplete:
    return TaskIncomplete(task_id=task_id, attempt_no=attempt_no, step=3, total_steps=5,
                          reason="the command exited 0 at step 3 of 5", finished_at=at)


def failed(task_id: str, attempt_no: int = 1, kind: FailureKind = FailureKind.USER_ERROR, at: float = T0) -> TaskFailed:
    return TaskFailed(task_id=task_id, attempt_no=attempt_no, failure_kind=kind, error_summary="Traceback: boom", finished_at=at)


def cancel_requested(task_id: str, by: str = "alice", at: float = T0) -> TaskCancelRequested:
    return TaskCancelRequested(task_id=task_id, by=by, requested_at=at)


def canceled(task_id: str, by: str = "alice", ray_status: str | None = None, at: float = T0) -> TaskCanceled:
    return TaskCanceled(task_id=task_id, by=by, ray_status=ray_status, canceled_at=at)


def happy_path(task_id: str, user: str = "alice") -> list[EventBase]:
    """A task that is admitted, runs and succeeds: 7 events (the benchmark's typical task)."""
    return [
        submitted(task_id, user), deferred(task_id), starting(task_id), attempt_submitted(task_id),
        running(task_id), ended(task_id), succeeded(task_id),
    ]


def user_created(user_id: str, *, is_admin: bool = False, at: float = T0) -> UserCreated:
    return UserCreated(user_id=user_id, display_name=user_id.title(), is_admin=is_admin, by="admin", created_at=at)


def user_disabled(user_id: str, at: float = T0) -> UserDisabled:
    return UserDisabled(user_id=user_id, by="admin", at=at)


def user_enabled(user_id: str, at: float = T0) -> UserEnabled:
    return UserEnabled(user_id=user_id, by="admin", at=at)


def user_limits_set(user_id: str, at: float = T0) -> UserLimitsSet:
    return UserLimitsSet(user_id=user_id, max_priority=5, may_pin=True, max_queued=3, max_gpus=4.0, by="admin", at=at)


def token_issued(user_id: str, token_id: str, at: float = T0) -> TokenIssued:
    return TokenIssued(
        user_id=user_id, token_id=token_id, token_hash=f"sha256:{token_id}", label=f"label {token_id}",
        by="admin", issued_at=at,
    )


def token_revoked(user_id: str, token_id: str, at: float = T0) -> TokenRevoked:
    return TokenRevoked(user_id=user_id, token_id=token_id, by="admin", at=at)


def ssh_key_added(user_id: str, fingerprint: str = "SHA256:k", at: float = T0) -> SshKeyAdded:
    return SshKeyAdded(user_id=user_id, key_id="sk1", fingerprint=fingerprint,
                       public_key="ssh-ed25519 AAAA", by="admin", added_at=at)


def ssh_key_revoked(user_id: str, fingerprint: str = "SHA256:k", at: float = T0) -> SshKeyRevoked:
    return SshKeyRevoked(user_id=user_id, key_id="sk1", fingerprint=fingerprint, by="admin", at=at)


def token_used(user_id: str, token_id: str, at: float = T0) -> TokenUsed:
    return TokenUsed(user_id=user_id, token_id=token_id, at=at)


def capacity(free: dict[str, float], at: float = T0) -> CapacityObserved:
    nodes = [
        NodeCapacity(node_id=n, ip=f"10.0.0.{i + 1}", total_gpus=8.0, free_gpus=g, total_cpus=64.0, free_cpus=32.0)
        for i, (n, g) in enumerate(sorted(free.items()))
    ]
    return CapacityObserved(nodes=nodes, observed_at=at)


def unreachable(error: str = "connection refused", at: float = T0) -> ClusterUnreachable:
    return ClusterUnreachable(error=error, observed_at=at)


def folded_submission(task_id: str, seq: int, *, user: str = "alice", priority: int = 0, gpus: int = 1,
                      at: float = T0) -> "TaskView":
    """A task just submitted, as the task fold makes it from a real TaskSubmitted recorded
    at log position ``seq`` (for tests of the read side that need many tasks fast)."""
    import msgspec

    from argus.events import EventMeta, Recorded
    from projections import evolve_task

    event = msgspec.structs.replace(submitted(task_id, user, priority=priority, at=at),
                                    demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1.0))
    rec = Recorded(position=seq, stream=f"task-{task_id}", version=1, type="TaskSubmitted", event=event,
                   meta=EventMeta(), owner=user, recorded_at=at)
    return evolve_task(None, rec)
