"""Nodes that admit no new attempt: drained by an admin, or quarantined while processes of
attempts that ended still run there (docs/runs.md, "Node hygiene").

Pure, as the rest of the turn: the policy plans on a cluster where a held node has nothing
free (its running attempts go on), and a task that waits while a held node could have
taken it is told which node, and why. Quarantines come and go with the nodes' own
reports (``argus.nodepool.keeper``): a node whose keeper reports leftovers of an attempt
placed there is quarantined with the pids and commands as its reason, and released once
its keeper reports it clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from argus.events import EventBase, HoldKind, NodeCapacity, NodeHeld, NodeReleased
from argus.nodepool.keeper import NodeReport
from argus.scheduler import Reason
from argus.scheduler.core import AdmissionPlan
from argus.scheduler.placement import node_label
from projections import TaskView
from projections.cluster import NodeHold

__all__ = ["describe_holds", "quarantine_news", "withhold"]

# Reasons that say the cluster had no room: a held node may be why.
_ROOM = frozenset({Reason.NO_CAPACITY_PER_NODE, Reason.INSUFFICIENT_GPUS, Reason.BEHIND_RESERVATION,
                   Reason.BLOCKED_BY_HEAD})
REPORTS_FRESH_S = 60.0  # a keeper's report older than this says nothing of the node now
_EVIDENCE_CHARS = 400


def withhold(capacity: Sequence[NodeCapacity] | None, held: Iterable[str]) -> list[NodeCapacity] | None:
    """The cluster as the policy may use it: a held node has nothing free."""
    if capacity is None:
        return None
    nodes = set(held)
    return [msgspec.structs.replace(n, free_gpus=0.0, free_cpus=0.0) if n.node_id in nodes else n for n in capacity]


def describe_holds(plan: AdmissionPlan[TaskView], holds: Mapping[tuple[str, HoldKind], NodeHold],
                   capacity: Sequence[NodeCapacity]) -> AdmissionPlan[TaskView]:
    """The plan, with every wait for room that a held node could have ended naming that
    node and why it is held."""
    if not holds or not plan.deferrals:
        return plan
    total = {n.node_id: n.total_gpus for n in capacity}
    deferrals = []
    for task, d in plan.deferrals:
        could = [h for h in holds.values() if total.get(h.node_id, 0.0) >= task.demand.n_gpus_per_node]
        if d.reason in _ROOM and could:
            said = "; ".join(f"{node_label(h.node_id, h.ip)} is {_held_as(h)}" for h in could)
            d = msgspec.structs.replace(d, message=f"{d.message}; {said}")
        deferrals.append((task, d))
    return msgspec.structs.replace(plan, deferrals=deferrals)


def _held_as(hold: NodeHold) -> str:
    if hold.kind is HoldKind.DRAIN:
        return f"drained by {hold.by} ({hold.reason})"
    return f"quarantined: {hold.reason}"


def quarantine_news(reports: Sequence[NodeReport], holds: Mapping[tuple[str, HoldKind], NodeHold],
                    tasks: Mapping[str, TaskView], capacity: Sequence[NodeCapacity], now: float) -> list[EventBase]:
    """Quarantines to begin (a fresh report of leftovers on a node that ran them) and to
    end (a fresh report of a quarantined node that finds none). ``tasks``: the views of the
    tasks the leftovers belong to, where this log has them."""
    ips = {n.node_id: n.ip for n in capacity}
    news: list[EventBase] = []
    for report in reports:
        if now - report.checked_at > REPORTS_FRESH_S or report.node_id not in ips:
            continue
        mine = [p for p in report.leftovers if _placed_on(p.submission_id, report.node_id, tasks)]
        held = (report.node_id, HoldKind.QUARANTINE) in holds
        if mine and not held:
            evidence = "; ".join(f"pid {p.pid} ({p.command}) of {p.submission_id}, which ended" for p in mine)
            news.append(NodeHeld(node_id=report.node_id, ip=ips[report.node_id], kind=HoldKind.QUARANTINE,
                                 reason=f"{len(mine)} process(es) left behind: {evidence}"[:_EVIDENCE_CHARS],
                                 by="reactor", held_at=now))
        elif held and not mine:
            news.append(NodeReleased(node_id=report.node_id, kind=HoldKind.QUARANTINE, by="reactor", released_at=now))
    return news


def _placed_on(submission_id: str, node_id: str, tasks: Mapping[str, TaskView]) -> bool:
    """The attempt is one of this log's and ran on ``node_id`` (its gang or its driver, or
    where is not known). A process of an attempt this log does not know is another
    deployment's on a shared host (or claims an id it was never given): not ours to judge.
    A GPU held by a process of no attempt at all (``""``) is the node's own problem."""
    if not submission_id:
        return True
    task = tasks.get(submission_id.rsplit("--a", 1)[0])
    attempt = next((a for a in task.attempts if a.submission_id == submission_id), None) if task else None
    if attempt is None:
        return False
    if not (attempt.node_ids or attempt.driver_node_id):
        return True
    return node_id in attempt.node_ids or node_id == attempt.driver_node_id
