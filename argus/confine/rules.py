"""What a job's processes may reach: the policy, as Landlock rules (``argus.confine.landlock``
enforces them). Pure except for reading directory listings to carve hidden places out.

A confined job may
- read and run the system (``SYSTEM_READ``: /usr, /etc, /proc, ...) and the interpreter
  with its libraries and the code on its path (``needed``);
- read the shared ``datasets``, ``hf`` and ``common`` folders;
- read, write, create and remove in the user's home (its own ``jobs/<attempt>/tmp`` is the
  private temporary folder);
- use devices (``/dev``: GPUs, ``/dev/null``, ``/dev/shm``);
- create and append to files in Ray's session ``logs`` folder (a Ray worker writes its own
  log files there) without reading them: other jobs' logs are there too.

Anything else is out of reach: other users' homes, the control plane's files, /tmp, the
service user's home. A ``needed`` path that contains a hidden place (a checkout of Argus
holding its ``.argus`` data folder) is granted around it: Landlock can only allow, so
carving means allowing every sibling along the way and never the hidden place itself.
"""

from __future__ import annotations

import os
import posixpath

from argus import layout
from argus.confine.landlock import Access, Rule
from argus.confine.record import fields

TYPE_CHECKING = False  # not typing's: the worker launcher imports this (``landlock.Rule``)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["Confinement", "LOG_WRITE", "SYSTEM_READ", "carve", "job_confinement", "rules_for"]

# The machine's own software and what programs read at start (ld.so, locales, DNS, certs).
# Of /run only the resolver's files (/etc/resolv.conf often links there): containers keep
# their secrets in /run/secrets.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt",
               "/proc", "/sys", "/run/systemd/resolve")
# Append to and create log files, never read them (other jobs' logs live beside).
LOG_WRITE = Access.WRITE_FILE | Access.MAKE_REG | Access.MAKE_DIR


# The field types in quotes: ``Sequence`` is imported for the type checker only.
@fields
class Confinement(tuple["str", "Sequence[str]", "Sequence[str]", "Sequence[str]", "Sequence[str]",
                        "Sequence[str]", "Sequence[str]"]):
    """Where one job's processes may go. Paths are absolute; missing ones are skipped. (A
    tuple with named fields for the launcher's start-up: see ``landlock.Rule``.)"""

    __slots__ = ()
    home: str  # the user's home: everything beneath it
    read: Sequence[str]  # read and execute beneath each (carved around ``hidden``)
    write: Sequence[str]  # everything beneath each (besides the home)
    devices: Sequence[str]  # devices as a job uses them
    logs: Sequence[str]  # create and append, not read (Ray's session logs)
    hidden: Sequence[str]  # never granted through ``read``, even when inside it
    # Nothing inside these is granted, whoever names it, but the home: other users' homes,
    # however a path reaches them (links are resolved first).
    forbidden: Sequence[str]

    def __new__(cls, home: str = "", read: Sequence[str] = (), write: Sequence[str] = (),
                devices: Sequence[str] = ("/dev",), logs: Sequence[str] = (), hidden: Sequence[str] = (),
                forbidden: Sequence[str] = ()) -> Confinement:
        return super().__new__(cls, (home, read, write, devices, logs, hidden, forbidden))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def carve(root: str, hidden: Sequence[str]) -> list[str]:
    """The paths whose union is ``root`` without the ``hidden`` trees: ``root`` itself when
    nothing hidden is inside it, else its entries, recursing only toward what is hidden.
    Links among the entries are left out: a rule on a link would grant its target."""
    inner = [h for h in hidden if _inside(h, root)]
    if not inner:
        return [root]
    if any(h == root for h in inner):
        return []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:  # unreadable or gone: grant nothing of it
        return []
    paths: list[str] = []
    for entry in entries:
        if entry.is_symlink():
            continue
        paths += carve(posixpath.join(root, entry.name), inner)
    return paths


def _real(paths: Iterable[str]) -> list[str]:
    """Absolute, resolved, existing, once each, in order."""
    seen: dict[str, None] = {}
    for path in paths:
        if path and posixpath.isabs(path) and os.path.exists(path):
            seen.setdefault(os.path.realpath(path), None)
    return list(seen)


def rules_for(conf: Confinement) -> list[Rule]:
    """The Landlock rules of a confinement."""
    hidden = _real(conf.hidden)
    home = _real([conf.home])
    forbidden = _real(conf.forbidden)

    def allowed(paths: Iterable[str]) -> list[str]:
        return [p for p in paths if any(_inside(p, h) for h in home)
                or not any(_inside(p, f) for f in forbidden)]

    read = [path for root in allowed(_real(conf.read)) for path in carve(root, hidden + forbidden)]
    return ([Rule(path, Access.read()) for path in dict.fromkeys(read)]
            + [Rule(path, Access.write()) for path in home + allowed(_real(conf.write))]
            + [Rule(path, Access.device()) for path in allowed(_real(conf.devices))]
            + [Rule(path, LOG_WRITE) for path in allowed(_real(conf.logs))])


def job_confinement(*, shared_root: str, user: str, needed: Sequence[str] = (),
                    ray_logs: Sequence[str] = (), extra_read: Sequence[str] = (),
                    extra_write: Sequence[str] = (), hidden: Sequence[str] = ()) -> Confinement:
    """The confinement of ``user``'s jobs: see the module docstring. ``needed``: the
    interpreter's prefixes and the code on its path; ``hidden``: what must stay out of
    reach even where ``needed`` contains it (the control plane's data, other homes).
    ``user`` "": a process of no known user, which gets no home."""
    root = posixpath.normpath(shared_root)
    # A user name is one path segment; anything else (or "") gets no home at all.
    home = layout.home(root, user) if user and "/" not in user and user not in (".", "..") else ""
    return Confinement(
        read=[*SYSTEM_READ, *needed, *(posixpath.join(root, n) for n in layout.SHARED_READ_ONLY), *extra_read],
        home=home,
        write=list(extra_write),
        logs=list(ray_logs),
        hidden=[root, "/tmp", "/var/tmp", *hidden],
        forbidden=[layout.users_dir(root)],
    )
