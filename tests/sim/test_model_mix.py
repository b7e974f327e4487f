"""``argus sim --gpu-model-mix``: a deterministic third of the tasks name a GPU model in
proportion to the nodes, a tenth of those a scarce one (argus.sim.trace.ModelMix)."""

from __future__ import annotations

from collections import Counter

import pytest

from argus.events import Demand
from argus.sim.trace import ModelMix, SimNode, SimTask

# 60 nodes: 40 G2, 17 T4, 3 V100 (5 %: scarce); the V100s have 1 GPU
NODES = ([SimNode(node_id=f"g{i}", gpus=8, cpus=96, gpu_type="G2") for i in range(40)]
         + [SimNode(node_id=f"t{i}", gpus=2, cpus=96, gpu_type="T4") for i in range(17)]
         + [SimNode(node_id=f"v{i}", gpus=1, cpus=96, gpu_type="V100") for i in range(3)])


def _tasks(n: int, gpus: int = 1) -> list[SimTask]:
    return [SimTask(task_id=f"pod-{i}", user="u", arrival=float(i), runtime=60.0,
                    demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=4.0)) for i in range(n)]


def test_a_third_name_a_model_in_proportion_and_a_tenth_of_them_a_scarce_one() -> None:
    mix = ModelMix.parse("0.33:0.1")
    named = [t.demand.gpu_types for t in (mix.apply(t, NODES, seed=0) for t in _tasks(6000)) if t.demand.gpu_types]
    counts = Counter(m for (m,) in named)
    assert 0.30 < len(named) / 6000 < 0.36
    # a tenth scarce, plus the scarce model's share of the proportional draws (3/60)
    assert 0.10 + 0.9 * 3 / 60 - 0.03 < counts["V100"] / len(named) < 0.10 + 0.9 * 3 / 60 + 0.03
    assert 0.9 * 40 / 60 - 0.05 < counts["G2"] / len(named) < 0.9 * 40 / 60 + 0.05
    again = [mix.apply(t, NODES, seed=0) for t in _tasks(200)]
    assert again == [mix.apply(t, NODES, seed=0) for t in _tasks(200)]  # deterministic for a seed
    assert again != [mix.apply(t, NODES, seed=1) for t in _tasks(200)]


def test_only_models_whose_nodes_could_hold_the_task() -> None:
    mix = ModelMix.parse("1:0.5")
    models = {t.demand.gpu_types for t in (mix.apply(t, NODES, seed=0) for t in _tasks(300, gpus=4))}
    assert models == {("G2",)}  # 4 GPUs: only the G2 nodes have them


def test_bad_mixes_say_how_to_write_one() -> None:
    with pytest.raises(ValueError, match="SHARE:SCARCE"):
        ModelMix.parse("0.33")
    with pytest.raises(ValueError, match="fractions"):
        ModelMix.parse("1.5:0.1")
