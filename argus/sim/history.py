"""Our own history as a trace: "what would have happened to our last month if the policy
had been X". Tasks, arrivals, gang shapes, users, priorities and actual run times come from
an Argus event log, read-only (folded into a scratch database, as ``argus replay`` does);
the cluster is the worker nodes as last observed.
"""

from __future__ import annotations

from pathlib import Path

from argus.events import Demand
from argus.sim.trace import SimNode, SimTask, Trace
from argus.store import head_position
from argus.store.dbfile import open_read_only, read_transaction, scratch_database
from projections import default_projections, rebuild_projections
from projections.cluster import read_cluster
from projections.tasks_read import all_tasks

__all__ = ["load_history"]


def load_history(db_path: str | Path) -> Trace:
    """Every task that ran (its run time: the last attempt's start to end), in arrival
    order; tasks that never ran have no run time and are skipped and counted. An attempt
    that ended before the reactor saw it running (a job shorter than a poll) started, as
    far as the log knows, when Ray accepted it."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    with open_read_only(path) as (conn, _), read_transaction(conn), scratch_database() as scratch:
        with read_transaction(scratch):
            rebuild_projections(conn, scratch, default_projections(), until=head_position(conn))
        views, seen = all_tasks(scratch), read_cluster(scratch)
    tasks, no_runtime = [], 0
    for v in sorted(views, key=lambda v: v.seq):
        ran = [(a.started_at or a.submitted_at, a.ended_at) for a in v.attempts
               if (a.started_at or a.submitted_at) is not None and a.ended_at is not None]
        if not ran:
            no_runtime += 1
            continue
        began, ended = ran[-1]
        d = v.demand
        tasks.append(SimTask(task_id=v.task_id, user=v.user, arrival=v.created_at, priority=v.priority,
                             preemptible=v.preemptible,
                             runtime=max(0.001, ended - began),  # type: ignore[operator]
                             demand=Demand(nnodes=d.nnodes, n_gpus_per_node=d.n_gpus_per_node,
                                           cpus_per_node=d.cpus_per_node, gpu_types=d.gpu_types)))
    nodes = [SimNode(node_id=n.node_id, gpus=n.total_gpus, cpus=n.total_cpus, gpu_type=n.gpu_type)
             for n in (seen.nodes if seen else ())]
    return Trace(tasks=tasks, nodes=nodes, skipped_no_runtime=no_runtime)
