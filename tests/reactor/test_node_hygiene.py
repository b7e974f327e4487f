"""Node hygiene (``argus.nodepool.keeper``, ``argus.reactor.holds``): real keepers look at
real processes of this host, the real ``Reactor`` on its SQLite log and the fake Ray. A
process left behind by an ended attempt quarantines the node the attempt ran on (not its
neighbour on the same host), a task that needs that node waits with a reason naming it,
and the quarantine lifts once the process is gone. An admin's drain holds a node the same
way until undrained."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.events import HoldKind, NodeHeld, NodeReleased, cluster_stream
from argus.lifecycle import TaskState
from argus.nodepool.keeper import CHECK_S, LiveAttempts, NodeKeeper, parse_pids, raylet_node_id, read_live, write_live
from argus.rayjobs.reports import ExitReport, write_exit
from argus.service.auth import Principal
from tests.reactor.test_turn_on_fake import World, make_world

ADMIN = Principal(user_id="root", is_admin=True, disabled=False, max_priority=1000, may_pin=True)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, nodes=2, gpus=4)
    yield w
    await w.commands.close()
    await w.store.close()


@contextlib.contextmanager
def _process_of(sid: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real process that says it belongs to attempt ``sid`` (as a job's processes do)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                            env={**os.environ, "ARGUS_SUBMISSION_ID": sid}, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def _cluster_events(w: World) -> list[object]:
    return [r.event for r in await w.store.read_stream(cluster_stream)]


async def _look(w: World, keepers: list[NodeKeeper]) -> None:
    """Every keeper looks, then the reactor reads their reports at its next turn."""
    for keeper in keepers:
        keeper.check()
    w.clock.advance(CHECK_S)
    await w.turn()


async def test_a_leftover_quarantines_its_node_until_it_is_gone(world: World) -> None:
    w = world
    first = await w.submit(nnodes=1, gpus=4)
    sid = await w.running(first)
    placed = (await w.view(first)).attempts[-1].node_ids[0]
    other = next(n.node_id for n in w.ray.nodes if n.node_id != placed)
    keepers = [NodeKeeper(w.config.shared_root, node, grace_s=10.0, clock=w.clock, nvidia_smi="") for node in
               (placed, other)]
    live = read_live(w.config.shared_root)
    assert live is not None and sid in live.submission_ids  # the reactor published it
    with _process_of(sid) as leftover:
        await _look(w, keepers)
        assert not [e for e in await _cluster_events(w) if isinstance(e, NodeHeld)]  # it is live
        w.ray.succeed(sid)
        await w.turn(2)
        assert (await w.view(first)).state is TaskState.SUCCEEDED
        await _look(w, keepers)  # gone from the live set, within its grace
        w.clock.advance(10)
        await _look(w, keepers)
        held = [e for e in await _cluster_events(w) if isinstance(e, NodeHeld)]
        assert [(e.node_id, e.kind) for e in held] == [(placed, HoldKind.QUARANTINE)], held  # not its neighbour
        assert f"pid {leftover.pid}" in held[0].reason and sid in held[0].reason
        both = await w.submit(nnodes=2, gpus=4)
        await w.turn()
        view = await w.view(both)
        assert view.state.is_waiting() and f"node {placed}" in view.wait_message and "quarantined" in view.wait_message
    await _look(w, keepers)
    released = [e for e in await _cluster_events(w) if isinstance(e, NodeReleased)]
    assert [(e.node_id, e.kind) for e in released] == [(placed, HoldKind.QUARANTINE)]
    await w.turn()
    assert (await w.view(both)).state is TaskState.SUBMITTED


async def test_an_admin_drains_and_undrains_a_node(world: World) -> None:
    w = world
    node = w.ray.nodes[0].node_id
    held = await w.commands.hold_node(ADMIN, node, True, "disk errors on /dev/nvme1")
    assert [(h.node_id, h.kind, h.by) for h in held.holds] == [(node, HoldKind.DRAIN, "root")]
    await w.commands.hold_node(ADMIN, node, True, "again")  # changes nothing
    both = await w.submit(nnodes=2, gpus=4)
    await w.turn()
    view = await w.view(both)
    assert view.state.is_waiting() and "drained by root (disk errors on /dev/nvme1)" in view.wait_message, view
    alone = await w.submit(nnodes=1, gpus=4)  # the other node takes it
    await w.turn()
    assert (await w.view(alone)).attempts[-1].node_ids != (node,)
    assert not (await w.commands.hold_node(ADMIN, node, False)).holds
    assert len([e for e in await _cluster_events(w) if isinstance(e, (NodeHeld, NodeReleased))]) == 2


def test_a_stale_live_set_judges_nothing(tmp_path: Path) -> None:
    keeper = NodeKeeper(str(tmp_path), "n0", grace_s=0.0, nvidia_smi="")
    assert keeper.check() is None  # no live set at all
    assert not (tmp_path / "ray" / "nodes").exists()


def test_the_node_id_is_read_from_the_raylet_below_the_ray_child() -> None:
    """``ray start --block`` starts the raylet with ``--node_id=<hex>``; a stand-in named
    raylet, one level down, is found."""
    padding = " ".join(f"--option-{i}=value" for i in range(40))  # a raylet's arguments run long
    stand_in = (f"(exec -a /opt/ray/raylet {sys.executable} -c 'import time; time.sleep(30)' {padding} "
                "--node_id=ab12); true")
    parent = subprocess.Popen(["bash", "-c", stand_in], start_new_session=True)
    try:
        found = None
        for _ in range(200):
            found = raylet_node_id(parent.pid)
            if found:
                break
            time.sleep(0.05)
        assert found == "ab12"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_gpu_holders_are_read_from_nvidia_smi_lines() -> None:
    assert parse_pids("1234\n  99 \n\nNo running processes found\n") == [1234, 99]


async def test_a_node_an_attempt_ended_on_admits_only_once_its_keeper_finds_it_clear(world: World) -> None:
    """Between an attempt's end and the keeper's first look judged after it, and while its
    processes still end there, the node admits nothing (before the grace that would
    quarantine it); then it admits at once."""
    w = world
    first = await w.submit(nnodes=1, gpus=4)
    sid = await w.running(first)
    placed = (await w.view(first)).attempts[-1].node_ids[0]
    keepers = [NodeKeeper(w.config.shared_root, n.node_id, grace_s=30.0, clock=w.clock, nvidia_smi="")
               for n in w.ray.nodes]
    with _process_of(sid) as ending:
        await _look(w, keepers)  # fresh reports: these nodes have keepers to ask
        w.ray.succeed(sid)
        await w.turn(2)
        assert (await w.view(first)).state is TaskState.SUCCEEDED
        both = await w.submit(nnodes=2, gpus=4)
        await w.turn()
        assert (await w.view(both)).state.is_waiting()  # no look since the end yet
        await _look(w, keepers)
        report = keepers[0].check()
        assert report is not None  # (other processes of this host may carry other attempts' ids)
        assert [p.pid for p in report.ending if p.submission_id == sid] == [ending.pid]
        assert not [p for p in report.leftovers if p.submission_id == sid]
        await w.turn()
        assert (await w.view(both)).state.is_waiting(), "admitted while the ended attempt's process ran there"
    await _look(w, keepers)
    assert (await w.view(both)).state is TaskState.SUBMITTED
    assert not [e for e in await _cluster_events(w) if isinstance(e, NodeHeld)]  # cleared within its grace
    assert placed in {n for n in (await w.view(both)).attempts[-1].node_ids}


async def test_a_driver_that_saw_its_host_clear_lets_its_node_admit_at_once(world: World) -> None:
    w = world
    first = await w.submit(nnodes=1, gpus=4)
    sid = await w.running(first)
    keepers = [NodeKeeper(w.config.shared_root, n.node_id, grace_s=30.0, clock=w.clock, nvidia_smi="")
               for n in w.ray.nodes]
    await _look(w, keepers)
    attempt = (await w.view(first)).attempts[-1]
    assert attempt.driver_node_id in attempt.node_ids  # the fake Ray runs the driver on the gang's node
    write_exit(w.config.shared_root, ExitReport(submission_id=sid, exit_code=0, exited_at=w.clock(), host_clean=True))
    w.ray.succeed(sid)
    await w.turn(2)
    both = await w.submit(nnodes=2, gpus=4)
    await w.turn()
    assert (await w.view(both)).state is TaskState.SUBMITTED  # no keeper's look was needed


def test_clearing_is_judged_per_node_from_the_reports() -> None:
    from argus.nodepool.keeper import Leftover, NodeReport
    from argus.reactor.clearing import CLEAR_WAIT_S, EndedAttempt, clearing_nodes

    ended = EndedAttempt(submission_id="t--a1", node_ids=("a", "b"), driver_node_id="a", host_clean=True, left_at=100.0)
    proc = Leftover(pid=7, submission_id="t--a1", command="python -m verl")

    def report(node: str, live_at: float, **kw: Any) -> NodeReport:
        return NodeReport(node_id=node, hostname="h", checked_at=101.0, live_at=live_at, **kw)

    # The driver cleared its host (a); b's keeper has not looked since the end.
    clearing, done = clearing_nodes([ended], {"a": report("a", 90.0), "b": report("b", 90.0)}, 101.0)
    assert set(clearing) == {"b"} and not done
    clearing, done = clearing_nodes([ended], {"b": report("b", 100.0, ending=[proc])}, 101.0)
    assert "pid 7" in clearing["b"] and not done
    assert clearing_nodes([ended], {"b": report("b", 100.0)}, 101.0) == ({}, {"t--a1"})
    assert clearing_nodes([ended], {"b": report("b", 100.0, leftovers=[proc])}, 101.0) == ({}, {"t--a1"})  # quarantined
    assert clearing_nodes([ended], {}, 101.0) == ({}, {"t--a1"})  # no keeper there: nobody to ask
    assert clearing_nodes([ended], {"b": report("b", 90.0)}, 100.0 + CLEAR_WAIT_S + 1) == ({}, {"t--a1"})


def test_a_driver_reports_its_host_clear_only_once_the_attempts_processes_are_gone() -> None:
    from argus.proctable import still_here

    with _process_of("t--a7") as proc:
        assert list(still_here("t--a7", wait_s=0.3)) == [proc.pid]
        assert not still_here("t--a8", wait_s=0.0)  # another attempt's process is not this one's
    assert not still_here("t--a7", wait_s=5.0)


def test_a_gpu_held_by_a_process_of_no_attempt_is_a_leftover(tmp_path: Path) -> None:
    """``nvidia-smi --query-compute-apps=pid --format=csv,noheader`` run as the keeper runs
    it: here a stand-in executable that prints what the real one prints on a GPU host (no
    GPU on this machine), naming a live process that belongs to no attempt."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ \"$1\" = --query-compute-apps=pid ] && [ \"$2\" = --format=csv,noheader ] "
                   f"|| exit 2\necho {holder.pid}\n")
    smi.chmod(0o755)
    try:
        write_live(str(tmp_path), LiveAttempts(written_at=time.time(), submission_ids=[]))
        report = NodeKeeper(str(tmp_path), "n0", nvidia_smi=str(smi)).check()
        assert report is not None
        assert [(p.pid, p.submission_id) for p in report.leftovers] == [(holder.pid, "")]
        assert "time.sleep(600)" in report.leftovers[0].command
    finally:
        holder.kill()
        holder.wait()
