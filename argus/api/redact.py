"""What a user may read of messages about their own work that name other users' (issue 36,
governance): never another user's task id or user name, in any field of any response or
stream (task detail and list, timeline, the queue, the event stream).

The scheduler's messages name the others on purpose (an admin, or ``argus replay``, wants
to know who held the nodes and who was stopped for whom): "reserved for bob-ppo-…",
"preempting carol-sft-… (carol)", "'bob' is under its fair share". The log keeps them;
what leaves the server for a non-admin is rewritten here. A task id is found by its form
(``<user>-<workload>-<YYYYMMDD>-<HHMMSS>-<4 hex>``, ``argus.service.ids``) and kept when
the user in it is the reader; a user name is replaced where the messages put one (quoted,
in parentheses, or a field that is just the name), only for names of known users.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

if TYPE_CHECKING:
    from argus.api.reads import Reads
    from argus.service import Principal

__all__ = ["OTHER_TASK", "OTHER_USER", "Redactor", "redacted", "redactor_for"]

T = TypeVar("T")

OTHER_TASK = "another user's task"
OTHER_USER = "another user"

_TASK_ID = re.compile(r"\b([a-z][a-z0-9_-]{0,31}?)-(?:ppo|grpo|sft)-\d{8}-\d{6}-[0-9a-f]{4}\b")


class Redactor:
    """Rewrites text and JSON-ready values for ``viewer``, who may know of ``users`` only
    that they exist: other users' task ids and names become ``OTHER_TASK``/``OTHER_USER``."""

    def __init__(self, viewer: str, users: Iterable[str]) -> None:
        self.viewer = viewer
        self.others = frozenset(u for u in users if u != viewer)
        names = "|".join(re.escape(u) for u in sorted(self.others, key=len, reverse=True))
        # 'bob', (bob), (bob, needs …): the forms the scheduler's messages use
        self._names = re.compile(rf"(?<=['(])(?:{names})(?=[',)])") if names else None
        self._any = re.compile(names) if names else None

    def may_name_others(self, text: str) -> bool:
        """Whether ``text`` could name another user or their task (it holds a name at all):
        when not, nothing in it needs rewriting (one scan, for the event stream)."""
        return self._any is not None and self._any.search(text) is not None

    def _task(self, m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) == self.viewer else OTHER_TASK

    def text(self, s: str) -> str:
        if s in self.others:  # a field that is a user name (by_user)
            return OTHER_USER
        out = _TASK_ID.sub(self._task, s) if "-" in s else s
        return self._names.sub(OTHER_USER, out) if self._names is not None else out

    def value(self, v: Any) -> Any:
        """``v`` (builtins: dicts, lists, strings, numbers) with every string rewritten."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        return v


async def redactor_for(reads: Reads, who: Principal) -> Redactor | None:
    """The reader's redactor (None for an admin, who may read everything)."""
    if who.is_admin:
        return None
    return Redactor(who.user_id, (u.user_id for u in await reads.users()))


def redacted(r: Redactor | None, obj: T) -> T:
    """``obj`` (a msgspec Struct) as ``r``'s reader may see it."""
    if r is None:
        return obj
    return msgspec.convert(r.value(msgspec.to_builtins(obj)), type(obj))
