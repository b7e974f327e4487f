"""Real Ray, real processes: `argus node head` + two `argus node worker` on one host.

The tests share one cluster and run in file order: join, bad discovery records, raylet
death, head death and restart. Timings are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import msgspec
import pytest

from argus.nodepool import make_head_record, read_head_record, write_head_record
from tests.nodepool.cluster import cmdline, descendants, find_descendant, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]

JOIN_TIMEOUT_S = 150.0


def _ray_child(watchdog_pid: int) -> int:
    # `ray start`, or `python -m argus.confine.raystart … -- start` on a confining node
    return find_descendant(watchdog_pid, " start --")


def _process_named(root_pid: int, exe_suffix: str) -> int:
    for pid in descendants(root_pid):
        argv0 = cmdline(pid).split(" ", 1)[0]
        if argv0.endswith(exe_suffix):
            return pid
    raise LookupError(f"no {exe_suffix} under {root_pid}")


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def pool(make_cluster):
    c = make_cluster("np-test")
    head = c.start("head", c.head_env(), "head")
    workers = [c.start("worker", c.worker_env(f"w{i}"), f"w{i}") for i in (1, 2)]
    # A third worker reads a discovery file the test writes by hand.
    private = c.root / "private" / "head.json"
    private.parent.mkdir()
    private.write_text('{"cluster_name": "np-test", "head_ip": ')  # a torn, partial write
    w3 = c.start("worker", c.worker_env("w3", ARGUS_HEAD_IP_FILE=str(private)), "w3")
    return SimpleNamespace(c=c, head=head, workers=workers, w3=w3, private=private)


def test_head_publishes_and_both_workers_join(pool):
    c = pool.c
    try:
        nodes = wait_for(lambda: len(c.worker_nodes()) == 2 and c.worker_nodes(),
                         JOIN_TIMEOUT_S, "two worker nodes")
    except AssertionError as exc:  # say why (CI once saw one worker never join, not reproduced)
        tails = "\n".join(f"--- {w.log_path.name} (exit {w.proc.poll()}):\n{w.log_text()[-3000:]}" for w in pool.workers)
        raise AssertionError(f"{exc}; joined: {len(c.worker_nodes())}\n{tails}") from exc
    for node in nodes.values():
        assert node.resources_total["worker_node"] == 100
        assert node.resources_total.get("CPU") == 1
        assert not node.resources_total.get("GPU")
    (head_node,) = c.head_nodes()
    # Training must never land on the head.
    assert not {"CPU", "GPU", "worker_node"} & set(head_node.resources_total)

    result = read_head_record(c.head_file, cluster_name="np-test")
    assert result.usable, result
    rec = result.record
    assert rec.gcs_port == c.head_ports["port"]
    assert rec.job_server_url == f"http://{rec.head_ip}:{c.head_ports['dashboard-port']}"
    assert rec.expires_at - rec.updated_at == timedelta(seconds=8)
    for worker in pool.workers:
        assert f"head_id={rec.head_id}" in worker.log_text()
        assert worker.proc.poll() is None


def test_bad_records_make_a_worker_wait_and_a_fresh_one_lets_it_join(pool):
    c, w3, private = pool.c, pool.w3, pool.private
    real = read_head_record(c.head_file).record
    assert real is not None

    wait_for(lambda: "reason=garbage" in w3.log_text(), 20, "w3 to report garbage")
    private.write_bytes(b"\x00\xff not json at all")
    time.sleep(2.5)  # a few polls on garbage
    assert w3.proc.poll() is None, "the watchdog crashed on a garbage record"

    past = datetime.now(timezone.utc) - timedelta(seconds=120)
    expired = make_head_record(cluster_name="np-test", head_ip=real.head_ip,
                               gcs_port=real.gcs_port, dashboard_port=real.dashboard_port,
                               ttl_s=60, head_id=real.head_id, now=past)
    write_head_record(private, expired)
    wait_for(lambda: "reason=expired" in w3.log_text(), 20, "w3 to report expired")
    time.sleep(2.5)
    assert w3.proc.poll() is None
    assert "ray_start" not in w3.log_text(), "joined a head whose record had expired"
    assert not any(" start --" in cmdline(p) for p in descendants(w3.pid))  # no `ray start` of any form
    assert len(c.worker_nodes()) == 2

    write_head_record(private, msgspec.structs.replace(
        real, expires_at=datetime.now(timezone.utc) + timedelta(seconds=300)))
    wait_for(lambda: len(c.worker_nodes()) == 3, JOIN_TIMEOUT_S, "w3 to join")

    # supervisord stops a program with SIGTERM to its pid: the watchdog must take its
    # whole Ray process group down with it and exit.
    child = _ray_child(w3.pid)
    os.kill(w3.pid, signal.SIGTERM)
    assert w3.proc.wait(timeout=30) == 0
    wait_for(lambda: _group_gone(child), 10, "w3's Ray process group to be gone")
    wait_for(lambda: len(c.worker_nodes()) == 2, 60, "w3's node to leave")
    assert "ray_stopped" in w3.log_text()


def test_raylet_death_brings_the_node_back(pool):
    c, w1 = pool.c, pool.workers[0]
    before = set(c.worker_nodes())
    assert len(before) == 2
    starts = w1.log_text().count("INFO ray_start ")
    raylet = _process_named(w1.pid, "/raylet")
    t0 = time.monotonic()
    os.kill(raylet, signal.SIGKILL)

    wait_for(lambda: set(c.worker_nodes()) - before, 90, "a new worker node")
    elapsed = time.monotonic() - t0
    print(f"\nFIGURE raylet death -> node back: {elapsed:.1f}s (fast test settings)")
    wait_for(lambda: len(c.worker_nodes()) == 2, 60, "the dead node to be marked dead")
    log = w1.log_text()
    assert "WARNING ray_exited" in log
    assert log.count("INFO ray_start ") == starts + 1
    assert pool.workers[1].log_text().count("INFO ray_start ") >= 1


def test_head_death_restart_and_workers_rejoin(pool):
    c, head = pool.c, pool.head
    old = read_head_record(c.head_file).record
    before = set(c.worker_nodes())
    assert len(before) == 2
    gcs = _process_named(head.pid, "/gcs_server")
    t_kill = time.monotonic()
    os.kill(gcs, signal.SIGKILL)

    rc = head.proc.wait(timeout=60)
    assert rc != 0, "the head command must exit non-zero when Ray dies"
    assert "ray_exited" in head.log_text()
    # The dead head withdrew its record: workers wait instead of dialling a dead GCS.
    assert read_head_record(c.head_file).reason == "expired"

    # The test is the supervisor: start the same command with the same environment, and
    # again (after 1 s, like supervisord) whenever it exits.
    t_restart = time.monotonic()
    starts = 0

    def new_record():
        nonlocal starts
        if pool.head.proc.poll() is not None:
            if starts:
                time.sleep(1.0)
            starts += 1
            pool.head = c.start("head", head.env, f"head-restart-{starts}")
        result = read_head_record(c.head_file)
        return result.usable and result.record.head_id != old.head_id and result.record

    new = wait_for(new_record, 120, "a new head.json")
    t_published = time.monotonic()
    assert (new.head_ip, new.gcs_port) == (old.head_ip, old.gcs_port)

    def rejoined():
        nodes = c.worker_nodes()
        return len(nodes) == 2 and not set(nodes) & before

    wait_for(rejoined, 120, "both workers to rejoin the new head")
    t_done = time.monotonic()
    print(f"\nFIGURE head restart -> all workers rejoined: {t_done - t_restart:.1f}s "
          f"(kill -> rejoined {t_done - t_kill:.1f}s, new head.json -> rejoined "
          f"{t_done - t_published:.1f}s, head starts {starts}; fast test settings)")
    for worker in pool.workers:
        assert worker.proc.poll() is None
        assert f"head_id={new.head_id}" in worker.log_text()
