"""The running attempts' checkpoints (argus.reactor.checkpoints): found where verl and the
example trainer write them, never through a link a job planted, read within a bound; a new
step is recorded once as CheckpointObserved; and preemption stops the task with the least
work since its last checkpoint, not merely the one started last."""

from __future__ import annotations

import os
from pathlib import Path

from argus.events import AttemptPreempted, CheckpointObserved
from argus.rayjobs import job_dir, submission_id_for
from argus.reactor.checkpoints import MAX_ENTRIES, find_checkpoint
from tests.reactor.test_preemption_on_fake import BOB, settle, submit, world
from tests.reactor.test_turn_on_fake import ALICE

SID = "alice-ppo-20260101-000000-abcd--a01"


def _job(shared: Path, user: str = "alice", sid: str = SID) -> Path:
    path = Path(job_dir(str(shared), user, sid))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _save(folder: Path, step: int, mtime: float | None = None) -> None:
    """What verl's trainer leaves: the step's folder, then the tracker naming it."""
    (folder / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    tracker = folder / "latest_checkpointed_iteration.txt"
    tracker.write_text(str(step))
    if mtime is not None:
        os.utime(tracker, (mtime, mtime))


def test_found_where_the_toy_trainer_and_where_verl_put_them(tmp_path: Path) -> None:
    ckpt = _job(tmp_path) / "checkpoints"
    assert find_checkpoint(str(tmp_path), "alice", SID) is None  # no checkpoints/ yet
    _save(ckpt, 4, mtime=1000.0)
    assert find_checkpoint(str(tmp_path), "alice", SID) == (4, "checkpoints", 1000.0)
    _save(ckpt / "proj" / "exp", 6, mtime=2000.0)  # verl: <project>/<experiment>/, newer
    assert find_checkpoint(str(tmp_path), "alice", SID) == (6, "checkpoints/proj/exp", 2000.0)


def test_a_tracker_without_its_step_folder_or_not_a_number_is_no_checkpoint(tmp_path: Path) -> None:
    ckpt = _job(tmp_path) / "checkpoints"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("7")  # global_step_7/ is not there
    assert find_checkpoint(str(tmp_path), "alice", SID) is None
    (ckpt / "global_step_7").mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("7" * 100_000)  # read: 32 bytes
    assert find_checkpoint(str(tmp_path), "alice", SID) is None
    (ckpt / "latest_checkpointed_iteration.txt").write_text("7\n")
    assert find_checkpoint(str(tmp_path), "alice", SID) is not None


def test_links_a_job_planted_are_never_followed(tmp_path: Path) -> None:
    bob = _job(tmp_path, "bob", "bob-ppo-20260101-000000-abcd--a01") / "checkpoints"
    _save(bob, 9)
    job = _job(tmp_path)
    (job / "checkpoints").symlink_to(bob)  # the folder itself
    assert find_checkpoint(str(tmp_path), "alice", SID) is None
    (job / "checkpoints").unlink()
    (job / "checkpoints").mkdir()
    (job / "checkpoints" / "proj").symlink_to(bob.parent)  # a folder below it
    (job / "checkpoints" / "latest_checkpointed_iteration.txt").symlink_to(bob / "latest_checkpointed_iteration.txt")
    (job / "checkpoints" / "global_step_9").mkdir()
    assert find_checkpoint(str(tmp_path), "alice", SID) is None
    # ... and neither is the user's own jobs folder (the walk starts at <shared>/users).
    other = tmp_path / "elsewhere"
    _save(_job(other) / "checkpoints", 3)
    jobs = tmp_path / "users" / "carol" / "jobs"
    jobs.parent.mkdir(parents=True)
    jobs.symlink_to(other / "users" / "alice" / "jobs")
    assert find_checkpoint(str(tmp_path), "carol", SID) is None


def test_found_beside_a_hundred_saved_steps(tmp_path: Path) -> None:
    ckpt = _job(tmp_path) / "checkpoints" / "proj" / "exp"
    for step in range(10, 1001, 10):
        (ckpt / f"global_step_{step}").mkdir(parents=True)
    _save(ckpt, 1000)
    assert find_checkpoint(str(tmp_path), "alice", SID) == (1000, "checkpoints/proj/exp", (ckpt / "latest_checkpointed_iteration.txt").stat().st_mtime)


def test_a_fifo_tracker_does_not_hang_and_a_crowded_folder_is_looked_at_within_a_bound(tmp_path: Path) -> None:
    ckpt = _job(tmp_path) / "checkpoints"
    ckpt.mkdir()
    (ckpt / "global_step_1").mkdir()
    os.mkfifo(ckpt / "latest_checkpointed_iteration.txt")
    assert find_checkpoint(str(tmp_path), "alice", SID) is None
    crowded = _job(tmp_path, sid="x--a01") / "checkpoints"
    for i in range(MAX_ENTRIES * 4):
        (crowded / f"d{i:04d}").mkdir(parents=True)
    assert find_checkpoint(str(tmp_path), "alice", "x--a01") is None


async def test_a_new_step_is_recorded_once_and_preemption_stops_the_least_work_lost(tmp_path: Path) -> None:
    async with world(tmp_path, 2, "priority") as w:
        w.reactor.checkpoints.every_s = 1.0
        shared = Path(w.config.shared_root)
        early = await submit(w, ALICE, 4, preemptible=True)
        await w.running(early)
        await settle(w)
        late = await submit(w, ALICE, 4, preemptible=True)
        await w.running(late)
        await settle(w, 100.0)
        # `early` started first but saved a checkpoint 5 s ago; `late` never saved one. Stopped
        # by start time alone, `late` (the most recent start) would go.
        ckpt = Path(job_dir(str(shared), "alice", submission_id_for(early, 1))) / "checkpoints"
        _save(ckpt, 3, mtime=w.clock() - 5)
        w.clock.advance(2.0)
        await w.turn()
        seen = [e for e in await w.events(early) if isinstance(e, CheckpointObserved)]
        assert [(e.step, e.folder) for e in seen] == [(3, "checkpoints")]
        assert seen[0].saved_at == w.clock() - 7
        assert (await w.view(early)).attempts[0].checkpoint_step == 3
        w.clock.advance(2.0)
        await w.turn()  # the same step: nothing new
        assert len([e for e in await w.events(early) if isinstance(e, CheckpointObserved)]) == 1
        high = await submit(w, BOB, 4, priority=10)
        await w.turn()
        stopped = [t for t in (early, late) if any(isinstance(e, AttemptPreempted) for e in await w.events(t))]
        assert stopped == [early], "the task with the least work since its last checkpoint goes"
        assert (await w.view(high)).wait_reason == "preempting"


def test_a_deep_wide_tree_opens_a_bounded_number_of_folders(tmp_path: Path, monkeypatch: object) -> None:
    """64 folders of 64 folders: the reactor's descriptors are not the job's to exhaust."""
    import argus.reactor.checkpoints as ck

    ckpt = _job(tmp_path) / "checkpoints"
    for i in range(64):
        for j in range(64):
            (ckpt / f"p{i:02d}" / f"e{j:02d}").mkdir(parents=True)
    _save(ckpt, 5)
    opened: list[int] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        fd = real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(fd)
        return fd

    monkeypatch.setattr(ck.os, "open", counting_open)  # type: ignore[attr-defined]
    assert find_checkpoint(str(tmp_path), "alice", SID) is not None
    # Two levels of at most MAX_OPEN folders; the walk to checkpoints/ (5) and the tracker.
    assert len(opened) <= 2 * ck.MAX_OPEN + 6, len(opened)
