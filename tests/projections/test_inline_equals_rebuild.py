"""Property: for any valid history of task, user, team and cluster events, appended in any split
into transactions (one stream or several per transaction), the projection tables kept
inline equal a rebuild of the same log from scratch."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.events import (
    AttemptOutputTruncated, EventBase, FailureKind, TeamCreated, TeamMemberMoved, TeamQuotaSet, TeamShareSet,
    cluster_stream, task_stream, teams_stream, user_stream,
)
from argus.lifecycle import TRANSITIONS, TaskState, next_state
from argus.store import AppendBatch
from projections import open_store
from tests.events import factories as f
from tests.projections.compare import inline_tables, rebuilt_from_scratch

Step = tuple[str, str | None, EventBase]  # (stream, owner, event)

_NEEDS_ATTEMPT = {"AttemptSubmitted", "AttemptRunning", "AttemptTimeLimitReached", "AttemptPlacementTimedOut", "CheckpointObserved", "AttemptEnded", "RetryScheduled", "TaskSucceeded", "TaskFailed", "AttemptProgressed", "AttemptStalled", "AttemptStacksCaptured", "AttemptInterrupted", "TaskIncomplete"}
USERS = ["alice", "bob", "carol"]


def _task_event(kind: str, tid: str, attempt: int, at: float, draw: st.DrawFn) -> EventBase:
    failure = draw(st.sampled_from(list(FailureKind)))
    builders = {
        "TaskDeferred": lambda: f.deferred(tid, draw(st.sampled_from(["no_capacity_per_node", "max_running"])), at),
        "AttemptStarting": lambda: f.starting(tid, attempt, at),
        "AttemptSubmitted": lambda: f.attempt_submitted(tid, attempt, at, recovered=draw(st.booleans())),
        "AttemptRunning": lambda: f.running(tid, attempt, at),
        "AttemptTimeLimitReached": lambda: f.time_limit_reached(tid, attempt, at),
        "AttemptPlacementTimedOut": lambda: f.placement_timed_out(tid, attempt, at),
        "AttemptPreempted": lambda: f.preempted(tid, attempt, at),
        "CheckpointObserved": lambda: f.checkpoint(tid, attempt, at, step=draw(st.integers(1, 50))),
        "AttemptEnded": lambda: f.ended(
            tid, attempt, draw(st.sampled_from(["SUCCEEDED", "FAILED", "STOPPED", "LOST"])),
            failure_kind=draw(st.none() | st.just(failure)), exit_code=draw(st.none() | st.integers(0, 2)), at=at,
        ),
        "RetryScheduled": lambda: f.retry(tid, attempt, failure, at),
        "TaskSucceeded": lambda: f.succeeded(tid, attempt, at),
        "TaskIncomplete": lambda: f.incomplete(tid, attempt, at),
        "AttemptProgressed": lambda: f.progressed(tid, attempt, at, step=draw(st.integers(1, 50))),
        "AttemptStalled": lambda: f.stalled(tid, attempt, at),
        "AttemptOutputTruncated": lambda: AttemptOutputTruncated(
            task_id=tid, attempt_no=attempt, submission_id=f"{tid}--a{attempt:02d}", budget_bytes=1 << 20,
            total_bytes=(total := draw(st.integers(2 << 20, 9 << 20))), kept_bytes=1 << 20,
            dropped_bytes=total - (1 << 20), final=draw(st.booleans()), observed_at=at),
        "AttemptStacksCaptured": lambda: f.stacks_captured(tid, attempt, at),
        "AttemptInterrupted": lambda: f.interrupted(tid, attempt, at),
        "TaskFailed": lambda: f.failed(tid, attempt, failure, at),
        "TaskCancelRequested": lambda: f.cancel_requested(tid, draw(st.sampled_from(USERS)), at),
        "TaskCanceled": lambda: f.canceled(tid, "alice", draw(st.none() | st.just("STOPPED")), at),
    }
    return builders[kind]()


TEAMS = ["vision", "nlp"]


def _team_event(created: list[str], members: dict[str, str], draw: st.DrawFn, at: float) -> EventBase:
    """A valid team event: a team is created before it is used; a move names where the
    user is (``members``: user -> team)."""
    if not created or (len(created) < len(TEAMS) and draw(st.booleans())):
        team = next(t for t in TEAMS if t not in created)
        created.append(team)
        return TeamCreated(team_id=team, share=float(draw(st.integers(1, 3))), by="admin", at=at)
    team = draw(st.sampled_from(created))
    kind = draw(st.sampled_from(["move", "share", "quota"]))
    if kind == "move":
        user = draw(st.sampled_from(USERS))
        moved = TeamMemberMoved(user_id=user, team_id=team, from_team=members.get(user, ""), by="admin", at=at)
        members[user] = team
        return moved
    if kind == "share":
        return TeamShareSet(team_id=team, share=float(draw(st.integers(1, 5))), by="admin", at=at)
    return TeamQuotaSet(team_id=team, gpu_model=draw(st.sampled_from(["", "A100"])),
                        nominal_gpus=float(draw(st.integers(0, 8))), lending_limit=draw(st.none() | st.just(0.0)),
                        by="admin", at=at)


@st.composite
def histories(draw: st.DrawFn) -> list[Step]:
    """A valid log: every task follows argus.lifecycle.TRANSITIONS, users exist before
    their events, tokens are revoked only by their owner."""
    tasks: dict[str, tuple[TaskState, int, str]] = {}  # id -> (state, attempts, user)
    users: dict[str, list[str]] = {}  # id -> token ids
    steps: list[Step] = []
    n_tokens = 0
    teams: list[str] = []  # created so far
    members: dict[str, str] = {}  # user -> their team
    for i in range(draw(st.integers(1, 50))):
        at = f.T0 + i
        action = draw(st.sampled_from(["new_task", "task", "task", "task", "user", "cluster", "team"]))
        live = sorted(t for t, (s, _, _) in tasks.items() if not s.is_terminal())
        if action == "task" and live:
            tid = draw(st.sampled_from(live))
            state, attempt, user = tasks[tid]
            legal = sorted(k for k, m in TRANSITIONS.items() if state in m and not (k in _NEEDS_ATTEMPT and attempt == 0))
            kind = draw(st.sampled_from(legal))
            if kind == "AttemptStarting":
                attempt += 1
            event = _task_event(kind, tid, attempt, at, draw)
            tasks[tid] = (next_state(state, kind), attempt, user)
            steps.append((task_stream(tid), user, event))
        elif action in ("new_task", "task"):
            tid = f"t{len(tasks)}"
            user = draw(st.sampled_from(USERS))
            tasks[tid] = (TaskState.QUEUED, 0, user)
            steps.append((task_stream(tid), user, f.submitted(tid, user, priority=draw(st.integers(0, 2)), at=at)))
        elif action == "user":
            uid = draw(st.sampled_from(USERS))
            if uid not in users:
                users[uid] = []
                event: EventBase = f.user_created(uid, is_admin=draw(st.booleans()), at=at)
            else:
                choice = draw(st.sampled_from(["disable", "enable", "issue", "revoke"]))
                if choice == "revoke" and users[uid]:
                    event = f.token_revoked(uid, draw(st.sampled_from(users[uid])), at)
                elif choice in ("issue", "revoke"):
                    n_tokens += 1
                    users[uid].append(f"k{n_tokens}")
                    event = f.token_issued(uid, f"k{n_tokens}", at)
                else:
                    event = (f.user_disabled if choice == "disable" else f.user_enabled)(uid, at)
            steps.append((user_stream(uid), uid, event))
        elif action == "team":
            steps.append((teams_stream, None, _team_event(teams, members, draw, at)))
        else:
            if draw(st.integers(0, 4)) == 0:
                event = f.unreachable(at=at)
            else:
                nodes = draw(st.lists(st.sampled_from(["n1", "n2", "n3"]), unique=True, max_size=3))
                event = f.capacity({n: float(draw(st.integers(0, 8))) for n in nodes}, at)
            steps.append((cluster_stream, None, event))
    return steps


def transactions(steps: list[Step], cuts: list[int]) -> list[list[AppendBatch]]:
    """Split ``steps`` at ``cuts`` into transactions; each holds one batch per run of
    consecutive events of the same stream, with the exact expected version."""
    versions: dict[str, int] = {}
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(steps))), len(steps)]
    result: list[list[AppendBatch]] = []
    for lo, hi in zip(bounds, bounds[1:]):
        batches: list[AppendBatch] = []
        run: list[Step] = []
        for step in [*steps[lo:hi], None]:
            if run and (step is None or step[0] != run[0][0]):
                stream = run[0][0]
                batches.append(AppendBatch(
                    stream=stream, expected_version=versions.get(stream, 0),
                    events=[e for _, _, e in run], owner=run[0][1],
                ))
                versions[stream] = versions.get(stream, 0) + len(run)
                run = []
            if step is not None:
                run.append(step)
        result.append(batches)
    return result


async def append_all(path: Path, plan: list[list[AppendBatch]]) -> None:
    store = await open_store(path, synchronous="OFF")
    try:
        for batches in plan:
            await store.append_batches(batches)
    finally:
        await store.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=histories(), cuts=st.lists(st.integers(0, 50), max_size=25))
def test_inline_projections_equal_a_rebuild_whatever_the_batch_split(steps: list[Step], cuts: list[int]) -> None:
    plan = transactions(steps, cuts)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "db.sqlite3"
        asyncio.run(append_all(db, plan))
        inline = inline_tables(db)
        rebuilt = rebuilt_from_scratch(db, Path(tmp) / "scratch.sqlite3")
    assert inline == rebuilt
    assert len(inline["teams"]) == len({e.team_id for _, _, e in steps if isinstance(e, TeamCreated)})
    n_tasks = len({s for s, _, e in steps if s.startswith("task-")})
    assert len(inline["tasks"]) == n_tasks  # the history really reached the read model


def test_transactions_keep_order_and_versions() -> None:
    steps: list[Step] = [
        (task_stream("a"), "alice", f.submitted("a")),
        (task_stream("b"), "bob", f.submitted("b", "bob")),
        (task_stream("a"), "alice", f.deferred("a")),
    ]
    plan = transactions(steps, [2])
    assert [[(b.stream, b.expected_version, len(b.events)) for b in tx] for tx in plan] == [
        [("task-a", 0, 1), ("task-b", 0, 1)],
        [("task-a", 1, 1)],
    ]
