"""Guards against churn (argus.scheduler.guards: a delay before a waiting task may evict,
per-user minimum run and cap on stops), and fair share where nothing can be moved: without
preemption a task keeps off the rare nodes for ``move_after_s``, then takes one."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.config import ChurnGuard, ConfigError, SchedulerConfig, load_config
from argus.events import Demand, NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.core import plan_expires_at, waited_spans
from argus.scheduler.guards import evicts_from, max_preemptions_by_user, min_run_by_user, overridden

NOW = 10_000.0
PRIO = PolicyConfig(policy="priority", preemption=True, max_running_tasks=100)


def _full_node() -> Capacity:
    return Capacity(nodes=(NodeCapacity(node_id="n1", ip="", total_gpus=4, free_gpus=0, total_cpus=32,
                                        free_cpus=32),))


def _victim(preempted: int = 0, user: str = "bob") -> RunningTask:
    return RunningTask(task_id="low", user=user, node_ids=("n1",), preemptible=True, started_at=0.0,
                       expected_end=NOW + 3600, preempted=preempted,
                       demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0))


def _urgent(waited: float) -> QueuedTask:
    return QueuedTask(task_id="high", user="alice", priority=10, seq=1, waiting_since=NOW - waited,
                      demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0))


def test_a_waiting_task_evicts_no_one_before_its_delay_and_says_until_when() -> None:
    config = PolicyConfig(policy="priority", preemption=True, max_running_tasks=100, evict_after_s=600.0)
    early = decide([_urgent(100.0)], [_victim()], _full_node(), NOW, config)
    assert not any(isinstance(d, Preempt) for d in early)
    (why,) = early
    assert isinstance(why, Defer) and "may stop other tasks to make room from" in why.message
    late = decide([_urgent(700.0)], [_victim()], _full_node(), NOW, config)
    assert any(isinstance(d, Preempt) and d.task_id == "low" for d in late)
    # a user's own delay replaces the global one
    mine = PolicyConfig(policy="priority", preemption=True, max_running_tasks=100, evict_after_s=600.0,
                        user_guards={"alice": ChurnGuard(evict_after_s=0.0)})
    assert any(isinstance(d, Preempt) for d in decide([_urgent(100.0)], [_victim()], _full_node(), NOW, mine))


def test_a_users_cap_on_stops_replaces_the_global_one() -> None:
    assert any(isinstance(d, Preempt) for d in decide([_urgent(0.0)], [_victim(preempted=2)], _full_node(), NOW, PRIO))
    capped = PolicyConfig(policy="priority", preemption=True, max_running_tasks=100,
                          user_guards={"bob": ChurnGuard(max_preemptions=2)})
    assert not any(isinstance(d, Preempt)
                   for d in decide([_urgent(0.0)], [_victim(preempted=2)], _full_node(), NOW, capped))


def test_overrides_are_resolved_in_one_place() -> None:
    guards = {"alice": ChurnGuard(preempt_min_run_s=1800.0), "bob": ChurnGuard(max_preemptions=3)}
    assert min_run_by_user(guards) == {"alice": 1800.0}
    assert max_preemptions_by_user(guards) == {"bob": 3}
    assert evicts_from("alice", 0.0, 10.0, 60.0, guards) == 60.0
    assert evicts_from("alice", 0.0, 60.0, 60.0, guards) is None
    with pytest.raises(ValueError, match="no churn guard"):
        overridden(guards, "min_run")


def test_a_plan_expires_when_a_delay_ends() -> None:
    waiting = [_urgent(100.0)]
    assert plan_expires_at(waiting, [], NOW, waited=[600.0]) == NOW + 500.0
    assert waited_spans(SchedulerConfig(preemption=True, evict_after_s=600.0)) == [600.0]
    assert waited_spans(SchedulerConfig(preemption=False, policy="fairshare", move_after_s=3600.0)) == [3600.0]
    assert waited_spans(SchedulerConfig(preemption=False, policy="reserve-backfill")) == []


def _rare_cluster() -> Capacity:
    """19 full nodes of 8 GPUs and 64 CPUs, and the one of 128 CPUs, idle."""
    nodes = [NodeCapacity(node_id=f"s{i:02d}", ip="", total_gpus=8, free_gpus=0, total_cpus=64, free_cpus=0)
             for i in range(19)]
    nodes.append(NodeCapacity(node_id="big", ip="", total_gpus=8, free_gpus=8, total_cpus=128, free_cpus=128))
    return Capacity(nodes=tuple(nodes))


@pytest.mark.parametrize("policy", ["fairshare", "priority"])
def test_without_preemption_a_task_keeps_off_a_rare_node_for_move_after_s(policy: str) -> None:
    config = PolicyConfig(policy=policy, preemption=False, move_after_s=3600.0, max_running_tasks=100)

    def decision(waited: float) -> Admit | Defer:
        task = QueuedTask(task_id="t", user="alice", seq=1, waiting_since=NOW - waited,
                          demand=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4.0))
        (found,) = decide([task], [], _rare_cluster(), NOW, config)
        assert isinstance(found, (Admit, Defer))
        return found

    early = decision(60.0)
    assert isinstance(early, Defer) and early.reason == Reason.KEEPS_OFF_RARE
    assert "once it has waited 3600 s" in early.message
    late = decision(3600.0)
    assert isinstance(late, Admit) and late.node_ids == ("big",)
    # reserve-backfill is unchanged: it takes the node at once
    rb = PolicyConfig(policy="reserve-backfill", preemption=False, move_after_s=3600.0, max_running_tasks=100)
    task = QueuedTask(task_id="t", user="alice", seq=1, waiting_since=NOW,
                      demand=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4.0))
    assert isinstance(decide([task], [], _rare_cluster(), NOW, rb)[0], Admit)


def test_the_new_knobs_reach_the_policy_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "argus.yaml"
    path.write_text("v2:\n  scheduler:\n    evict_after_s: 600\n    reserve_per_model: false\n"
                    "    minor_models_last: false\n    user_guards:\n      alice: {preempt_min_run_s: 1800}\n"
                    "      bob: {max_preemptions: 2, evict_after_s: 0}\n")
    sched = load_config(path, environ={}).v2.scheduler
    policy = PolicyConfig.from_scheduler(sched)
    assert policy.evict_after_s == 600 and not policy.reserve_per_model and not policy.minor_models_last
    assert policy.user_guards == {"alice": ChurnGuard(preempt_min_run_s=1800),
                                  "bob": ChurnGuard(max_preemptions=2, evict_after_s=0)}
    path.write_text("v2:\n  scheduler:\n    user_guards:\n      alice: {min_run: 1800}\n")
    with pytest.raises(ConfigError, match="min_run"):
        load_config(path, environ={})
