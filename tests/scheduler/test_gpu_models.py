"""GPU models (argus.scheduler.gpumodel): a task that names models runs only on nodes of
those models, whatever the policy, reservations or preemption decide, and says so when it
waits; the simulator reads them from the trace and keeps them too."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.events import Demand, NodeCapacity
from argus.scheduler import POLICIES, Admit, Capacity, Defer, PolicyConfig, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.eta import estimate_starts
from argus.scheduler.gpumodel import allowed_nodes, gpu_type_of, models_present, normalize
from argus.scheduler.shape import unfit_reason
from argus.sim import simulate
from argus.sim.trace import SimNode, SimTask, Trace, load_openb

NOW = 10_000.0
MODELS = ["A100", "H100", ""]


def node(i: int, model: str, free: float, total: float = 4) -> NodeCapacity:
    return NodeCapacity(node_id=f"n{i}", ip="", total_gpus=total, free_gpus=free, total_cpus=64, free_cpus=64,
                        gpu_type=model)


def task(tid: str, gpus: int, models: tuple[str, ...] = (), *, nnodes: int = 1, seq: int = 0, user: str = "u",
         priority: int = 0) -> QueuedTask:
    return QueuedTask(task_id=tid, demand=Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=1.0,
                                                 gpu_types=normalize(models)),
                      seq=seq, user=user, priority=priority)


def test_models_match_without_case_and_a_task_without_models_takes_any_node() -> None:
    assert allowed_nodes((), ("A100", "H100")) is None
    assert allowed_nodes(("h100",), ("A100", "H100", "")) == frozenset({1})
    assert allowed_nodes(("A100", "H100"), ("A100", "H100", "")) == frozenset({0, 1})
    assert normalize(["H100", "a100", "h100"]) == ("a100", "H100")
    assert gpu_type_of({"GPU": 8, "accelerator_type:H100": 1, "worker_node": 100}) == "H100"
    assert gpu_type_of({"GPU": 8}) == ""
    assert models_present(["H100", "A100", "", "H100"]) == "A100 ×1, H100 ×2, unlabelled ×1"


def test_a_free_node_of_another_model_is_not_used_and_the_wait_says_why() -> None:
    capacity = Capacity(nodes=(node(0, "A100", 4), node(1, "H100", 0)))
    [d] = decide([task("t", 4, ("H100",))], [], capacity, NOW, PolicyConfig(policy="fifo"))
    assert isinstance(d, Defer) and d.reason == Reason.INSUFFICIENT_GPUS
    assert "needs 1 node × 4 H100 GPUs" in d.message and "on the 1 node(s) with H100 (of 2)" in d.message
    [admit] = decide([task("t", 4, ("A100", "H100"))], [], capacity, NOW, PolicyConfig(policy="fifo"))
    assert isinstance(admit, Admit) and admit.node_ids == ("n0",)


def test_a_model_no_node_has_never_fits_and_holds_no_one_back() -> None:
    capacity = Capacity(nodes=tuple(node(i, "H100" if i < 2 else "A100", 4) for i in range(9)))
    never, other = decide([task("t", 4, ("H100",), nnodes=3, seq=1), task("u", 4, seq=2)], [], capacity, NOW,
                          PolicyConfig(policy="fifo"))
    assert isinstance(never, Defer) and never.reason == Reason.NEVER_FITS
    assert "needs H100: 2 of the 9 alive worker node(s) have it (A100 ×7, H100 ×2)" in never.message
    assert isinstance(other, Admit)


def test_the_submit_check_names_the_models_there_are() -> None:
    nodes = [node(0, "A100", 4), node(1, "A100", 4)]
    field, message = unfit_reason(Demand(nnodes=1, n_gpus_per_node=2, cpus_per_node=1, gpu_types=("H100",)),
                                  nodes, "as last observed") or ("", "")
    assert field == "gpu_type" and "none of the 2 worker node(s)" in message and "ask for one of A100" in message
    field, message = unfit_reason(Demand(nnodes=2, n_gpus_per_node=2, cpus_per_node=1, gpu_types=("A100",)),
                                  [*nodes[:1], node(1, "H100", 4)], "as last observed") or ("", "")
    assert field == "nnodes" and "ask for nnodes ≤ 1" in message and "accept more GPU models" in message
    assert unfit_reason(Demand(nnodes=2, n_gpus_per_node=2, cpus_per_node=1, gpu_types=("a100",)), nodes, "") is None


def test_an_eta_waits_for_a_node_of_its_model() -> None:
    """The forward run frees the A100 node first; the H100 task's start is the H100 node's."""
    capacity = Capacity(nodes=(node(0, "A100", 0), node(1, "H100", 0)))
    running = [RunningTask(task_id="a", demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0),
                           node_ids=("n0",), expected_end=NOW + 600, started_at=NOW - 60),
               RunningTask(task_id="h", demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0),
                           node_ids=("n1",), expected_end=NOW + 3000, started_at=NOW - 60)]
    starts = estimate_starts([task("t", 4, ("H100",))], running, capacity, NOW, PolicyConfig(policy="fifo"))
    assert starts == {"t": NOW + 3000}


world_st = st.lists(st.sampled_from(MODELS), min_size=1, max_size=4)
running_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(-1, 2), st.booleans()), max_size=8)
queue_st = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 2), st.sets(st.sampled_from(["A100", "H100"])),
                              st.integers(-1, 3), st.sampled_from(["alice", "bob"])), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(world_st, running_st, queue_st, st.sampled_from(sorted(POLICIES)), st.booleans())
def test_no_decision_puts_a_task_on_a_node_of_another_model(models, items, waiting, policy, preemption) -> None:
    """Admissions, reservations and the rooms preemption makes: all on nodes of the task's
    models, under every policy."""
    free = [4.0] * len(models)
    running = []
    for k, (where, gpus, priority, preemptible) in enumerate(items):
        i = where % len(models)
        if free[i] >= gpus:
            free[i] -= gpus
            running.append(RunningTask(task_id=f"r{k}", demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1),
                                       user="carol", node_ids=(f"n{i}",), priority=priority, preemptible=preemptible,
                                       started_at=float(k), expected_end=NOW + 600 * (k + 1)))
    capacity = Capacity(nodes=tuple(node(i, m, free[i]) for i, m in enumerate(models)))
    queue = [task(f"w{k}", gpus, tuple(sorted(wanted)), nnodes=nnodes, seq=k + 1, user=user, priority=priority)
             for k, (gpus, nnodes, wanted, priority, user) in enumerate(waiting)]
    by_id = {t.task_id: t for t in queue}
    model_of = {f"n{i}": m for i, m in enumerate(models)}
    config = PolicyConfig(policy=policy, preemption=preemption)

    def ok(task_id: str, nodes: tuple[str, ...]) -> bool:
        wanted = {m.casefold() for m in by_id[task_id].demand.gpu_types}
        return not wanted or all(model_of[n].casefold() in wanted for n in nodes)

    for d in decide(queue, running, capacity, NOW, config):
        if isinstance(d, Admit):
            assert ok(d.task_id, d.node_ids), (d, models)
        elif isinstance(d, Defer) and d.reserved_nodes:
            assert ok(d.task_id, d.reserved_nodes), (d, models)
        if isinstance(d, Defer) and d.reason == Reason.NEVER_FITS:
            t = by_id[d.task_id].demand
            fitting = [m for m in models if not t.gpu_types or m.casefold() in {g.casefold() for g in t.gpu_types}]
            assert len(fitting) < t.nnodes, (d, models)


def test_the_simulator_keeps_each_pod_on_nodes_of_its_models(tmp_path: Path) -> None:
    """A trace whose pods name models (``gpu_spec``) and nodes have them (``model``): every
    admission of a pod that names models is onto nodes of those models, under every policy;
    a pod whose model no node has is skipped and counted; ``--gpu-spec ignore`` relaxes them."""
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time"]
    for k in range(60):
        spec = ["", "H100", "A100|H100", "A100", "V100"][k % 5]
        rows.append(f"pod-{k:03d},4000,1024,{1 + k % 4},1000,{spec},LS,Running,{k * 50},{k * 50 + 4000},{k * 50}")
    pods.write_text("\n".join(rows) + "\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"node-{i},64000,262144,4,{'H100' if i < 2 else 'A100'}\n" for i in range(5)))
    trace = load_openb(pods, nodes)
    assert trace.skipped_no_model == 12 and trace.skipped_too_big == 12 and len(trace.tasks) == 48
    model_of = {n.node_id: n.gpu_type for n in trace.nodes}
    wanted = {t.task_id: set(t.demand.gpu_types) for t in trace.tasks}
    for policy in sorted(POLICIES):
        result = simulate(trace, policy)
        assert all(o.start is not None for o in result.outcomes), policy
        admitted = [(task_id, nodes) for _, task_id, what, nodes in result.decision_log if what == "admitted"]
        assert len(admitted) == 48
        for task_id, on in admitted:
            assert not wanted[task_id] or {model_of[n] for n in on} <= wanted[task_id], (policy, task_id, on)
    relaxed = load_openb(pods, nodes, gpu_spec="ignore")
    assert relaxed.relaxed_model == 48 and relaxed.skipped_no_model == 0 and len(relaxed.tasks) == 60


def test_the_models_change_what_the_simulator_decides() -> None:
    """The issue's complaint: a trace variant with other models gave byte-identical output."""
    nodes = [SimNode(node_id=f"n{i}", gpus=4, cpus=64, gpu_type="H100" if i == 0 else "A100") for i in range(3)]

    def tasks(models: tuple[str, ...]) -> list[SimTask]:
        return [SimTask(task_id=f"t{k}", user="u", arrival=k * 10.0, runtime=1000.0,
                        demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1, gpu_types=models))
                for k in range(4)]

    anywhere = simulate(Trace(tasks=tasks(()), nodes=nodes), "fifo")
    only_h100 = simulate(Trace(tasks=tasks(("H100",)), nodes=nodes), "fifo")
    assert sorted(o.start or 0 for o in anywhere.outcomes) == [0.0, 10.0, 20.0, 1000.0]
    assert sorted(o.start or 0 for o in only_h100.outcomes) == [0.0, 1000.0, 2000.0, 3000.0]


def test_a_suggested_shape_is_one_that_fits_and_the_field_is_the_one_to_change() -> None:
    """1×8 on one 4-GPU node: suggesting nnodes=2 would only be refused next (there is one
    node); a gang of too many nodes names nnodes, not n_gpus_per_node."""
    def plain(i: int, gpus: float, cpus: float = 32) -> NodeCapacity:
        return NodeCapacity(node_id=f"n{i}", ip="", total_gpus=gpus, free_gpus=gpus, total_cpus=cpus, free_cpus=cpus)

    eight = Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=17)
    field, message = unfit_reason(eight, [plain(0, 4)], "as last observed") or ("", "")
    assert field == "n_gpus_per_node" and "nnodes=2" not in message
    assert "no shape of 8 GPUs fits: at most nnodes=1, n_gpus_per_node=4, 4 GPUs" in message
    field, message = unfit_reason(eight, [plain(0, 4), plain(1, 4)], "as last observed") or ("", "")
    assert "e.g. nnodes=2, n_gpus_per_node=4 for 8 GPUs" in message
    # Following the suggestion fits; asking for more nodes than there are is about nnodes.
    assert unfit_reason(Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=9), [plain(0, 4), plain(1, 4)], "") is None
    field, message = unfit_reason(Demand(nnodes=2, n_gpus_per_node=4, cpus_per_node=9), [plain(0, 8)], "") or ("", "")
    assert field == "nnodes" and "ask for nnodes ≤ 1" in message and "e.g. nnodes=1, n_gpus_per_node=8" in message
