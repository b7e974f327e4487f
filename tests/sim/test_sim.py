"""The simulator: reading a trace as demand, the virtual clock driving the real policy,
and the metrics — on small made-up traces whose outcome is known, and on the real openb
trace (a subset) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from argus.cli import main
from argus.events import Demand
from argus.scheduler import POLICIES
from argus.sim import GangMix, SimSettings, load_openb, measure, simulate

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "openb"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,1,4,A\nn1,32000,1,4,A\n"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _trace(tmp_path: Path, pods: list[tuple[str, int, int, float, float]], nodes: str = NODES) -> tuple[Path, Path]:
    """pods: (name, num_gpu, cpu_milli, arrival, runtime)."""
    p, n = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    p.write_text(HEADER + "".join(f"{name},{cpu},1,{gpus},1000,,LS,Running,{a},{a + r},{a}\n"
                                  for name, gpus, cpu, a, r in pods))
    n.write_text(nodes)
    return p, n


def test_a_trace_reads_as_demand_with_skips_counted(tmp_path: Path) -> None:
    pods, nodes = _trace(tmp_path, [("a", 2, 4000, 0, 10), ("cpu-only", 0, 1000, 1, 5), ("huge", 8, 1000, 2, 5)])
    with pods.open("a") as f:
        f.write("no-end,1,1,1,1000,,LS,Running,3,,\n")
    trace = load_openb(pods, nodes)
    assert [(t.task_id, t.demand.n_gpus_per_node, t.demand.cpus_per_node, t.runtime) for t in trace.tasks] == [
        ("a", 2, 4.0, 10.0)]
    assert (trace.skipped_no_gpu, trace.skipped_no_runtime, trace.skipped_too_big) == (1, 1, 1)
    assert trace.tasks[0].user == load_openb(pods, nodes).tasks[0].user  # deterministic


def test_strict_fifo_holds_the_line_and_backfill_lets_small_tasks_pass(tmp_path: Path) -> None:
    # a runs on n0 for 100 s; the gang g (2 nodes x 4) must wait for it; s (1 GPU) came after g.
    pods, nodes = _trace(tmp_path, [("a", 4, 1000, 0, 100), ("g", 4, 1000, 1, 50), ("s", 1, 1000, 2, 10)])
    trace = load_openb(pods, nodes)
    trace = msgspec.structs.replace(trace, tasks=[
        msgspec.structs.replace(t, demand=Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=1.0))
        if t.task_id == "g" else t for t in trace.tasks])
    starts = {o.task_id: o.start for o in simulate(trace, "fifo").outcomes}
    assert starts == {"a": 0.0, "g": 100.0, "s": 150.0}  # s waits behind the gang
    starts = {o.task_id: o.start for o in simulate(trace, "fifo", SimSettings(backfill=True)).outcomes}
    assert starts == {"a": 0.0, "g": 100.0, "s": 2.0}  # s passes (and ends before a does)


def test_busy_utilisation_is_also_given_until_the_last_arrival(tmp_path: Path) -> None:
    # n1 is the only node with the CPUs for "long" and "big"; "long" holds it for 1000 s.
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,1,4,A\nn1,64000,1,4,A\n"
    pods, nodes_csv = _trace(tmp_path, [("long", 4, 40000, 0, 1000), ("other", 4, 1000, 0, 20),
                                        ("waits", 4, 1000, 5, 10), ("big", 4, 40000, 10, 10)], nodes)
    m = measure(simulate(load_openb(pods, nodes_csv), "reserve-backfill"))
    # 5-10 s: every GPU in use while "waits" waits. After the last arrival the cluster
    # drains and "big" waits ~990 s for its one node with n0 idle.
    assert m.contended_utilization_arriving == pytest.approx(1.0)
    assert m.contended_utilization < 0.55


def test_no_node_is_ever_overcommitted_on_the_real_trace() -> None:
    if not OPENB.is_dir():
        pytest.skip("the openb trace is not next to this checkout")
    trace = load_openb(OPENB / "openb_pod_list_default.csv", OPENB / "openb_node_list_gpu_node.csv",
                       nodes_subset=20, load=1.2, limit=600, gang_mix=GangMix.parse("0.1:2x2"))
    result = simulate(trace, "fifo", SimSettings(backfill=True))
    events = sorted([(o.start, o.gpus) for o in result.outcomes if o.start is not None]
                    + [(o.end, -o.gpus) for o in result.outcomes if o.end is not None], key=lambda e: (e[0], e[1]))
    in_use = 0
    for _, delta in events:
        in_use += delta
        assert in_use <= result.capacity_gpus
    m = measure(result)
    assert m.never_admitted == 0 and 0 < m.gpu_utilization <= 1 and 0 < m.jain_fairness <= 1
    assert m.wait_p50_s <= m.wait_p90_s <= m.wait_p99_s <= m.wait_max_s


def test_load_compresses_arrivals_to_the_offered_load(tmp_path: Path) -> None:
    pods, nodes = _trace(tmp_path, [(f"t{i}", 1, 1000, i * 100, 50) for i in range(11)])
    trace = load_openb(pods, nodes, load=0.5)
    span = trace.tasks[-1].arrival - trace.tasks[0].arrival
    offered = sum(t.runtime * t.demand.total_gpus for t in trace.tasks) / (8 * span)
    assert offered == pytest.approx(0.5)


def test_the_cli_compares_every_policy_on_the_real_trace() -> None:
    if not OPENB.is_dir():
        pytest.skip("the openb trace is not next to this checkout")
    args = ["sim", "--trace-pods", str(OPENB / "openb_pod_list_default.csv"),
            "--trace-nodes", str(OPENB / "openb_node_list_gpu_node.csv"), "--nodes-subset", "20",
            "--load", "1.0", "--limit", "400", "--gang-mix", "0.05:2x4", "--policy", "all"]
    human = CliRunner().invoke(main, args)
    assert human.exit_code == 0, human.output
    assert "wait p50" in human.output and "fifo" in human.output and "priority" in human.output
    out = CliRunner().invoke(main, [*args, "--json"])
    doc = json.loads(out.output)
    assert doc["tasks"] == 400 and {p["policy"] for p in doc["policies"]} == set(POLICIES)
    refused = CliRunner().invoke(main, [*args[:-2], "--policy", "nonsense"])
    assert refused.exit_code == 2 and "unknown policy" in refused.output


def test_a_run_without_contention_is_called_so(tmp_path: Path) -> None:
    """Every wait 0 under every policy: the comparison says nothing, and the CLI says that."""
    pods, nodes = _trace(tmp_path, [(f"t{i}", 1, 1000, i * 100, 50) for i in range(5)])
    args = ["sim", "--trace-pods", str(pods), "--trace-nodes", str(nodes), "--policy", "fifo", "--policy", "priority"]
    quiet = CliRunner().invoke(main, args)
    assert quiet.exit_code == 0, quiet.output
    assert "no task waited under any policy" in quiet.output
    pods, nodes = _trace(tmp_path, [(f"t{i}", 4, 1000, i, 500) for i in range(5)])  # they queue
    busy = CliRunner().invoke(main, ["sim", "--trace-pods", str(pods), "--trace-nodes", str(nodes), "--policy", "fifo"])
    assert busy.exit_code == 0 and "no task waited" not in busy.output, busy.output


def test_a_gang_mix_turns_a_deterministic_share_into_gangs(tmp_path: Path) -> None:
    pods, nodes = _trace(tmp_path, [(f"t{i}", 1, 1000, i, 5) for i in range(200)])
    mixed = load_openb(pods, nodes, gang_mix=GangMix.parse("0.25:2x4"), seed=3)
    gangs = [t.task_id for t in mixed.tasks if t.demand.nnodes == 2]
    assert 30 < len(gangs) < 70 and all(t.demand.n_gpus_per_node == 4 for t in mixed.tasks if t.demand.nnodes == 2)
    assert gangs == [t.task_id for t in load_openb(pods, nodes, gang_mix=GangMix.parse("0.25:2x4"), seed=3).tasks
                     if t.demand.nnodes == 2]
    with pytest.raises(ValueError, match="SHARE:NODESxGPUS"):
        GangMix.parse("0.1:two")


def test_what_if_on_our_own_history(tmp_path: Path) -> None:
    """--from-db: the tasks, shapes and actual run times of a real Argus log (written
    through the store with its projections), on the nodes it last saw."""
    import asyncio

    from argus.events import cluster_stream, task_stream
    from argus.sim.history import load_history
    from argus.store import AppendBatch
    from projections import open_store
    from tests.events import factories as f

    db = tmp_path / "argus.sqlite3"

    async def write() -> None:
        store = await open_store(db, synchronous="OFF")
        try:
            batches = [AppendBatch(stream=cluster_stream, expected_version=None,
                                   events=[f.capacity({"n0": 8.0, "n1": 8.0})])]
            for i in range(6):  # 4 GPUs each, 100 s each
                tid, at = f"t{i}", f.T0 + i
                batches.append(AppendBatch(stream=task_stream(tid), expected_version=0, owner=f"u{i % 2}", events=[
                    f.submitted(tid, f"u{i % 2}", at=at), f.starting(tid, at=at), f.attempt_submitted(tid, at=at),
                    f.running(tid, at=at + 1), f.ended(tid, at=at + 101), f.succeeded(tid, at=at + 101)]))
            batches.append(AppendBatch(stream=task_stream("never"), expected_version=0, owner="u0",
                                       events=[f.submitted("never", "u0", at=f.T0 + 9)]))
            await store.append_batches(batches)
        finally:
            await store.close()

    asyncio.run(write())
    trace = load_history(db)
    assert [t.task_id for t in trace.tasks] == [f"t{i}" for i in range(6)]
    assert all(t.runtime == 100.0 and t.demand.total_gpus == 4 for t in trace.tasks)
    assert trace.skipped_no_runtime == 1 and [n.gpus for n in trace.nodes] == [8.0, 8.0]
    waits = sorted(o.start - o.arrival for o in simulate(trace, "fifo").outcomes)  # type: ignore[operator]
    assert waits == [0, 0, 0, 0, 96, 96]  # four fit at once; the fifth and sixth wait for the first two
    out = CliRunner().invoke(main, ["sim", "--from-db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["tasks"] == 6


def test_fgd_mode_is_deterministic_and_bounded(tmp_path: Path) -> None:
    from argus.sim.fgd import fgd

    pods, nodes = _trace(tmp_path, [("one", 1, 1000, 0, 5), ("three", 3, 1000, 1, 5), ("four", 4, 1000, 2, 5)])
    trace = load_openb(pods, nodes)
    first = fgd(trace, seed=5)
    assert first == fgd(trace, seed=5)  # same seed, same sample, same numbers
    assert [r.placement for r in first] == ["random", "bestfit", "argus", "fragmentation"]
    for r in first:
        assert 0 < r.allocated_at_100 <= r.allocated_at_130 <= 1
    # best fit packs the 3-GPU tasks where a 1-GPU task already is: never worse than random here
    by = {r.placement: r for r in first}
    assert by["bestfit"].allocated_at_130 >= by["random"].allocated_at_130


def test_a_long_run_says_where_it_is(tmp_path: Path) -> None:
    pods, nodes = _trace(tmp_path, [(f"t{i}", 1, 1000, i * 10, 25) for i in range(400)])
    seen: list[tuple[float, int, int]] = []
    result = simulate(load_openb(pods, nodes), "fifo", progress=lambda now, started, total: seen.append(
        (now, started, total)))
    assert seen and all(total == 400 for _, _, total in seen)
    assert [s for _, s, _ in seen] == sorted(s for _, s, _ in seen) and seen[-1][1] <= len(result.outcomes)
