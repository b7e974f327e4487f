"""A planned restart costs no run its place: the operator's stop (``argus up``'s Ctrl-C)
records each running attempt as interrupted; when Argus is back and Ray has no such job,
the attempt ends INTERRUPTED (not CLUSTER_LOST), is retried at once and not counted, and
goes before a task that the policy would otherwise have put first."""

from __future__ import annotations

from pathlib import Path

from argus.events import AttemptEnded, AttemptInterrupted, FailureKind, RetryScheduled
from argus.lifecycle import TaskState
from argus.service.interrupt import interrupt_running
from tests.reactor.test_turn_on_fake import ALICE, make_world


async def test_an_interrupted_run_resumes_first_and_at_once(tmp_path: Path) -> None:
    w = await make_world(tmp_path, policy="priority")  # type: ignore[arg-type]
    try:
        big = await w.submit(nnodes=1, gpus=8)
        sid = await w.running(big)
        spec = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 2\npriority: 5\n"
                "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=2\n")
        small = (await w.commands.submit(ALICE, spec)).task_id  # ahead of big in the priority order
        await w.turn()
        assert (await w.view(small)).state.is_waiting()

        stopped = await interrupt_running(w.store, "operator", "argus up was stopped")
        assert [t.task_id for t in stopped] == [big]
        assert not await interrupt_running(w.store, "operator", "again")  # recorded once
        w.ray.forget(sid)  # the stack's Ray went down with it; a new one knows no such job
        await w.turn(3)
        events = await w.events(big)
        interrupted = next(e for e in events if isinstance(e, AttemptInterrupted))
        ended = next(e for e in events if isinstance(e, AttemptEnded))
        retry = next(e for e in events if isinstance(e, RetryScheduled))
        assert interrupted.by == "operator" and ended.failure_kind is FailureKind.INTERRUPTED
        assert "argus up was stopped" in ended.evidence and retry.delay_s == 0.0
        view = await w.view(big)
        assert len(view.attempts) == 2 and view.state is TaskState.SUBMITTED, view.state  # first, at once
        assert (await w.view(small)).state.is_waiting()  # 2 GPUs would have kept big out
    finally:
        await w.commands.close()
        await w.store.close()
