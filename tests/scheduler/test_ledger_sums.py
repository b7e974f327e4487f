"""The ledger kept one commitment at a time (``CommittedSums``) against the whole sum
(``committed_per_node``): after any sequence of gangs counted, recounted and removed, the
two agree to the bit, whatever the order (CPUs such as 0.1 and 0.7 do not sum exactly)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.events import Demand, NodeCapacity
from argus.scheduler.ledger import Commitment, CommittedSums, committed_per_node

NODES = [NodeCapacity(node_id=f"n{i}", ip="", total_gpus=8, free_gpus=8, total_cpus=96, free_cpus=96)
         for i in range(4)]
IDS = frozenset(n.node_id for n in NODES)

cpus_st = st.sampled_from([0.1, 0.2, 0.7, 1.0, 3.3, 13.2, 47.9])


@st.composite
def commitment_st(draw: st.DrawFn, task_id: str) -> Commitment:
    nnodes = draw(st.integers(1, 3))
    nodes = draw(st.lists(st.sampled_from(sorted(IDS) + ["gone"]), min_size=nnodes - 1, max_size=nnodes,
                          unique=True))
    return Commitment(task_id=task_id, node_ids=tuple(nodes),
                      demand=Demand(nnodes=nnodes, n_gpus_per_node=draw(st.integers(0, 4)),
                                    cpus_per_node=draw(cpus_st)))


@st.composite
def steps_st(draw: st.DrawFn) -> list[tuple[str, Commitment | None]]:
    """(task id, its new commitment | None: removed), in turn."""
    out = []
    for _ in range(draw(st.integers(1, 40))):
        task_id = f"t{draw(st.integers(0, 9))}"
        out.append((task_id, draw(st.none() | commitment_st(task_id))))
    return out


@settings(max_examples=300, deadline=None)
@given(steps_st(), st.lists(st.integers(0, 9), max_size=3))
def test_kept_sums_equal_the_whole_sum(steps: list[tuple[str, Commitment | None]], releasing_ids: list[int]) -> None:
    sums = CommittedSums(IDS)
    live: dict[str, Commitment] = {}
    for task_id, c in steps:
        if c is None:
            sums.remove(task_id)
            live.pop(task_id, None)
        else:
            sums.add(c)
            live.pop(task_id, None)
            live[task_id] = c
        releasing = [Commitment(task_id=f"r{i}", node_ids=("n0", "n1")[: 1 + i % 2],
                                demand=Demand(nnodes=1 + i % 2, n_gpus_per_node=1, cpus_per_node=0.1 * i))
                     for i in releasing_ids]
        kept = sums.per_node(releasing)
        whole = committed_per_node(NODES, [*live.values(), *releasing])
        if any(not sums.placed(c) for c in live.values()):
            assert kept is None  # the caller falls back to the whole sum
        else:
            assert kept == whole
