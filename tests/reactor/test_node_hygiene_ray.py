"""Node hygiene on real Ray: a job that leaves a process behind (``setsid``: out of its
driver's process group, which the driver kills when the command exits) quarantines the
nodes it ran on (its gang's, and its driver's where Ray put that elsewhere), as the nodes'
real keepers report it; a task that needs them waits with a reason naming them; the
quarantine lifts once the process ends, and the task runs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from argus import proctable
from argus.events import HoldKind, NodeHeld, NodeReleased, cluster_stream
from argus.lifecycle import TaskState
from argus.nodepool.keeper import NodeKeeper
from tests.reactor.harness import submit_task, task_view, toy_command, unique_id, wait_state
from tests.reactor.test_reactor_ray import DONE, reactor_on

# The command waits until the sleep is out of its process group (which its driver kills
# the moment the command exits): the marker file is made after ``setsid``, never before.
LEAK = ("setsid sh -c 'touch leak.ready; exec sleep 600' </dev/null >/dev/null 2>&1 & "
        "while [ ! -e leak.ready ]; do sleep 0.1; done; echo left a sleep behind")


def _keep(keepers: list[NodeKeeper], stop: threading.Event) -> None:
    """The nodes' keepers, as ``argus node worker`` runs them (here every half second)."""
    while not stop.wait(0.5):
        for keeper in keepers:
            keeper.check()


def _driver_log(shared: Path, sid: str) -> str:
    return next(shared.glob(f"users/*/jobs/{sid}/driver.log")).read_text()


async def _cluster_events(store: Any) -> list[Any]:
    return [r.event for r in await store.read_stream(cluster_stream)]


async def _until(what: str, check: Any, timeout_s: float) -> Any:
    for _ in range(int(timeout_s * 10)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


async def test_a_process_left_behind_quarantines_its_node_until_it_ends(ray_cluster: Any, tmp_path: Path) -> None:
    async with reactor_on(ray_cluster, tmp_path) as r:
        store, shared = r.store, r.shared
        keepers = [NodeKeeper(str(shared), node, grace_s=5.0, nvidia_smi="")
                   for node in ray_cluster.alive_worker_node_ids()]
        stop = threading.Event()
        watcher = threading.Thread(target=_keep, args=(keepers, stop), daemon=True)
        watcher.start()
        leaked: list[int] = []
        try:
            first = await submit_task(store, unique_id("leak"), nnodes=1, gpus=4, command=LEAK)
            view = await wait_state(store, first, DONE, timeout_s=90)
            assert view.state is TaskState.SUCCEEDED, (view.error_summary, view.attempts)
            sid, placed = view.attempts[-1].submission_id, view.attempts[-1].node_ids[0]
            # Where it ran: its gang's node, and its driver's, which Ray may put on another
            # node. On one host every keeper sees the sleep; only those nodes are judged.
            ran_on = {placed, view.attempts[-1].driver_node_id}
            # Ray's job supervisor of the attempt may linger a moment: the sleep stays.
            leaked = [pid for pid in proctable.attempt_processes(only=sid) if "sleep 600" in proctable.command_line(pid)]
            assert len(leaked) == 1, {p: proctable.command_line(p) for p in proctable.attempt_processes(only=sid)}
            assert "still run on this host" in _driver_log(shared, sid)  # its driver saw the sleep stay

            async def quarantined() -> list[NodeHeld]:
                return [e for e in await _cluster_events(store) if isinstance(e, NodeHeld)]
            held = await _until("quarantine", quarantined, 30)
            await asyncio.sleep(6)  # a keeper's report a turn later would add its node here
            held = await quarantined()
            assert {e.node_id for e in held} == ran_on and {e.kind for e in held} == {HoldKind.QUARANTINE}, held
            assert all(f"pid {leaked[0]} (sleep 600)" in e.reason for e in held), held

            both = await submit_task(store, unique_id("after"), nnodes=2, gpus=4, command=toy_command(
                shared, "alice", nnodes=2, gpus=4, steps=2))

            async def told() -> Any:
                v = await task_view(store, both)
                # messages name a node by its address and the start of its id (node_label)
                return v if v is not None and f"node {placed[:8]}" in v.wait_message else None
            waiting = await _until("a wait naming the node", told, 30)
            assert "quarantined" in waiting.wait_message and str(leaked[0]) in waiting.wait_message
            for pid in leaked:
                os.kill(pid, signal.SIGKILL)
            view = await wait_state(store, both, DONE, timeout_s=120)
            assert view.state is TaskState.SUCCEEDED, (view.error_summary, view.attempts)
            # Ray's own job plumbing (its supervisor's `while kill -s 0` watchdog shell and that
            # shell's `sleep`) is never counted as left behind. (The job's Ray workers may
            # still be ending past the driver's 3 s on a loaded host: not asserted.)
            said = _driver_log(shared, view.attempts[-1].submission_id)
            assert "kill -s 0" not in said and "sleep 1)" not in said, said[-600:]
            released = [e for e in await _cluster_events(store) if isinstance(e, NodeReleased)]
            assert {e.node_id for e in released} == ran_on and len(released) == len(ran_on), released
        finally:
            stop.set()
            watcher.join(5)
            for pid in leaked:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # The next test's reactor must not read these (stale after a minute anyway).
            shutil.rmtree(shared / "ray" / "nodes", ignore_errors=True)
