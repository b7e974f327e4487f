"""Nodes that admit nothing until what an ended attempt ran there is gone (docs/runs.md,
"Node hygiene").

A stopped run can leave processes behind that still hold GPUs, and the next job placed on
that node then fails. So when an attempt ends, each node it ran on (its gang's and its
driver's) is *clearing* until one of these says none of the attempt's processes is left:
- the attempt's driver, for its own host, in its exit report (``host_clean``: it killed the
  command's group and saw the job's Ray workers end before it reported);
- the node's keeper, in a report judged against a live set written after the attempt left
  it (``NodeReport.live_at``), naming none of its processes.
A node with no keeper (no fresh report) has nobody to ask: it is not held. A keeper that
still finds the attempt's processes after its grace reports them as leftovers, and the
node is quarantined instead (``argus.reactor.holds``); past ``CLEAR_WAIT_S`` a node is no
longer held for clearing either way.

Pure: the reactor's ``NodeWatch`` keeps the ended attempts and reads the reports; the turn
withholds the clearing nodes as it withholds held ones (``argus.reactor.plan``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from argus.nodepool.keeper import CHECK_S, NodeReport

__all__ = ["CLEAR_WAIT_S", "REPORT_FRESH_S", "EndedAttempt", "clearing_nodes"]

REPORT_FRESH_S = 60.0  # a keeper silent longer than this is not waited for
CLEAR_WAIT_S = 30.0 + 2 * CHECK_S  # the keeper's grace, and two of its looks


class EndedAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt that left the live set at ``left_at``, and the nodes it ran on."""

    submission_id: str
    node_ids: tuple[str, ...]
    driver_node_id: str = ""
    host_clean: bool = False  # its driver said nothing of it was left on its own host
    left_at: float


def clearing_nodes(ended: Iterable[EndedAttempt], reports: Mapping[str, NodeReport | None],
                   now: float) -> tuple[dict[str, str], set[str]]:
    """The nodes still clearing, each with why, and the ended attempts whose every node has
    cleared (no longer to watch). ``reports``: each node's keeper's last report."""
    clearing: dict[str, str] = {}
    done: set[str] = set()
    for attempt in ended:
        waiting = False
        for node in dict.fromkeys((*attempt.node_ids, attempt.driver_node_id)):
            why = _why_clearing(attempt, node, reports.get(node), now) if node else None
            if why is not None:
                waiting = True
                clearing.setdefault(node, why)
        if not waiting:
            done.add(attempt.submission_id)
    return clearing, done


def _why_clearing(attempt: EndedAttempt, node: str, report: NodeReport | None, now: float) -> str | None:
    if node == attempt.driver_node_id and attempt.host_clean:
        return None
    if now - attempt.left_at > CLEAR_WAIT_S or report is None or now - report.checked_at > REPORT_FRESH_S:
        return None
    if report.live_at < attempt.left_at:
        return f"waiting for its keeper's look after attempt {attempt.submission_id} ended"
    if any(p.submission_id == attempt.submission_id for p in report.leftovers):
        return None  # past the grace: quarantined instead
    ending = [p for p in report.ending if p.submission_id == attempt.submission_id]
    if not ending:
        return None
    return (f"{len(ending)} process(es) of attempt {attempt.submission_id}, which ended, still run there "
            f"(pid {ending[0].pid}: {ending[0].command[:80]})")
