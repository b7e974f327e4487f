"""A driver's word that its attempt's output passed its budget becomes
``AttemptOutputTruncated``: once while it runs, once with the whole count before its end;
and a command the driver stopped for its output fails as the user's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from argus.events import AttemptEnded, AttemptOutputTruncated, FailureKind
from argus.rayjobs.reports import ExitReport, OutputSummary, ProgressTracker, write_exit
from tests.reactor.test_turn_on_fake import World, make_world

MiB = 1 << 20


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, progress_check_s=1.0, progress_record_s=10.0)
    yield w
    await w.commands.close()
    await w.store.close()


def _over(total: int, stopped: bool = False) -> OutputSummary:
    return OutputSummary(budget_bytes=8 * MiB, total_bytes=total, kept_bytes=8 * MiB, dropped_bytes=total - 8 * MiB,
                         stopped=stopped)


async def test_truncation_is_recorded_once_while_running_and_once_at_the_end(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    tracker = ProgressTracker(world.config.shared_root, sid, lambda: world.clock.now)
    for total in (9 * MiB, 20 * MiB, 40 * MiB):  # the driver's reports as the output grows
        tracker.output = _over(total)
        world.clock.advance(11)
        tracker.tick()
        await world.turn()
    seen = [e for e in await world.events(task_id) if isinstance(e, AttemptOutputTruncated)]
    assert [(e.total_bytes, e.final) for e in seen] == [(9 * MiB, False)]
    assert (await world.view(task_id)).attempts[-1].output_dropped == MiB
    write_exit(world.config.shared_root, ExitReport(submission_id=sid, exit_code=0, exited_at=world.clock.now,
                                                    output=_over(50 * MiB)))
    await world.turn()
    events = await world.events(task_id)
    seen = [e for e in events if isinstance(e, AttemptOutputTruncated)]
    assert [(e.total_bytes, e.dropped_bytes, e.final) for e in seen] == [(9 * MiB, MiB, False),
                                                                         (50 * MiB, 42 * MiB, True)]
    ended = next(i for i, e in enumerate(events) if isinstance(e, AttemptEnded))
    assert events[ended - 1] is not None and isinstance(events[ended - 1], AttemptOutputTruncated)
    view = await world.view(task_id)
    assert (view.attempts[-1].output_bytes, view.attempts[-1].output_final) == (50 * MiB, True)


async def test_a_command_stopped_for_its_output_is_a_user_error(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    world.ray.jobs[sid].logs = ("yyyy\n[argus.driver] stopping the command: its output passed its budget "
                                "(v2.output.on_exceed: stop; a spec may raise its output_budget)\n")
    write_exit(world.config.shared_root, ExitReport(submission_id=sid, exit_code=143, exited_at=world.clock.now,
                                                    output=_over(9 * MiB, stopped=True)))
    await world.turn()
    events = await world.events(task_id)
    ended = next(e for e in events if isinstance(e, AttemptEnded))
    assert ended.failure_kind is FailureKind.USER_ERROR and "output passed its budget" in ended.evidence
    assert next(e for e in events if isinstance(e, AttemptOutputTruncated)).stopped
