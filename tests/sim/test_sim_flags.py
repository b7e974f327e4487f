"""``argus sim`` over every documented combination of its flags, on a small trace the test
makes (openb's format: GPU models, shared GPUs, pods too big for the cluster): each run
must finish and print its table. The grid is the one that crashed before the turn was
written once (priority with preemption, half the tasks pinned, 30-minute checkpoints:
``CheckpointObserved is not allowed in state SUBMITTED``), crossed with every other flag.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.cli import main

MODELS = ("V100", "A100", "T4")


def make_trace(folder: Path, seed: int, pods: int = 90, nodes: int = 8) -> tuple[Path, Path]:
    """An openb-format pod list and node list: 1-8 GPU pods (some shared, some naming a
    model), minutes to hours long, arriving over a day."""
    rng = random.Random(seed)
    node_rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for n in range(nodes):
        node_rows.append(f"node-{n:02d},{rng.choice([32, 64, 96])}000,262144,{rng.choice([2, 4, 8])},{MODELS[n % 3]}")
    pod_rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                "scheduled_time"]
    at = 0
    for p in range(pods):
        at += rng.randint(0, 1800)
        run = rng.choice([60, 600, 3600, 4 * 3600, 12 * 3600])
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        milli = rng.choice([1000, 1000, 500])
        spec = rng.choice(["", "", "", "A100", "V100|T4"])
        pod_rows.append(f"pod-{p:03d},{rng.choice([4, 8, 16, 32])}000,8192,{gpus},{milli},{spec},LS,Running,"
                        f"{at},{at + run},{at}")
    pods_csv, nodes_csv = folder / f"pods-{seed}.csv", folder / f"nodes-{seed}.csv"
    pods_csv.write_text("\n".join(pod_rows) + "\n")
    nodes_csv.write_text("\n".join(node_rows) + "\n")
    return pods_csv, nodes_csv


# The flags of `argus sim --help`, each with the values worth trying; the core grid is
# crossed in full, every other flag is tried against both ends of it.
CORE = {
    "--preemption": [None, ""],
    "--checkpoint-every": ["0", "1800"],
    "--preemptible": ["0", "0.5", "1.0"],
    "--priority-mix": [None, "0.2:10"],
}
OTHERS: list[list[str]] = [
    ["--backfill"],
    ["--gang-mix", "0.1:2x4,0.05:3x2"],
    ["--load", "1.5"],
    ["--nodes-subset", "5"],
    ["--limit", "40"],
    ["--min-run", "0"],
    ["--max-preemptions", "2"],
    ["--move-after", "0"],
    ["--move-after", "600"],
    ["--max-wait", "0"],
    ["--eta", "4"],
    ["--placement", "fragmentation"],
    ["--estimates", "exact"],
    ["--placement-lag", "120"],
    ["--gpu-spec", "ignore"],
    ["--gpu-model-mix", "0.33:0.1"],
    ["--no-reserve-per-model", "--no-minor-models-last"],
    ["--evict-after", "600"],
    ["--json"],
]


def _core_args() -> list[list[str]]:
    grid = []
    for values in itertools.product(*CORE.values()):
        args: list[str] = []
        for flag, value in zip(CORE, values):
            if value is None:
                continue
            args += [flag] if value == "" else [flag, value]
        grid.append(args)
    return grid


def _run(pods: Path, nodes: Path, args: list[str]) -> str:
    result = CliRunner().invoke(main, ["sim", "--trace-pods", str(pods), "--trace-nodes", str(nodes),
                                       "--policy", "all", *args])
    assert result.exit_code == 0, f"argus sim {' '.join(args)}:\n{result.output}\n{result.exception!r}"
    return result.output


@pytest.mark.parametrize("seed", [0, 1])
def test_every_combination_of_the_core_flags_runs(tmp_path: Path, seed: int) -> None:
    pods, nodes = make_trace(tmp_path, seed)
    for args in _core_args():
        out = _run(pods, nodes, args)
        assert "fairshare" in out and "reserve-backfill" in out, args


@pytest.mark.parametrize("extra", OTHERS, ids=lambda a: " ".join(a))
def test_every_other_flag_runs_against_both_ends_of_the_grid(tmp_path: Path, extra: list[str]) -> None:
    pods, nodes = make_trace(tmp_path, 2)
    busiest = ["--preemption", "--checkpoint-every", "1800", "--preemptible", "0.5", "--priority-mix", "0.2:10"]
    for args in ([], busiest):
        out = _run(pods, nodes, args + extra)
        if "--json" in extra:
            assert {r["policy"] for r in json.loads(out)["policies"]} >= {"fifo", "fairshare"}


def test_fgd_runs(tmp_path: Path) -> None:
    pods, nodes = make_trace(tmp_path, 3)
    assert "bestfit" in _run(pods, nodes, ["--fgd"])
