"""Identifiers: human-readable task ids and token ids."""

from __future__ import annotations

import re
import secrets
import time

__all__ = ["USER_ID_RE", "new_task_id", "new_token_id"]

USER_ID_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
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


def new_token_id() -> str:
    return "tok-" + secrets.token_hex(6)

