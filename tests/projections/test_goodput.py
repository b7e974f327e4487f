"""Goodput (projections.goodput) of hand-built task histories: where held GPU time went."""

from __future__ import annotations

import pytest

from argus.events import (
    AttemptProgressed, CheckpointObserved, EventBase, EventMeta, FailureKind, Recorded,
)
from argus.rayjobs.submission import submission_id_for
from projections.goodput import CATEGORIES, Goodput, by_user, task_goodput
from projections.tasks import TaskView, evolve_task
from tests.events import factories as f

T = f.T0
GPUS = 4  # factories.DEMAND: 1 node x 4 GPUs


def step(task: str, attempt: int, n: int, at: float, first: int = 1) -> AttemptProgressed:
    """The driver reported step ``n`` printed at ``T + at``."""
    return AttemptProgressed(task_id=task, attempt_no=attempt, submission_id=submission_id_for(task, attempt),
                             step=n, step_at=T + at, first_step=first, total_steps=10, step_time_s=10.0,
                             observed_at=T + at + 0.5)


def saved(task: str, attempt: int, n: int, at: float) -> CheckpointObserved:
    return CheckpointObserved(task_id=task, attempt_no=attempt, submission_id=submission_id_for(task, attempt),
                              step=n, folder="checkpoints", saved_at=T + at, observed_at=T + at + 1)


def fold(events: list[EventBase], user: str = "alice") -> TaskView:
    view = None
    for version, event in enumerate(events, start=1):
        rec = Recorded(position=version, stream="task-t", version=version, type=type(event).__name__, event=event,
                       meta=EventMeta(), owner=user, recorded_at=T + version * 1e-3)
        view = evolve_task(view, rec)
    assert view is not None
    return at_last_event(view, events)


def at_last_event(view: TaskView, events: list[EventBase]) -> TaskView:
    """updated_at as the last event's own time (the fold takes the recording time)."""
    import msgspec

    times = [getattr(e, name) for e in events for name in ("ended_at", "finished_at", "canceled_at", "observed_at",
                                                           "decided_at", "submitted_at") if hasattr(e, name)]
    return msgspec.structs.replace(view, updated_at=max(times))


def sums_to_held(g: Goodput) -> None:
    assert sum(getattr(g, c) for c in CATEGORIES) == pytest.approx(g.held)


def stalled_then_resumed(checkpoint_step: int, checkpoint_at: float, task: str = "t",
                         base: float = T) -> list[EventBase]:
    """Submitted at ``base``; placement 10 s, start-up 30 s, steps 1-3 at 50/60/70 s, no step
    after: stalled at 170 s, ended 175 s; resumed at 185 s, running at 190 s, steps 4..10
    from 200 to 260 s, succeeded at 265 s (``step``'s and ``saved``'s times are from T)."""
    o = base - T
    return [
        f.submitted(task, at=base), f.starting(task, 1, base + 10), f.attempt_submitted(task, 1, base + 11),
        f.running(task, 1, base + 20), step(task, 1, 1, o + 50), step(task, 1, 2, o + 60), step(task, 1, 3, o + 70),
        saved(task, 1, checkpoint_step, o + checkpoint_at), f.stalled(task, 1, base + 170, step=3),
        f.ended(task, 1, "STOPPED", failure_kind=FailureKind.STALLED, at=base + 175),
        f.retry(task, 1, FailureKind.STALLED, base + 175),
        f.starting(task, 2, base + 185), f.attempt_submitted(task, 2, base + 186), f.running(task, 2, base + 190),
        step(task, 2, 4, o + 200, first=4), step(task, 2, 10, o + 260, first=4),
        f.ended(task, 2, "SUCCEEDED", at=base + 265), f.succeeded(task, 2, base + 265),
    ]


def test_a_stall_resumed_from_its_checkpoint_shows_the_gpu_time_it_lost() -> None:
    view = fold(stalled_then_resumed(checkpoint_step=3, checkpoint_at=72))
    assert [a.first_step_at for a in view.attempts] == [T + 50, T + 200]  # kept by the fold
    g = task_goodput(view, now=T + 10_000)  # finished: ``now`` does not matter
    sums_to_held(g)
    assert g.held == pytest.approx(GPUS * (165 + 80))
    assert g.placement == pytest.approx(GPUS * (10 + 5))
    assert g.startup == pytest.approx(GPUS * (30 + 10))
    assert g.productive == pytest.approx(GPUS * (20 + 60))
    assert g.stalled == pytest.approx(GPUS * 105)  # from step 3 (70 s) to its end (175 s)
    assert g.lost == 0.0 and g.lost_steps == 0  # it saved at its last step: nothing to train again
    assert g.other == pytest.approx(GPUS * 5)
    assert g.waiting_s == pytest.approx(10 + 10)
    assert g.ratio == pytest.approx(80 / 245)


def test_steps_after_the_checkpoint_are_lost_work() -> None:
    view = fold(stalled_then_resumed(checkpoint_step=2, checkpoint_at=62))
    g = task_goodput(view, now=T + 10_000)
    sums_to_held(g)
    assert g.lost == pytest.approx(GPUS * 8) and g.lost_steps == 1  # step 3, from the save (62 s) to 70 s
    assert g.productive == pytest.approx(GPUS * (12 + 60))
    assert g.stalled == pytest.approx(GPUS * 105)


def test_a_preempted_attempt_loses_its_steps_since_its_checkpoint() -> None:
    view = fold([
        f.submitted("t", at=T), f.starting("t", 1, T), f.running("t", 1, T + 10),
        step("t", 1, 1, 20), step("t", 1, 4, 50), saved("t", 1, 4, 50), step("t", 1, 5, 60),
        f.preempted("t", 1, T + 65), f.ended("t", 1, "STOPPED", failure_kind=FailureKind.PREEMPTED, at=T + 70),
        f.retry("t", 1, FailureKind.PREEMPTED, T + 70),
    ])
    g = task_goodput(view, now=T + 100)  # waits again since 70 s
    sums_to_held(g)
    assert g.held == pytest.approx(GPUS * 70)
    assert g.productive == pytest.approx(GPUS * 30) and g.lost == pytest.approx(GPUS * 10) and g.lost_steps == 1
    assert g.other == pytest.approx(GPUS * 10)  # the preemption's grace, from step 5 to the end
    assert g.stalled == 0.0 and g.waiting_s == pytest.approx(30)


def test_a_failed_task_loses_its_last_attempt_whole() -> None:
    view = fold([
        f.submitted("t", at=T), f.starting("t", 1, T + 5), f.running("t", 1, T + 10), step("t", 1, 1, 30),
        step("t", 1, 2, 40), f.ended("t", 1, "FAILED", failure_kind=FailureKind.USER_ERROR, at=T + 45),
        f.failed("t", 1, FailureKind.USER_ERROR, T + 45),
    ])
    g = task_goodput(view, now=T + 1000)
    sums_to_held(g)
    assert g.held == pytest.approx(GPUS * 40) and g.failed == g.held
    assert g.productive == 0.0 and g.ratio == 0.0 and g.waiting_s == pytest.approx(5)


def test_a_running_attempt_counts_up_to_now() -> None:
    view = fold([
        f.submitted("t", at=T), f.starting("t", 1, T), f.running("t", 1, T + 10),
        step("t", 1, 1, 20), step("t", 1, 3, 40),
    ])
    g = task_goodput(view, now=T + 45)
    sums_to_held(g)
    assert g.held == pytest.approx(GPUS * 45)
    assert (g.placement, g.startup, g.productive, g.other) == pytest.approx(
        (GPUS * 10, GPUS * 10, GPUS * 20, GPUS * 5))  # other: the step in progress
    assert task_goodput(view, now=T + 55).held == pytest.approx(GPUS * 55)


def test_an_attempt_never_placed_is_all_placement_and_a_waiting_task_holds_nothing() -> None:
    placing = fold([f.submitted("t", at=T), f.starting("t", 1, T + 3), f.attempt_submitted("t", 1, T + 4)])
    g = task_goodput(placing, now=T + 20)
    assert g.held == g.placement == pytest.approx(GPUS * 17) and g.ratio == 0.0
    waiting = fold([f.submitted("t", at=T), f.deferred("t", at=T + 1)])
    g = task_goodput(waiting, now=T + 30)
    assert g.held == 0.0 and g.ratio is None and g.waiting_s == pytest.approx(30)


def test_sums_per_user_and_for_the_cluster() -> None:
    a = task_goodput(fold(stalled_then_resumed(3, 72)), T)
    b = Goodput(held=100.0, productive=50.0, other=50.0)
    rows = by_user([("bob", b), ("alice", a), ("bob", b)])
    assert [(r.user, r.tasks) for r in rows] == [("alice", 1), ("bob", 2), ("*", 3)]
    assert rows[1].goodput.held == 200.0 and rows[1].goodput.ratio == 0.5
    assert rows[2].goodput.held == pytest.approx(a.held + 200.0)
    assert rows[2].goodput.productive == pytest.approx(a.productive + 100.0)
