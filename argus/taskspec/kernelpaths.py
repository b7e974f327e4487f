"""What the kernel does with a path that the text of it does not show, for the path policy.

- ``/proc``, ``/sys`` and ``/dev`` are views of the machine, not folders: from
  ``/proc/self/root``, ``/proc/1/root`` or ``/proc/self/cwd/..`` any file is reachable, and
  what ``/proc/self`` means differs between the API server (where a path is checked) and
  the worker (where it is used). A path is refused when it is in one of them as written,
  after normalising, or when any symbolic link on its way points into one.
- ``a/link/../b`` is ``a/b`` to ``posixpath.normpath`` but ``<link's target>/../b`` to the
  kernel; the policy compares both (``os.path.realpath`` walks the way the kernel does).
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

from argus.taskspec.errors import TaskSpecError

__all__ = ["LinkHops", "PSEUDO_ROOTS", "pseudo_root", "refuse_pseudo"]

PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
# Reaches nothing: commands may discard output into it.
ALLOWED_DEVICES = frozenset({"/dev/null"})
_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS: more is a loop
_MAX_CACHED = 4096  # components remembered per policy (one submission)


def pseudo_root(path: str) -> str | None:
    """The pseudo filesystem (``/proc``, ``/sys``, ``/dev``) a normalised absolute path is
    in, or None (``/dev/null`` is allowed)."""
    if path in ALLOWED_DEVICES:
        return None
    return next((r for r in PSEUDO_ROOTS if path == r or path.startswith(r + "/")), None)


def refuse_pseudo(piece: str, path: str, field: str) -> None:
    """Refuse ``/proc``, ``/sys``, ``/dev`` as written (``piece``) or normalised (``path``)."""
    where = pseudo_root(path)
    if where is not None:
        how = "is in" if path == piece.rstrip("/") else f"normalises to {path}, in"
        raise TaskSpecError(
            field, f"{piece[:160]!r} {how} {where}, which Argus refuses: /proc, /sys and /dev "
            "reach any file on the machine (/proc/self/root/...) and mean something else where "
            "the task runs; write the real path, e.g. under $HOME/ or ${ARGUS_JOB_DIR}/",
        )


class LinkHops:
    """Walks a path component by component as the kernel does (``..`` after a link goes up
    from the link's target) and reports the first symbolic link whose target is in a
    pseudo filesystem. Link targets are remembered for the policy's later paths."""

    def __init__(self) -> None:
        self._targets: dict[str, str | None] = {}  # path -> its link target (None: not a link)

    def _target(self, path: str) -> str | None:
        known = self._targets.get(path, "")
        if known != "":
            return known
        try:
            target = os.readlink(path) if stat.S_ISLNK(os.lstat(path).st_mode) else None
        except OSError:  # missing, not a directory, no permission: taken as written
            target = None
        if len(self._targets) < _MAX_CACHED:
            self._targets[path] = target
        return target

    def into_pseudo(self, path: str) -> tuple[str, str] | None:
        """(the last link followed, where the walk got) when the walk of ``path`` enters
        ``/proc``, ``/sys`` or ``/dev`` through a symbolic link; None when it does not (a
        path in one as written is the lexical check's), or on a loop."""
        pending = [c for c in reversed(path.split("/")) if c]
        real, link, links = "/", "", 0
        while pending:
            name = pending.pop()
            if name == "..":
                real = posixpath.dirname(real)
            elif name != ".":
                candidate = posixpath.join(real, name)
                target = self._target(candidate)
                if target is None:
                    real = candidate
                else:
                    links += 1
                    if links > _MAX_LINKS:
                        return None  # a loop: the kernel fails it (ELOOP), nothing is reached
                    link = candidate
                    if target.startswith("/"):
                        real = "/"
                    pending.extend(c for c in reversed(target.split("/")) if c)
            # "/dev" on the way may still end at /dev/null, the one device allowed.
            if link and pseudo_root(real) is not None and (real != "/dev" or not pending):
                return link, real
        return None

    def check(self, piece: str, path: str, real: str, field: str) -> None:
        """Refuse ``piece`` (normalised: ``path``, resolved: ``real``) when the kernel would
        take it elsewhere than its normalised text says: a ``..`` after a symlink, or a
        symlink on the way into /proc, /sys or /dev."""
        written = re.sub(r"/{2,}", "/", piece)
        dotdot = ".." in written.split("/")
        if dotdot:
            kernel = os.path.realpath(written)
            if kernel != real:
                raise TaskSpecError(
                    field, f"{piece[:160]!r} has '..' after a symbolic link: it resolves to "
                    f"{kernel}, not to {real}; write the path without '..'",
                )
        if real == path and not dotdot:
            return  # no symlink on the way: nothing more to see
        hop = self.into_pseudo(written)
        if hop is not None:
            raise TaskSpecError(
                field, f"{piece[:160]!r} goes through the symbolic link {hop[0]} into "
                f"{hop[1]}, which Argus refuses (/proc, /sys, /dev); write the real path, "
                "e.g. under $HOME/ or ${ARGUS_JOB_DIR}/",
            )
