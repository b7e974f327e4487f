"""What a user's tasks may ask for (issue 36, governance): set by an admin
(``UserLimitsSet``, ``argus users set``), checked when a task is submitted or validated.

An admin may also cap how many GPUs a user's admitted tasks hold at once
(``max_gpus``): the scheduler lets a task start only while its user stays within it
(``Reason.USER_GPU_LIMIT``), and a gang bigger than the cap is refused here.

Without limits any user could give their task ``priority: 1000000`` and, under the
priority policy, go to the head of the queue and stop other users' work, or mark every
task ``preemptible: false``. The defaults: priority 0 at most, and tasks are preemptible
(a spec that does not say becomes preemptible; one that asks for ``false`` is refused).
Admins are not limited: they set the limits.
"""

from __future__ import annotations

import sqlite3
from typing import Annotated, Callable

import msgspec

from argus.scheduler.placement import fmt_amount
from argus.service.auth import Principal
from argus.store import LimitReached
from projections.tasks_read import waiting_count

__all__ = ["UserLimits", "limit_problem", "queue_full", "queue_guard", "resolve_preemptible"]


class UserLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What an admin sets for a user (``POST /users/{id}/limits``, ``argus users set``)."""

    # Whole numbers as JSON Schema has them: 5.0 is one (msgspec's int would refuse it).
    max_priority: Annotated[float, msgspec.Meta(ge=-1_000_000, le=1_000_000, multiple_of=1)] = 0  # as a spec's
    may_pin: bool = False  # may submit preemptible: false
    # waiting at once; 0: the server's default (v2.api.default_max_queued)
    max_queued: Annotated[float, msgspec.Meta(ge=0, le=1_000_000, multiple_of=1)] = 0
    # GPUs their admitted tasks may hold at once (0: no cap); logical GPUs may be fractional
    max_gpus: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)] = 0


def resolve_preemptible(who: Principal, asked: bool | None) -> bool:
    """Whether the task may be stopped to make room: as its spec says; not said, yes,
    unless its user may pin tasks (admins too), whose tasks were not preemptible before
    there were limits."""
    if asked is not None:
        return asked
    return not (who.is_admin or who.may_pin)


def limit_problem(who: Principal, priority: int, asked_preemptible: bool | None,
                  gpus: float = 0.0) -> tuple[str, str] | None:
    """The field that asks for more than ``who`` may have, and why, in words that say what
    to change; None when nothing does. ``gpus``: the task's whole gang (a gang above the
    user's GPU cap could never start)."""
    if who.is_admin:
        return None
    if who.max_gpus > 0 and gpus > who.max_gpus:
        return "resources", (f"the task needs {fmt_amount(gpus)} GPUs, above your cap of {fmt_amount(who.max_gpus)} "
                f"GPUs held at once: ask for fewer, or ask an admin "
                f"(argus users set {who.user_id} --max-gpus N)")
    if priority > who.max_priority:
        return "priority", (f"priority {priority} is above your limit of {who.max_priority}: lower it, or ask an "
                f"admin to raise your limit (argus users set {who.user_id} --max-priority N)")
    if asked_preemptible is False and not who.may_pin:
        return "preemptible", (f"preemptible: false is not allowed for {who.user_id}: your tasks may be stopped to make "
                f"room for other work; remove the field, or ask an admin "
                f"(argus users set {who.user_id} --may-pin)")
    return None


def queue_full(waiting: int, cap: int, who: Principal) -> str:
    """Why a submission of ``who`` is refused when ``waiting`` of their tasks fill ``cap``."""
    own = "" if who.max_queued else " (the default, v2.api.default_max_queued)"
    return (f"{waiting} of your tasks already wait, your cap is {cap}{own}: submit again when one has "
            f"started, or cancel one (argus cancel ID); an admin may raise it (argus users set "
            f"{who.user_id} --max-queued N)")


def queue_guard(who: Principal, cap: int) -> Callable[[sqlite3.Connection], None] | None:
    """The check of ``who``'s queue cap (``cap``; 0: none) for the transaction that appends
    their TaskSubmitted (``AppendBatch.guard``): run once it is folded, so the count
    includes it and every other submission of that transaction, and nothing two
    concurrent submissions read before either was written can let both through."""
    if cap <= 0:
        return None

    def within_cap(db: sqlite3.Connection) -> None:
        waiting = waiting_count(db, who.user_id)
        if waiting > cap:
            raise LimitReached(queue_full(waiting - 1, cap, who))

    return within_cap
