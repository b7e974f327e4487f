"""A spec's ``retry_on``: an end Argus does not retry by its own rule (here a runtime error,
and exit code 137) is retried when the spec names its kind or exit code, at most
``v2.scheduler.retry_on_max`` times; without it the task fails at once."""

from __future__ import annotations

from pathlib import Path

from argus.events import AttemptEnded, FailureKind, RetryScheduled, TaskFailed
from argus.lifecycle import TaskState
from argus.rayjobs.submission import submission_id_for
from tests.reactor.test_turn_on_fake import ALICE, World, make_world

SPEC = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 2\nmax_attempts: 5\n{extra}"
        "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=2\n")


async def _fail(w: World, task_id: str, attempt_no: int, exit_code: int) -> None:
    sid = await w.running(task_id, attempt_no)
    w.ray.fail(sid, exit_code=exit_code, logs="Traceback (most recent call last):\nValueError: boom\n")
    await w.turn(2)


async def test_retry_on_retries_what_it_names_up_to_the_admins_cap(tmp_path: Path) -> None:
    w = await make_world(tmp_path)
    try:
        named = (await w.commands.submit(ALICE, SPEC.format(extra="retry_on: [RUNTIME_ERROR, 137]\n"))).task_id
        await _fail(w, named, 1, exit_code=1)
        assert isinstance((await w.events(named))[-1], RetryScheduled)
        w.clock.advance(10)
        await _fail(w, named, 2, exit_code=137)
        events = await w.events(named)
        assert isinstance(events[-1], RetryScheduled)
        assert [e.failure_kind for e in events if isinstance(e, AttemptEnded)] == [FailureKind.RUNTIME_ERROR] * 2
        w.clock.advance(10)
        await _fail(w, named, 3, exit_code=1)  # retry_on_max (2) spent
        view = await w.view(named)
        assert view.state is TaskState.FAILED and len(view.attempts) == 3
        assert submission_id_for(named, 3) == view.attempts[-1].submission_id

        plain = (await w.commands.submit(ALICE, SPEC.format(extra=""))).task_id
        await _fail(w, plain, 1, exit_code=1)
        assert isinstance((await w.events(plain))[-1], TaskFailed)
    finally:
        await w.commands.close()
        await w.store.close()
