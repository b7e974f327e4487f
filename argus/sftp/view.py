"""What an SFTP user sees, mapped onto the shared root: the same areas as the REST files
API (``argus.api.files``), with the same bases and the same walk from them.

``/`` holds ``datasets models code jobs common``; ``/common`` holds ``datasets hf``. Those
two are virtual folders (nothing on disk). Under them:

=====================  ===============================  =====================
seen by the user       walked from (no link followed)   writable by
=====================  ===============================  =====================
``/datasets/...``      ``<shared>/users`` → user/...    the user
``/models/...``        ``<shared>/users`` → user/...    the user
``/code/...``          ``<shared>/users`` → user/...    the user
``/jobs/...``          ``<shared>/users`` → user/...    nobody (the jobs write it)
``/common/datasets``   ``<shared>`` → datasets/...      admins
``/common/hf``         ``<shared>`` → hf/...            admins
=====================  ===============================  =====================

Paths are normalised as text (``..`` never climbs above ``/``): nothing is ever resolved
on disk by name, so a symlink a job planted cannot move the user anywhere.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Sequence

import msgspec

from argus import layout, safefs
from argus.api.files import COMMON_AREAS, JOBS_AREA, MAX_DEPTH, OWN_AREAS

__all__ = ["Target", "normalize", "resolve", "ROOT_ENTRIES"]

ROOT_ENTRIES = (*OWN_AREAS, JOBS_AREA, "common")
COMMON_ENTRIES = tuple(p.split("/", 1)[1] for p in COMMON_AREAS)
MAX_PATH = 4096


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A path as the user named it, and where it is.

    ``virtual``: the entries of a virtual folder (``/``, ``/common``); else ``base`` and
    ``names`` (``top`` of them lead to the area's root) for :mod:`argus.safefs`."""

    path: str  # normalised, as the user sees it ("/datasets/a")
    virtual: tuple[str, ...] | None = None
    area: str = ""
    base: str = ""
    names: tuple[str, ...] = ()
    top: int = 0
    writable: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        """The components below the area's root."""
        return self.names[self.top:]

    def label(self, names: Sequence[str], i: int) -> str:
        """How ``names[i]`` is named to the user: their own path, never the server's."""
        return "/" + "/".join([self.area, *names[self.top:i + 1]])


def normalize(raw: bytes | str, cwd: str = "/") -> str:
    """``raw`` as an absolute path of the user's view (``..`` stops at ``/``)."""
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
    if "\x00" in text:
        raise safefs.Refused(400, "a path must not hold a NUL byte")
    if len(text) > MAX_PATH:
        raise safefs.Refused(400, f"path longer than {MAX_PATH} characters")
    return posixpath.normpath(posixpath.join(cwd, text)).replace("//", "/")


def resolve(shared: Path, user: str, raw: bytes | str, *, may_write_common: bool) -> Target:
    """Where the user's path ``raw`` is. Raises :class:`safefs.Refused` (404) for a path
    outside the view, (400) for one too deep or too long."""
    path = normalize(raw)
    parts = [p for p in path.split("/") if p]
    if not parts:
        return Target(path="/", virtual=ROOT_ENTRIES)
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        raise safefs.Refused(400, "a file or folder name is longer than 255 bytes")
    head = parts[0]
    if head == "common":
        if len(parts) == 1:
            return Target(path=path, virtual=COMMON_ENTRIES)
        sub = parts[1]
        if f"common/{sub}" not in COMMON_AREAS:
            raise safefs.Refused(404, f"{path} not found: common holds {', '.join(COMMON_ENTRIES)}")
        rest = parts[2:]
        names = (COMMON_AREAS[f"common/{sub}"], *rest)
        base, top, area, writable = shared, 1, f"common/{sub}", may_write_common
    elif head in OWN_AREAS or head == JOBS_AREA:
        rest = parts[1:]
        names = (user, head, *rest)
        base, top, area, writable = shared / layout.USERS, 2, head, head != JOBS_AREA
    else:
        raise safefs.Refused(404, f"{path} not found: your home holds {', '.join(ROOT_ENTRIES)}")
    if len(rest) > MAX_DEPTH:
        raise safefs.Refused(400, f"path too deep: at most {MAX_DEPTH} folders and a file below an area")
    return Target(path=path, area=area, base=str(base), names=names, top=top, writable=writable)
