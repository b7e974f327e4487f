"""Identifiers: human-readable task ids and token ids."""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["USER_ID_RE", "USER_ID_RULE", "new_task_id", "new_token_id", "user_id_problem"]

# A user id names a home directory and starts every task id: keep the two in step.
USER_ID_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
USER_ID_RULE = ("use 1 to 32 characters: lowercase letters (a-z), digits, '_' or '-', "
                "starting with a letter")
_recent: dict[str, float] = {}


def new_task_id(user: str, workload: str, now: float | None = None) -> str:
    """``<user>-<workload>-<YYYYMMDD>-<HHMMSS>-<4 hex>``, unique within this process
    (ids handed out in the last minute are remembered; the store's expected_version=0
    catches a clash with another process)."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    if len(_recent) > 100_000:
        cutoff = now - 60
        for key in [k for k, t in _recent.items() if t < cutoff]:
            del _recent[key]
    while True:
        task_id = f"{user}-{workload}-{stamp}-{secrets.token_hex(2)}"
        if task_id not in _recent:
            _recent[task_id] = now
            return task_id


def user_id_problem(user_id: str) -> str | None:
    """None for a valid user id; else what is wrong, the rule in words and, where one
    can be made, a valid id to use instead."""
    if USER_ID_RE.fullmatch(user_id):  # not .match: '$' would let a trailing newline in
        return None
    message = f"user id {user_id[:64]!r} is not allowed: {USER_ID_RULE}"
    fixed = re.sub(r"[^a-z0-9_-]", "_", user_id.lower()).lstrip("0123456789_-")[:32]
    if fixed and USER_ID_RE.match(fixed):
        message += f", e.g. {fixed!r}"
    return message


def new_token_id() -> str:
    return "tok-" + secrets.token_hex(6)

