"""A user's cap on GPUs held at once (issue 36, governance), through the real pieces: an
admin sets it with ``Commands.set_limits`` (a ``UserLimitsSet`` in the SQLite log), the
reactor folds it, and its turn keeps the user's next task waiting with ``user_gpu_limit``
while other users' work goes ahead; a reactor started later reads the cap from the users
projection; raising the cap lets the task start."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from argus.config import SchedulerConfig
from argus.events import TaskDeferred
from argus.lifecycle import TaskState
from argus.reactor.state import ReactorState
from argus.service.auth import Principal
from argus.service.commands import CommandError
from argus.service.limits import UserLimits
from argus.views.reactor_start import read_reactor_start
from tests.reactor.test_turn_on_fake import World, make_world

ADMIN = Principal(user_id="admin", is_admin=True, disabled=False)
BOB = Principal(user_id="bob", is_admin=False, disabled=False)
CAROL = Principal(user_id="carol", is_admin=False, disabled=False)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, nodes=2, gpus=4)
    for who in (ADMIN, BOB, CAROL):
        await w.commands.create_user("system", who.user_id, is_admin=who.is_admin)
    yield w
    await w.commands.close()
    await w.store.close()


async def submit(w: World, who: Principal, gpus: int) -> str:
    spec = (f"kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: {gpus}\n"
            f"command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node={gpus}\n")
    return (await w.commands.submit(who, spec)).task_id


async def test_a_capped_users_task_waits_while_others_go_and_starts_when_the_cap_is_raised(world: World) -> None:
    w = world
    await w.commands.set_limits(ADMIN, "bob", UserLimits(max_gpus=3))
    first = await submit(w, BOB, 2)
    second = await submit(w, BOB, 2)  # 2 + 2 > 3
    other = await submit(w, CAROL, 4)  # behind bob's in line, another user: not held back
    await w.turn()
    assert (await w.view(first)).state is TaskState.SUBMITTED
    assert (await w.view(other)).state is TaskState.SUBMITTED
    deferred = (await w.events(second))[-1]
    assert isinstance(deferred, TaskDeferred) and deferred.reason == "user_gpu_limit"
    assert "holds 2 of the 3 GPUs their cap allows" in deferred.message
    assert (await w.view(second)).state is TaskState.PENDING_RESOURCES

    # A reactor started now (a restart) reads the cap from the users projection.
    state = ReactorState.load(await w.store.read_snapshot(lambda db: read_reactor_start(db, 3600.0)), 3600.0)
    assert state.gpu_caps == {"bob": 3.0}

    await w.commands.set_limits(ADMIN, "bob", UserLimits(max_gpus=0))  # no cap
    await w.turn()
    assert (await w.view(second)).state is TaskState.SUBMITTED


async def test_admins_are_not_capped_and_a_gang_above_the_cap_is_refused_at_submit(world: World) -> None:
    w = world
    await w.commands.set_limits(ADMIN, "admin", UserLimits(max_gpus=1))
    await w.commands.set_limits(ADMIN, "bob", UserLimits(max_gpus=2))
    with pytest.raises(CommandError) as refused:
        await submit(w, Principal(user_id="bob", is_admin=False, disabled=False, max_gpus=2), 4)
    assert refused.value.status == 403 and "above your cap of 2 GPUs" in refused.value.detail
    assert "argus users set bob --max-gpus" in refused.value.detail
    task = await submit(w, ADMIN, 4)
    await w.turn()
    assert (await w.view(task)).state is TaskState.SUBMITTED
    # A state folded from the whole log agrees: only bob is capped.
    state = ReactorState(SchedulerConfig().fairshare.half_life_s)
    for rec in await w.store.read(0, 10_000):
        state.fold(rec)
    assert state.gpu_caps == {"bob": 2.0}
