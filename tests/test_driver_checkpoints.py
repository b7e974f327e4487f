"""A task's checkpoints travel with it: the driver of a later attempt moves the latest
earlier attempt's ``checkpoints/`` into its own job dir (a rename), leaves a note where
they went, and follows no link a job wrote."""

from __future__ import annotations

from pathlib import Path

from argus.driver import carry_checkpoints
from argus.rayjobs.submission import DriverContext, job_dir, submission_id_for

TASK = "alice-ppo-20260101-000000-abcd"


def ctx(shared: Path, attempt_no: int) -> DriverContext:
    return DriverContext(task_id=TASK, user="alice", submission_id=submission_id_for(TASK, attempt_no),
                         attempt_no=attempt_no, shared_root=str(shared), command="true")


def jobdir(shared: Path, attempt_no: int) -> Path:
    path = Path(job_dir(str(shared), "alice", submission_id_for(TASK, attempt_no)))
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_latest_earlier_checkpoints_move_to_the_new_attempt(tmp_path: Path) -> None:
    first, second = jobdir(tmp_path, 1), jobdir(tmp_path, 2)
    (first / "checkpoints" / "global_step_2").mkdir(parents=True)
    (first / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    (second / "checkpoints" / "global_step_4").mkdir(parents=True)  # attempt 2 went further
    third = jobdir(tmp_path, 3)
    assert carry_checkpoints(ctx(tmp_path, 3), third) == second
    assert (third / "checkpoints" / "global_step_4").is_dir() and not (second / "checkpoints").exists()
    assert (second / "checkpoints.moved").read_text().startswith(f"moved to ../{submission_id_for(TASK, 3)}")
    assert (first / "checkpoints" / "global_step_2").is_dir()  # older ones stay where they are


def test_nothing_to_carry_for_a_first_attempt_or_one_that_has_its_own(tmp_path: Path) -> None:
    assert carry_checkpoints(ctx(tmp_path, 1), jobdir(tmp_path, 1)) is None
    (jobdir(tmp_path, 1) / "checkpoints").mkdir()
    mine = jobdir(tmp_path, 2)
    (mine / "checkpoints").mkdir()
    assert carry_checkpoints(ctx(tmp_path, 2), mine) is None
    assert (jobdir(tmp_path, 1) / "checkpoints").is_dir()


def test_a_link_a_job_left_is_neither_followed_nor_moved(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "global_step_9").mkdir(parents=True)
    first = jobdir(tmp_path, 1)
    (first / "checkpoints").symlink_to(elsewhere)
    second = jobdir(tmp_path, 2)
    assert carry_checkpoints(ctx(tmp_path, 2), second) is None
    assert not (second / "checkpoints").exists() and (elsewhere / "global_step_9").is_dir()
