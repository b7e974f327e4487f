"""Linux Landlock, through ctypes: an unprivileged, kernel-enforced limit on which files a
process (and everything it starts, for ever) may open.

Three system calls (``man 7 landlock``): create a ruleset that *handles* some access rights
(everything handled is denied unless a rule allows it), add rules that allow rights beneath
a directory or on a file, and restrict the calling thread with it. A restricted process
cannot lift or widen its ruleset, and its children inherit it, so a launcher that restricts
itself before it runs user code confines the code and whatever it forks or execs.

Nothing here decides *what* to allow: that is ``argus.confine.rules``.
"""

from __future__ import annotations

import ctypes
import errno
import os

from argus.confine.record import fields

# Not ``typing.TYPE_CHECKING``: typing's import (it imports ``re``) was over a quarter of
# the worker launcher's start-up, and the launcher imports this module (see ``Rule``).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Access", "ConnectDenial", "LandlockError", "NET_ABI", "Rule", "Ruleset", "abi_version", "handled_by"]

# Syscall numbers: the same on x86_64 and aarch64 (the generic table), see unistd.h.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_ACCESS_NET_CONNECT_TCP = 1 << 1
NET_ABI = 4  # the first ABI with TCP rules
_PR_SET_NO_NEW_PRIVS = 38
_SUPPORTED_MACHINES = {"x86_64", "aarch64"}


class Access:
    """``LANDLOCK_ACCESS_FS_*``, with the ABI version that introduced each. Plain ints, not
    an ``enum.IntFlag``: enum's import is a cost the worker launcher pays (see ``Rule``)."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2: link or rename a file into another directory
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5: ioctl on a device file (GPUs need it)

    @classmethod
    def read(cls) -> int:
        """Read and run: open files for reading, list directories, execute."""
        return cls.EXECUTE | cls.READ_FILE | cls.READ_DIR

    @classmethod
    def write(cls) -> int:
        """Everything a home needs: read, write, create, remove, rename, truncate."""
        return (cls.read() | cls.WRITE_FILE | cls.REMOVE_DIR | cls.REMOVE_FILE | cls.MAKE_DIR
                | cls.MAKE_REG | cls.MAKE_SOCK | cls.MAKE_FIFO | cls.MAKE_SYM | cls.REFER
                | cls.TRUNCATE)

    @classmethod
    def device(cls) -> int:
        """Devices as a job uses them (GPUs, /dev/null, /dev/shm): read, write, ioctl."""
        return cls.write() | cls.IOCTL_DEV


# Rights a rule on a regular file (not a directory) may carry; others make the kernel refuse.
FILE_RIGHTS = Access.EXECUTE | Access.WRITE_FILE | Access.READ_FILE | Access.TRUNCATE | Access.IOCTL_DEV

_RIGHTS_OF_ABI = {1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF, 5: 0xFFFF}


def handled_by(abi: int) -> int:
    """Every filesystem right an ABI version knows: all of them are denied unless allowed."""
    return _RIGHTS_OF_ABI[min(abi, 5)] if abi >= 1 else 0


class LandlockError(OSError):
    """The kernel refused a Landlock call (or has no Landlock)."""


@fields
class Rule(tuple[str, int]):
    """Allow ``access`` beneath ``path`` (a directory) or on it (a file). A tuple with named
    fields (``argus.confine.record``), not a msgspec Struct: the worker launcher imports this
    before every Ray worker starts, and msgspec's import was two thirds of its start-up."""

    __slots__ = ()
    path: str
    access: int

    def __new__(cls, path: str, access: int) -> Rule:
        return super().__new__(cls, (path, access))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _NetRulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(number: int, *args: object) -> int:
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, os.strerror(code))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (old kernel, Landlock not
    in the boot's LSM list, another architecture, or a seccomp filter refusing it)."""
    system = os.uname()
    if system.sysname != "Linux" or system.machine not in _SUPPORTED_MACHINES:
        return 0
    try:
        return _call(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except LandlockError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return 0
        raise


class _Built:
    """A ruleset's file descriptor, to restrict a process with."""

    fd = -1

    def restrict_self(self) -> None:
        """Confine the calling thread (and what it starts) for ever. Safe in a forked
        child before exec: two system calls, no allocation that matters."""
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise LandlockError(code, os.strerror(code))
        _call(_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Ruleset(_Built):
    """A ruleset being built: ``allow`` rules, then ``restrict_self`` (in the process to
    confine; the fd is close-on-exec, so building it in a parent and restricting in the
    forked child before exec works)."""

    def __init__(self, abi: int) -> None:
        if abi < 1:
            raise LandlockError(errno.EOPNOTSUPP, "this kernel has no Landlock")
        self.handled = handled_by(abi)
        attr = _RulesetAttr(self.handled)
        self.fd = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                        ctypes.c_uint32(0))

    def allow(self, rule: Rule) -> bool:
        """Add one rule; False when its path does not exist (nothing to allow). A link is
        followed here, by the kernel, once: rules name what the path is now."""
        try:
            fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            access = rule.access & self.handled
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                access &= FILE_RIGHTS
            if not access:
                return False
            attr = _PathBeneathAttr(access, fd)
            _call(_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                  ctypes.byref(attr), ctypes.c_uint32(0))
            return True
        finally:
            os.close(fd)

    def allow_all(self, rules: Iterable[Rule]) -> int:
        """Add every rule; how many were added."""
        return sum(self.allow(rule) for rule in rules)



class ConnectDenial(_Built):
    """A ruleset (ABI >= 4) that handles only outgoing TCP connections and allows every port
    but ``denied``: TCP rules are allow-lists of single ports, so denying a few takes a rule
    for each of the 65,534 others (about 0.1 s to build: build it once, in the parent).
    Applied on top of whatever else confines the process (its own layer)."""

    def __init__(self, abi: int, denied: Iterable[int]) -> None:
        if abi < NET_ABI:
            raise LandlockError(errno.EOPNOTSUPP, f"Landlock ABI {abi} has no TCP rules (ABI {NET_ABI}, Linux 6.7)")
        self.denied = frozenset(denied)
        attr = _NetRulesetAttr(0, _ACCESS_NET_CONNECT_TCP)
        self.fd = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                        ctypes.c_uint32(0))
        rule = _NetPortAttr(_ACCESS_NET_CONNECT_TCP, 0)
        ref, fd, kind, flags = ctypes.byref(rule), ctypes.c_int(self.fd), ctypes.c_int(_RULE_NET_PORT), ctypes.c_uint32(0)
        add = _libc.syscall
        for port in range(65536):
            if port in self.denied:
                continue
            rule.port = port
            if add(_ADD_RULE, fd, kind, ref, flags) < 0:
                code = ctypes.get_errno()
                raise LandlockError(code, os.strerror(code))
