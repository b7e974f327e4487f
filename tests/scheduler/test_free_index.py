"""The placement index (argus.scheduler.freeindex) gives what a full scan of every node
gives: on random clusters (GPU models, fractional and exhausted nodes, spared nodes), after
any sequence of admissions, ``Pool.place``, ``Pool.place_avoiding`` and ``Pool.explain``
answer as the scan and sort they replace."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.events import Demand, NodeCapacity
from argus.scheduler.freeindex import FreeIndex
from argus.scheduler.per_model import scarce_nodes
from argus.scheduler.placement import Pool

MODELS = ("A100", "H100", "")
MODEL_SETS = ((), ("A100",), ("H100",), ("A100", "H100"))


def scan(pool: Pool, d: Demand, avoid: frozenset[int] = frozenset()) -> tuple[int, ...] | None:
    """Best-fit by a scan of every node and a sort, the spared nodes last and, for a task
    of any model, the minor models' nodes after those (what ``Pool.place`` did before the
    index)."""
    allowed = pool.allowed(d)
    spared, minor = pool.spared(), scarce_nodes(pool.types) if not d.gpu_types else frozenset()
    fits = [i for i in range(len(pool.ids)) if (allowed is None or i in allowed) and i not in avoid
            and pool.gpus[i] >= d.n_gpus_per_node and pool.cpus[i] >= d.cpus_per_node]
    if len(fits) < d.nnodes or d.nnodes <= 0:
        return None
    fits.sort(key=lambda i: (i in minor, i in spared, pool.gpus[i], pool.cpus[i], pool.ids[i]))
    return tuple(fits[: d.nnodes])


def scan_count(pool: Pool, d: Demand) -> int:
    allowed = pool.allowed(d)
    return sum(1 for i in range(len(pool.ids)) if (allowed is None or i in allowed)
               and pool.gpus[i] >= d.n_gpus_per_node and pool.cpus[i] >= d.cpus_per_node)


nodes_st = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([8.0, 32.0, 96.0]), st.sampled_from(MODELS),
              st.floats(0, 1), st.floats(0, 1), st.sampled_from([0.0, 0.5])),
    min_size=1, max_size=30)
demand_st = st.builds(lambda n, g, c, m: Demand(nnodes=n, n_gpus_per_node=g, cpus_per_node=c, gpu_types=m),
                      st.integers(0, 3), st.integers(0, 8), st.sampled_from([0.0, 1.0, 4.0, 12.5, 40.0]),
                      st.sampled_from(MODEL_SETS))

# Waiting shapes few nodes can hold: their only homes are spared (placed on last)
rare_st = st.builds(lambda n, g, c, m: Demand(nnodes=n, n_gpus_per_node=g, cpus_per_node=c, gpu_types=m),
                    st.integers(1, 3), st.sampled_from([4, 8]), st.sampled_from([32.0, 90.0]),
                    st.sampled_from(MODEL_SETS))


def make_pool(spec: list[tuple[int, float, str, float, float, float]], waiting: list[Demand]) -> Pool:
    nodes = [NodeCapacity(node_id=f"n{k:02d}", ip="", total_gpus=g, total_cpus=c, gpu_type=m,
                          free_gpus=round(g * fg) - half, free_cpus=round(c * fc, 1))
             for k, (g, c, m, fg, fc, half) in enumerate(spec)]
    return Pool(nodes[::-1], waiting=lambda: iter(waiting))  # (the pool sorts them by id)


@settings(max_examples=150, deadline=None)
@given(nodes_st, st.lists(demand_st, min_size=1, max_size=25), st.lists(rare_st, max_size=4),
       st.lists(st.integers(0, 29), max_size=6))
def test_placement_after_any_admissions_is_the_full_scans(spec, asks, waiting, avoid_ids) -> None:
    pool = make_pool(spec, waiting)
    avoid = frozenset(i for i in avoid_ids if i < len(spec))
    for d in asks:
        expected, expected_off = scan(pool, d), scan(pool, d, avoid)
        assert pool.place_avoiding(d, avoid) == expected_off
        assert pool.place(d) == expected
        if expected is None:
            why = pool.explain(d).message
            if "not per node" in why:  # (else too few GPUs in total, which says no count)
                assert f"only {scan_count(pool, d)} node(s) have" in why
        else:
            pool.take(expected, d)  # an admission: every later answer sees it


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0, 2.5, 8.0]), st.sampled_from([0.0, 3.0, 96.0])),
                min_size=1, max_size=20), st.data())
def test_the_index_stays_in_tier_and_best_fit_order_as_nodes_move(free, data) -> None:
    gpus, cpus = [g for g, _ in free], [c for _, c in free]
    ids = [f"n{k:02d}" for k in range(len(free))]
    members = data.draw(st.none() | st.frozensets(st.integers(0, len(free) - 1)))
    tier = data.draw(st.lists(st.integers(0, 3), min_size=len(free), max_size=len(free)))
    index = FreeIndex(gpus, cpus, ids, members, tier.__getitem__)
    for _ in range(data.draw(st.integers(0, 8))):
        i = data.draw(st.integers(0, len(free) - 1))
        before = (gpus[i], cpus[i])
        gpus[i], cpus[i] = gpus[i] - data.draw(st.sampled_from([0.0, 1.0, 0.5])), cpus[i] - 1.0
        index.moved(i, before, (gpus[i], cpus[i]))
    mine = [i for i in range(len(free)) if members is None or i in members]
    n, g, c = data.draw(st.integers(0, 4)), data.draw(st.sampled_from([0.0, 1.0, 2.0])), data.draw(st.sampled_from([0.0, 2.0]))
    fits = sorted((i for i in mine if gpus[i] >= g and cpus[i] >= c), key=lambda i: (tier[i], gpus[i], cpus[i], ids[i]))
    assert index.pick(n, g, c) == (tuple(fits[:n]) if len(fits) >= n > 0 else None)
    assert index.count(g, c) == len(fits)
