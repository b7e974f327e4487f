"""File access that a symlink cannot redirect: every path is opened one component at a time,
relative to the directory above it (``openat``-style, ``os.open(..., dir_fd=...)``), with
``O_NOFOLLOW``, from a base the operator owns (``<shared>/users``, ``<shared>``).

Why: every user's jobs run as one Unix user and may write anything under that user's home,
symlinks included: ``code -> /shared/users/bob/code``, ``driver.log -> .../bob/...``. A
resolve-then-check is racy and a path string re-walked by the kernel follows such links, so
nothing here is ever reopened by path: reads, listings, writes (a temp file created with
``O_CREAT|O_EXCL|O_NOFOLLOW``, then renamed inside the walked directory) and deletes
(``unlinkat``/``rmdir`` relative to the parent's fd) all act on the descriptor the walk
returned. A symlink anywhere is a :class:`Refused` that names it.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import stat
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

__all__ = ["AtomicWrite", "Label", "Refused", "Removal", "entry", "jobs_label", "open_dir", "read_bounded", "remove",
           "remove_at", "remove_tree", "walk", "write_atomic"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO a job planted must not hang the server (it is refused after).
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# How the i-th component of ``names`` is named to the user.
Label = Callable[[Sequence[str], int], str]


class Refused(Exception):
    """A path that is not served, or a write that could not be made: ``status``
    (400/403/404/409; 507 for a full disk) and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail
        # What a removal deleted before it was refused (remove_tree), else None.
        self.partial: Removal | None = None


def jobs_label(names: Sequence[str], i: int) -> str:
    """``names[0]`` is the user, shown as their home; the rest as ``area/sub/path``."""
    return "/".join(names[1:i + 1]) if i else f"the home folder of {names[0]}"


def _link(what: str) -> Refused:
    return Refused(400, f"{what} is a symbolic link; Argus does not follow links in users' "
                   "folders (a job may have planted it): remove or rename it")


def _open_base(base: Path) -> int:
    """The operator's base folder (followed: it is not the user's to change)."""
    try:
        return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(404, f"{base.name or base} not found") from exc


def walk(base: Path, names: Sequence[str], label: Label = jobs_label) -> tuple[int, os.stat_result]:
    """Open ``base``, then each of ``names`` under it without following symlinks. Returns
    the last one's fd (a folder or a regular file; the caller closes it) and its stat.
    Raises :class:`Refused` for a symlink (named), anything missing, or anything that is
    neither a folder nor a regular file."""
    fd = _open_base(base)
    try:
        for i in range(len(names)):
            fd = _step(fd, names, i, label)
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def open_dir(base: Path, names: Sequence[str], label: Label = jobs_label, *,
             create_from: int = 0) -> int:
    """The fd of the folder ``base/names...``, walked as :func:`walk` does; the folders at
    index ``create_from`` and after that are missing are made (``mkdirat``). A file where a
    folder is wanted is a 400 that names it."""
    fd = _open_base(base)
    try:
        for i, name in enumerate(names):
            if i >= create_from:
                try:
                    os.mkdir(name, dir_fd=fd)
                except FileExistsError:
                    pass  # a folder (walked below), or a link or file (refused below)
                except OSError as exc:
                    raise Refused(400, f"cannot make {label(names, i)}: {exc.strerror}") from exc
            fd = _step(fd, names, i, label, want_dir=True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, names: Sequence[str], i: int, label: Label, want_dir: bool = False) -> int:
    """Open ``names[i]`` under ``fd`` (then closed) without following it."""
    name, last = names[i], i == len(names) - 1 and not want_dir
    what = label(names, i)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise Refused(404, f"{what} not found") from exc
    except (ValueError, UnicodeError, OSError) as exc:
        raise Refused(400, f"cannot open {what!r}: {exc}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise _link(what)
    if stat.S_ISDIR(st.st_mode):
        flags = DIR_FLAGS
    elif last and stat.S_ISREG(st.st_mode):
        flags = FILE_FLAGS
    elif want_dir:  # a write through a file: the caller asked for something impossible
        raise Refused(400, f"{what} is a file, not a folder; choose another path")
    else:
        raise Refused(404 if not last else 400, f"{what} is not "
                      f"{'a folder' if not last else 'a regular file or folder'}")
    try:
        new = os.open(name, flags, dir_fd=fd)
    except OSError as exc:  # replaced between the stat and the open: refuse, never follow
        if exc.errno == errno.ELOOP:
            raise _link(what) from exc
        code = 403 if exc.errno == errno.EACCES else 404
        raise Refused(code, f"cannot open {what}: {exc.strerror}") from exc
    os.close(fd)
    if stat.S_IFMT(os.fstat(new).st_mode) != stat.S_IFMT(st.st_mode):
        os.close(new)
        raise Refused(409, f"{what} changed while being opened; try again")
    return new


def _failed(what: str, doing: str, exc: OSError) -> Refused:
    """An OS error on a user's path as a 4xx that says which and why (never a 500); a
    write refused for lack of space (a full disk, a quota) as a 507, the write undone."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Refused(507, f"cannot {doing} {what}: the server's disk is full ({exc.strerror}): "
                            "nothing was written; retry once an operator has freed space")
    code = 403 if exc.errno in (errno.EACCES, errno.EPERM) else 409
    return Refused(code, f"cannot {doing} {what}: {exc.strerror or exc}")


def _entry(dirfd: int, name: str, what: str) -> os.stat_result | None:
    """The stat of ``name`` in ``dirfd`` (not followed), None when missing; a link refused."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _failed(what, "open", exc) from exc
    if stat.S_ISLNK(st.st_mode):
        raise _link(what)
    return st


entry = _entry  # public name: the stat of a name in a walked folder, a link refused


class AtomicWrite:
    """A new file ``name`` in the folder ``dirfd`` (owned and closed here): written to a
    temp file made with ``O_CREAT|O_EXCL|O_NOFOLLOW`` beside it, renamed over ``name``
    inside the same folder fd by :meth:`commit`, removed by :meth:`abort`."""

    def __init__(self, dirfd: int, name: str, what: str) -> None:
        self.dirfd, self.name, self.what = dirfd, name, what
        self.tmp = f".upload-{secrets.token_hex(8)}"
        try:
            st = _entry(dirfd, name, what)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise Refused(400, f"{what} is a folder; name a file inside it" if
                              stat.S_ISDIR(st.st_mode) else f"{what} is not a regular file")
            # 0600, as mkstemp made uploads before: readable by the jobs' (same) Unix user.
            self.fd = os.open(self.tmp, _NEW_FILE, 0o600, dir_fd=dirfd)
        except OSError as exc:
            os.close(dirfd)
            raise _failed(what, "write", exc) from exc
        except BaseException:
            os.close(dirfd)
            raise

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:  # a full disk, a quota: the caller aborts
            raise _failed(self.what, "write", exc) from exc

    def commit(self) -> os.stat_result:
        """Put the file in place (``renameat`` in the walked folder); returns its stat."""
        try:
            st = os.fstat(self.fd)
            os.close(self.fd)
            self.fd = -1
            try:
                os.rename(self.tmp, self.name, src_dir_fd=self.dirfd, dst_dir_fd=self.dirfd)
            except OSError as exc:  # e.g. a folder made there meanwhile
                raise _failed(self.what, "write", exc) from exc
            return st
        except BaseException:
            self.abort()
            raise
        finally:
            self._close_dir()

    def abort(self) -> None:
        """Remove the temp file; nothing is left behind."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.dirfd >= 0:
            try:
                os.unlink(self.tmp, dir_fd=self.dirfd)
            except FileNotFoundError:
                pass
        self._close_dir()

    def _close_dir(self) -> None:
        if self.dirfd >= 0:
            os.close(self.dirfd)
            self.dirfd = -1


def remove(dirfd: int, name: str, what: str, recursive: bool) -> bool:
    """Delete ``name`` in the folder ``dirfd`` (closed here) without following links, a
    file, or a folder with all it holds (``recursive``): :func:`remove_tree`, whole.
    Returns whether it was a folder."""
    try:
        st = _entry(dirfd, name, what)
    except BaseException:
        os.close(dirfd)
        raise
    if st is None or (stat.S_ISDIR(st.st_mode) and not recursive):
        os.close(dirfd)
        raise Refused(404, f"{what} not found") if st is None else Refused(
            400, f"{what} is a folder: delete it with `argus files rm -r` (API: ?recursive=true)")
    removal = remove_tree(dirfd, name, what)
    if not removal.complete:
        raise Refused(409, f"{what}: {removal.entries} entries deleted, more remain (a tree too large for "
                      "one request): delete it again to go on")
    return stat.S_ISDIR(st.st_mode)


class Removal(NamedTuple):
    """What :func:`remove_tree` deleted: entries (files, links, folders), the bytes of the
    regular files among them, and whether the whole tree is gone (False: the entry bound
    was reached; calling again goes on)."""

    entries: int
    bytes: int
    complete: bool


class _Budget:
    def __init__(self, left: int) -> None:
        self.left, self.entries, self.bytes = left, 0, 0


# Folders below the one removed: deeper is refused (each level holds one fd while walked).
MAX_REMOVE_DEPTH = 256


def _clear(fd: int, what: str, budget: _Budget, depth: int) -> bool:
    """Delete what the folder ``fd`` holds, depth first, by fd (never by path, never
    following a link: a link is unlinked like a file). False when the budget ran out."""
    while True:
        # A batch of names, then a fresh listing: deleting while a listing is read may
        # skip entries.
        with os.scandir(fd) as it:
            names = [entry.name for entry in itertools.islice(it, 1024)]
        if not names:
            return True
        for name in names:
            if budget.left <= 0:
                return False
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if depth >= MAX_REMOVE_DEPTH:
                        raise Refused(409, f"{what} is more than {MAX_REMOVE_DEPTH} folders deep; "
                                      "delete its deepest folders first")
                    sub = os.open(name, DIR_FLAGS, dir_fd=fd)  # O_NOFOLLOW: a link swapped in fails
                    try:
                        if (os.fstat(sub).st_ino, os.fstat(sub).st_dev) != (st.st_ino, st.st_dev):
                            raise Refused(409, f"{what} changed while being deleted; try again")
                        if not _clear(sub, what, budget, depth + 1):
                            return False
                    finally:
                        os.close(sub)
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)  # unlinkat never follows a link
                    budget.bytes += st.st_size if stat.S_ISREG(st.st_mode) else 0
            except FileNotFoundError:
                continue  # removed meanwhile (by the job itself, say)
            except OSError as exc:
                raise _failed(what, "delete", exc) from exc
            budget.entries += 1
            budget.left -= 1


def remove_tree(dirfd: int, name: str, what: str, *, max_entries: int = 1_000_000) -> Removal:
    """Delete ``name`` in the folder ``dirfd`` (closed here), a file or a whole folder,
    without following any link (the folder is opened ``O_NOFOLLOW``, everything inside
    by fd; links are unlinked, never followed), counting what it removes. At most
    ``max_entries`` entries per call (a job can write millions of files): past that it
    stops, ``complete`` False, and a second call goes on. Raises :class:`Refused` for a
    link named as ``name`` or anything missing."""
    try:
        st = _entry(dirfd, name, what)
        if st is None:
            raise Refused(404, f"{what} not found")
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(name, dir_fd=dirfd)
            except OSError as exc:
                raise _failed(what, "delete", exc) from exc
            return Removal(1, st.st_size if stat.S_ISREG(st.st_mode) else 0, True)
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _link(what) from exc
            raise _failed(what, "delete", exc) from exc
        budget = _Budget(max_entries)
        try:
            if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
                raise Refused(409, f"{what} changed while being deleted; try again")
            done = _clear(fd, what, budget, 0)
        except Refused as exc:  # what went before it is gone: the caller records that
            exc.partial = Removal(budget.entries, budget.bytes, False)
            raise
        finally:
            os.close(fd)
        if done:
            try:
                os.rmdir(name, dir_fd=dirfd)
            except OSError as exc:  # the job wrote into it meanwhile
                raise _failed(what, "delete", exc) from exc
            budget.entries += 1
        return Removal(budget.entries, budget.bytes, done)
    finally:
        os.close(dirfd)


def remove_at(base: Path, names: Sequence[str], label: Label = jobs_label, *,
              max_entries: int = 1_000_000) -> Removal:
    """:func:`remove_tree` of ``base/names...``, its folders walked from ``base`` without
    following a link (``names`` at least one)."""
    parent = open_dir(base, names[:-1], label, create_from=len(names))
    return remove_tree(parent, names[-1], label(names, len(names) - 1), max_entries=max_entries)


def write_atomic(path: Path, body: bytes) -> None:
    """``path`` written whole or not at all (a temp file beside it, renamed over it), its
    folder made if need be. For the control plane's own folders of the shared root, which
    no job can write: there a path is taken as it stands."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_bytes(body)
    os.replace(tmp, path)


def read_bounded(path: Path, limit: int) -> bytes | None:
    """At most ``limit + 1`` bytes of ``path`` (one more than allowed: the caller sees it
    was too long); None when it is missing or a link (never followed)."""
    try:
        fd = os.open(path, FILE_FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)
