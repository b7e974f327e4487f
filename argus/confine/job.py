"""One job's confinement on this node: ``rules.job_confinement`` filled in with what this
process knows (its interpreter, Ray's session logs), built into a Landlock ruleset.

Built in the unconfined parent (it reads directory listings and opens every path once) and
enforced in the child just before exec (``Ruleset.restrict_self`` is two system calls).
"""

from __future__ import annotations

import errno
import os
import posixpath
import sys

from argus.confine.record import fields
from argus.confine.landlock import NET_ABI, LandlockError, Ruleset, abi_version
from argus.confine.rules import job_confinement, rules_for

TYPE_CHECKING = False  # not typing's: the worker launcher imports this (``landlock.Rule``)
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Decision", "confinement_line", "decide", "interpreter_paths", "job_ruleset", "ray_logs_dirs"]


@fields
class Decision(tuple[bool, str, int]):
    """Whether a job is confined on this node, and the one line that says so. (A tuple with
    named fields for the worker launcher's start-up: see ``landlock.Rule``.)"""

    __slots__ = ()
    confined: bool
    line: str
    abi: int

    def __new__(cls, confined: bool, line: str, abi: int = 0) -> Decision:
        return super().__new__(cls, (confined, line, abi))


def decide(mode: str) -> Decision:
    """``mode``: ``auto`` (Landlock where the kernel has it), ``landlock`` (required: a job
    does not run without it) or anything else (off)."""
    if mode not in ("auto", "landlock"):
        return Decision(False, f"jobs are not confined (v2.sandbox.mode: {mode})")
    abi = abi_version()
    if abi >= 1:
        return Decision(True, f"jobs confined to their user's files (Landlock ABI {abi})", abi)
    if mode == "landlock":
        raise LandlockError(errno.EOPNOTSUPP, "v2.sandbox.mode is landlock, but this kernel has no Landlock "
                                "(Linux >= 5.13 with landlock in its LSM list): set mode auto or bwrap")
    return Decision(False, "jobs are NOT confined: this kernel has no Landlock (Linux >= 5.13 "
                           "with landlock among its LSMs); set v2.sandbox.mode: bwrap for the command")


def confinement_line(mode: str) -> str:
    """Whether this host's jobs are confined, in one line (``argus up``, the node pool)."""
    if mode == "bwrap":
        return "each job's command runs under bubblewrap; its Ray workers are not confined"
    try:
        decision = decide(mode)
    except LandlockError as exc:
        return exc.strerror or str(exc)
    if not decision.confined:
        return decision.line
    if decision.abi >= NET_ABI:  # argus.confine.raystart: the raylet denies Ray's doors
        return decision.line + "; Ray's job API and client port shut to them"
    return decision.line + (f"; Ray's job API stays open to them (TCP rules need Landlock ABI "
                            f"{NET_ABI}, Linux 6.7)")


def _package_dirs() -> list[str]:
    """Argus's own code (an editable install maps it from outside site-packages)."""
    import importlib.util  # here, not at the top: see interpreter_paths

    dirs: list[str] = []
    for name in ("argus", "projections"):
        spec = importlib.util.find_spec(name)
        dirs += list(spec.submodule_search_locations or []) if spec else []
    return dirs


def interpreter_paths() -> list[str]:
    """What a Python program of this interpreter reads: its prefixes, standard library and
    site-packages, and Argus's code. Not ``sys.path[0]`` (the working directory)."""
    # Imported here, not at the top: the worker launcher imports this module before every
    # Ray worker but never calls this (raystart hands it these paths).
    import site
    import sysconfig

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, posixpath.dirname(sys.executable)]
    scheme = sysconfig.get_paths()
    paths += [p for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := scheme.get(key))]
    paths += site.getsitepackages()
    return [*dict.fromkeys(paths), *_package_dirs()]


def _own_session_logs() -> str | None:
    """Where Ray's job supervisor sends this driver's output: ``…/session_*/logs``."""
    for fd in (1, 2):
        try:
            folder = posixpath.dirname(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if posixpath.basename(folder) == "logs" and "/session_" in folder:
            return folder
    return None


def ray_logs_dirs() -> list[str]:
    """The logs folders of this Ray session's nodes on this host: the driver's own (it
    writes its core-worker log there), and those of the other raylets of the same session
    here (a driver may attach to any raylet of its host: ``argus up`` runs two)."""
    own = _own_session_logs()
    if own is None:
        latest = "/tmp/ray/session_latest/logs"
        return [os.path.realpath(latest)] if os.path.isdir(latest) else []
    session = f"--session-name={posixpath.basename(posixpath.dirname(own))}".encode()
    found = [own]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read(256 * 1024).split(b"\0")
        except OSError:
            continue
        if session in args:
            found += [a[len(b"--log_dir="):].decode(errors="replace") for a in args
                      if a.startswith(b"--log_dir=")]
    return list(dict.fromkeys(found))


def job_ruleset(decision: Decision, *, shared_root: str, user: str, pythonpath: Sequence[str] = (),
                extra_read: Sequence[str] = (), extra_write: Sequence[str] = (),
                hidden: Sequence[str] = ()) -> Ruleset:
    """The ruleset confining ``user``'s job on this node (not enforced yet)."""
    conf = job_confinement(shared_root=shared_root, user=user,
                           needed=[*interpreter_paths(), *pythonpath], ray_logs=ray_logs_dirs(),
                           extra_read=extra_read, extra_write=extra_write, hidden=hidden)
    ruleset = Ruleset(decision.abi)
    ruleset.allow_all(rules_for(conf))
    return ruleset
