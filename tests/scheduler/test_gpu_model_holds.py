"""GPU models without starvation under reserve-backfill (argus.scheduler.per_model): the
first waiting task of each set of models gets a reservation of its own, and a task of any
model is placed on the minor models' nodes last."""

from __future__ import annotations

from argus.events import Demand, NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.per_model import scarce_nodes

NOW = 1_000.0
RB = PolicyConfig(policy="reserve-backfill", max_running_tasks=100)


def _node(node_id: str, model: str, total: float, free: float) -> NodeCapacity:
    return NodeCapacity(node_id=node_id, ip="", total_gpus=total, free_gpus=free, total_cpus=64, free_cpus=64,
                        gpu_type=model)


def _task(task_id: str, gpus: int, seq: int, models: tuple[str, ...] = ()) -> QueuedTask:
    return QueuedTask(task_id=task_id, seq=seq, user="u",
                      demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1.0, gpu_types=models))


def _running(task_id: str, node: str, gpus: int, end: float, models: tuple[str, ...] = ()) -> RunningTask:
    return RunningTask(task_id=task_id, node_ids=(node,), expected_end=end, started_at=0.0,
                       demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1.0, gpu_types=models))


def _starving() -> tuple[list[QueuedTask], list[RunningTask], Capacity]:
    """Two full G2 nodes (free in 2 h), a V100 node of 2 GPUs with 1 free (the other free
    in 1 h); in line: an 8-GPU task of any model (the head: it does not fit), a 2-GPU V100
    task (does not fit) and a 1-GPU task of any model that fits only on the V100 node."""
    nodes = (_node("g1", "G2", 8, 0), _node("g2", "G2", 8, 0), _node("v1", "V100", 2, 1))
    running = [_running("r1", "g1", 8, NOW + 7200), _running("r2", "g2", 8, NOW + 7200),
               _running("r3", "v1", 1, NOW + 3600, ("V100",))]
    queue = [_task("head", 8, 1), _task("v100", 2, 2, ("V100",)), _task("any", 1, 3)]
    return queue, running, Capacity(nodes=nodes)


def _by_id(config: PolicyConfig) -> dict[str, Admit | Defer]:
    queue, running, capacity = _starving()
    return {d.task_id: d for d in decide(queue, running, capacity, NOW, config)
            if isinstance(d, (Admit, Defer))}


def test_the_first_task_of_a_model_gets_a_reservation_beside_the_head() -> None:
    out = _by_id(RB)
    head, v100, any_model = out["head"], out["v100"], out["any"]
    assert isinstance(head, Defer) and head.reserved_nodes in (("g1",), ("g2",))
    assert isinstance(v100, Defer) and v100.reserved_nodes == ("v1",) and v100.reserved_from == NOW + 3600
    # the task of any model would run on the V100 node past its reservation: it waits
    assert isinstance(any_model, Defer) and any_model.reason == Reason.BEHIND_RESERVATION
    assert "reserved for v100" in any_model.message


def test_with_one_reservation_the_task_of_any_model_takes_the_scarce_gpu() -> None:
    out = _by_id(PolicyConfig(policy="reserve-backfill", max_running_tasks=100, reserve_per_model=False))
    assert isinstance(out["any"], Admit) and out["any"].node_ids == ("v1",)
    assert isinstance(out["v100"], Defer) and out["v100"].reserved_from is None


def test_a_time_limit_that_ends_before_the_model_reservation_lets_it_pass() -> None:
    queue, running, capacity = _starving()
    queue[2] = QueuedTask(task_id="any", seq=3, user="u", estimate_s=600.0, limited=True,
                          demand=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=1.0))
    out = {d.task_id: d for d in decide(queue, running, capacity, NOW, RB)}
    assert isinstance(out["any"], Admit) and "before the reservation of v100" in out["any"].note


def test_a_task_of_any_model_goes_on_a_minor_model_last() -> None:
    # 9 G2 nodes with 4 GPUs free and one V100 node with 1 free: best-fit alone picks the V100
    nodes = tuple(_node(f"g{i}", "G2", 8, 4) for i in range(9)) + (_node("v1", "V100", 1, 1),)
    one = [_task("any", 1, 1)]
    placed = decide(one, [], Capacity(nodes=nodes), NOW, RB)
    assert isinstance(placed[0], Admit) and placed[0].node_ids[0].startswith("g")
    old = PolicyConfig(policy="reserve-backfill", max_running_tasks=100, minor_models_last=False)
    assert decide(one, [], Capacity(nodes=nodes), NOW, old)[0].node_ids == ("v1",)  # type: ignore[union-attr]
    # a task that names the model still goes there, and a full majority leaves it to any task
    assert decide([_task("v", 1, 1, ("V100",))], [], Capacity(nodes=nodes), NOW, RB)[0].node_ids == ("v1",)  # type: ignore[union-attr]
    full = tuple(_node(f"g{i}", "G2", 8, 0) for i in range(9)) + (_node("v1", "V100", 1, 1),)
    assert decide(one, [], Capacity(nodes=full), NOW, RB)[0].node_ids == ("v1",)  # type: ignore[union-attr]


def test_minor_models_are_those_below_an_even_split() -> None:
    # 6 G2, 3 T4, 1 V100 (even split: 3.33 nodes a model): V100 and T4 are minor
    types = ("G2",) * 6 + ("T4",) * 3 + ("V100",)
    assert scarce_nodes(types) == frozenset({6, 7, 8, 9})
    assert scarce_nodes(("G2",) * 4) == frozenset()  # one model: none
    assert scarce_nodes(("",) * 4) == frozenset()  # unlabelled: none
    assert scarce_nodes(("A100", "A100", "H100", "H100")) == frozenset()  # an even split: none


def test_a_task_of_the_same_model_may_use_its_reserved_nodes() -> None:
    # a model's reservation keeps other work off its nodes, not the model's own tasks (a gang
    # of a model waiting for a long task of that model would otherwise idle the rest)
    queue, running, capacity = _starving()
    queue.append(_task("v100-small", 1, 4, ("V100",)))
    out = {d.task_id: d for d in decide(queue, running, capacity, NOW, RB)}
    assert isinstance(out["v100-small"], Admit) and out["v100-small"].node_ids == ("v1",)
    assert isinstance(out["any"], Defer)
