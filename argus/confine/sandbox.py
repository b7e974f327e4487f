"""How the driver confines a job's command (``Sandbox``, carried in its context), and the
opt-in mechanism of the two: bubblewrap (``v2.sandbox.mode: bwrap``). The other, Landlock
(``auto`` / ``landlock``), is ``argus.confine.job``; ``argus.confine.command`` applies either.

What the command sees (docs/security.md, "Sandboxing a job's command"):

- the machine read-only (``/`` bound read-only), devices as they are (``/dev``: GPUs,
  and ``/dev/shm``, which Ray's object store and NCCL use), a fresh ``/proc``;
- a private, empty ``/tmp``;
- of the shared root only the user's home, writable (its ``jobs/<attempt>/`` is the
  working directory), and the shared ``datasets``, ``hf`` and the legacy ``common``
  folders, read-only. Other users' homes, the control plane's files (``ray/``) and
  anything else there are not in its view at all;
- what it needs from the hidden places: the interpreter and the code on its PYTHONPATH
  (read-only), and ``v2.sandbox.read_only`` / ``writable`` (by default Ray's session
  directory ``/tmp/ray``, whose sockets a driver's ``ray.init()`` connects to).

No PID namespace: Ray's raylet follows a driver by its process id, and a driver in its own
PID namespace never connects (measured: ``ray.init`` times out). Run as the same Unix
user; bubblewrap needs unprivileged user namespaces when that user is not root.

What it does not confine: processes Ray starts for the job (actors, tasks: verl's whole
trainer) are the raylet's children, outside the sandbox, and can read what the Ray user
can. A job that calls ``ray.init()`` is not confined by this.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import msgspec

from argus import layout

__all__ = ["RAY_TEMP_ROOT", "Sandbox", "bwrap_argv"]

# Ray's default session directory, whose sockets a driver's ray.init() connects to.
RAY_TEMP_ROOT = "/tmp/ray"


class Sandbox(msgspec.Struct, frozen=True, kw_only=True):
    """How the driver confines the command (travels in the DriverContext). ``mode``:
    ``bwrap``, or ``auto`` / ``landlock`` (argus.confine); a context recorded before
    Landlock came has no mode and meant bubblewrap."""

    mode: str = "bwrap"
    bwrap: str = "bwrap"
    read_only: list[str] = []
    writable: list[str] = []
    hidden: list[str] = []


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


def bwrap_argv(sandbox: Sandbox, *, shared_root: str, user: str, workdir: str,
               needed: Iterable[str] = ()) -> list[str]:
    """The ``bwrap … --`` prefix that runs a command for ``user`` in ``workdir`` (inside the
    user's home). ``needed``: paths the command must read (the interpreter's prefixes, the
    PYTHONPATH entries); bound read-only where the layout hides them."""
    root = posixpath.normpath(shared_root)
    home = layout.home(root, user)
    users = layout.users_dir(root)
    hidden = ("/tmp", root)
    argv = [sandbox.bwrap, "--die-with-parent", "--unshare-ipc", "--unshare-uts",
            "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", root]
    for name in layout.SHARED_READ_ONLY:
        path = posixpath.join(root, name)
        argv += ["--ro-bind-try", path, path]
    argv += ["--bind", home, home]
    seen = {home}
    for path in [*needed, *sandbox.read_only]:
        path = posixpath.normpath(path) if path else ""
        if (not path.startswith("/") or path in seen or _under(path, home)
                or not any(_under(path, h) for h in hidden)):
            continue  # visible already (or not a path)
        if _under(path, users):
            continue  # another user's files: never
        seen.add(path)
        argv += ["--ro-bind-try", path, path]
    for path in [RAY_TEMP_ROOT, *sandbox.writable]:
        path = posixpath.normpath(path) if path else ""
        if not path.startswith("/") or _under(path, users):
            continue
        argv += ["--bind-try", path, path]
    argv += ["--chdir", workdir, "--"]
    return argv
