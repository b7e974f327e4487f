"""The order a reservation takes the running tasks' endings in (``argus.scheduler.reserve.
Endings``), as a property (hypothesis): grouped by how their time moves with the clock and
reused from plan to plan, it is exactly what sorting every ending's expected time at that
instant gives (ties in the order the tasks came in), at every instant the grouping is
reused for, and for extra endings (gangs released now, tasks admitted in the pass)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.events import Demand
from argus.scheduler import RunningTask
from argus.scheduler.reserve import Ending, Endings, expected_end

IDS = ("n0", "n1", "n2")
DEFAULT_S = 600.0
NOW = 10_000.0

# (expected end relative to NOW or None, time limit?, started relative to NOW or None (often within the
# minute every overdue task is given at least), node or None)
_started = st.one_of(st.none(), st.integers(-9_000, 100), st.integers(-70, 10))
running_st = st.lists(st.tuples(st.one_of(st.none(), st.integers(-5_000, 5_000)), st.booleans(), _started,
                                st.one_of(st.none(), st.integers(0, 2))), max_size=14)
extra_st = st.lists(st.tuples(st.integers(0, 3_000), st.booleans(), st.integers(0, 2)), max_size=4)


def _reference(running: list[RunningTask], extra: list[Ending],
               now: float) -> list[tuple[float, Demand, tuple[int, ...], bool]]:
    """Every ending's time at ``now``, the rule written out once, sorted (stable)."""
    out = []
    for r in running:
        end = r.expected_end
        nodes = tuple(IDS.index(n) for n in r.node_ids)
        if r.limited and end is not None:
            at = max(end, now)
        else:
            at = end if end is not None and end > now else expected_end(end, r.started_at, now, DEFAULT_S)
        out.append((at, r.demand, nodes, r.limited and end is not None))
    out += [(e.at, e.demand, e.nodes, e.limited) for e in extra]
    return sorted(out, key=lambda x: x[0])


@settings(max_examples=300, deadline=None)
@given(running_st, extra_st, st.lists(st.integers(0, 6_000), min_size=1, max_size=4))
def test_grouped_endings_come_in_the_order_of_their_times(items, extra_items, later) -> None:
    running = [RunningTask(task_id=f"r{k}", demand=Demand(nnodes=1, n_gpus_per_node=1 + k % 3, cpus_per_node=k),
                           node_ids=() if node is None else (IDS[node],),
                           expected_end=None if end is None else NOW + end, limited=limited,
                           started_at=None if started is None else NOW + started)
               for k, (end, limited, started, node) in enumerate(items)]
    for now in [NOW, *(NOW + d for d in sorted(later))]:  # one plan after another: the grouping is reused
        extra = [Ending(at=now + at, demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=100 + k),
                        nodes=(node,), limited=limited) for k, (at, limited, node) in enumerate(extra_items)]
        endings = Endings(running, now, DEFAULT_S, extra)
        got = [(max(now, at), e, nodes, limited) for at, _, e, nodes, limited in endings.in_order(now, IDS)]
        want = [(max(now, at), e, nodes, limited) for at, e, nodes, limited in _reference(running, extra, now)]
        assert got == want
        assert endings.nodeless(IDS) == any(not nodes for _, _, nodes, _ in want)
        assert sorted(map(repr, endings.placed(IDS))) == sorted(repr((e, nodes)) for _, e, nodes, _ in want)
