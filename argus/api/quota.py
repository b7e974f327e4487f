"""Per-user storage: what a user holds in ``datasets/ models/ code/`` plus the uploads they
have in progress (each reserves its declared length), against ``v2.files.quota_bytes``
(or the user's entry in ``v2.files.quotas``); sizes in the units people read.

The walk is by descriptor and never follows a link (a job may plant one to make a user's
usage look like the whole disk's), and it is bounded: at most ``MAX_ENTRIES`` entries, then
the figure is a lower bound (``exact`` false). A user's usage is cached for ``CACHE_S``
seconds, and dropped when the API itself changes their files.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import msgspec

from argus import layout
from argus.config import FilesConfig
from argus.safefs import DIR_FLAGS

__all__ = ["MAX_ENTRIES", "Usage", "UsageCache", "human", "limit_for", "no_room", "usage_of"]

OWN = layout.OWN_AREAS
MAX_ENTRIES = 2_000_000
CACHE_S = 30.0


class Usage(msgspec.Struct, kw_only=True):
    """Bytes a user holds (``used_bytes``), reserves for uploads in progress
    (``staged_bytes``), and may hold (``limit_bytes``, 0: no limit)."""

    used_bytes: int
    staged_bytes: int
    limit_bytes: int
    exact: bool = True  # false: more entries than counted; used_bytes is a lower bound

    @property
    def free(self) -> int | None:
        if not self.limit_bytes:
            return None
        return max(0, self.limit_bytes - self.used_bytes - self.staged_bytes)


def human(n: float) -> str:
    """``4.8 GiB``, ``512 MiB``, ``2 GiB``, ``900 B``: binary units, at most one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            text = f"{n:.1f}".rstrip("0").rstrip(".") if unit != "B" else str(int(n))
            return f"{text} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def limit_for(cfg: FilesConfig, user: str) -> int:
    """The user's limit in bytes (0: none)."""
    return cfg.quotas.get(user, cfg.quota_bytes)


def _tree_bytes(fd: int, budget: list[int]) -> int:
    """Bytes of the regular files under the folder ``fd`` (closed here); links and
    anything else are not followed. ``budget[0]`` entries may still be looked at."""
    total = 0
    try:
        with os.scandir(fd) as it:
            for e in it:
                budget[0] -= 1
                if budget[0] < 0:
                    return total
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
                elif stat.S_ISDIR(st.st_mode):
                    try:
                        sub = os.open(e.name, DIR_FLAGS, dir_fd=fd)
                    except OSError:  # swapped for a link meanwhile, or unreadable
                        continue
                    total += _tree_bytes(sub, budget)
    finally:
        os.close(fd)
    return total


def usage_of(shared: Path, user: str) -> tuple[int, bool]:
    """Bytes in the user's own areas, and whether every entry was counted."""
    budget = [MAX_ENTRIES]
    total = 0
    try:
        home = os.open(layout.home(str(shared), user), DIR_FLAGS)
    except OSError:
        return 0, True
    try:
        for area in OWN:
            try:
                fd = os.open(area, DIR_FLAGS, dir_fd=home)
            except OSError:  # missing, or a link a job put there: not followed
                continue
            total += _tree_bytes(fd, budget)
    finally:
        os.close(home)
    return total, budget[0] >= 0


class UsageCache:
    """Each user's usage for ``CACHE_S`` seconds (a walk of a large tree costs seconds)."""

    def __init__(self, shared: Path) -> None:
        self.shared = shared
        self._seen: dict[str, tuple[float, int, bool]] = {}

    def get(self, user: str, fresh: bool = False) -> tuple[int, bool]:
        """(bytes, exact); ``fresh`` walks again whatever the cache holds. Blocking."""
        hit = self._seen.get(user)
        if hit and not fresh and time.monotonic() - hit[0] < CACHE_S:
            return hit[1], hit[2]
        used, exact = usage_of(self.shared, user)
        self._seen[user] = (time.monotonic(), used, exact)
        return used, exact

    def forget(self, user: str) -> None:
        self._seen.pop(user, None)


def no_room(what: str, size: int, usage: Usage) -> str | None:
    """Why ``size`` more bytes do not fit (the message a 413 carries), or None."""
    limit = usage.limit_bytes
    if not limit or usage.used_bytes + usage.staged_bytes + size <= limit:
        return None
    if size > limit:
        return (f"{what}: {human(size)} is larger than your {human(limit)} limit; ask an admin "
                "to raise it (v2.files.quotas), or split the file")
    held = f"you hold {human(usage.used_bytes)}"
    if usage.staged_bytes:
        held += f" and {human(usage.staged_bytes)} in unfinished uploads"
    return (f"{what}: {human(size)} does not fit: {held} of your {human(limit)} limit "
            f"({human(usage.free or 0)} free); delete what you no longer need "
            "(argus files rm -r; unfinished uploads expire when left alone) or ask an admin "
            "to raise the limit")
