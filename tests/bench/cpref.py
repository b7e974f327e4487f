"""The ``cp`` reference of the transfer benches, warm and cold, and the eviction that makes
a read cold.

``cp`` of a file already in the page cache, not synced, is a memory copy (1-3 GB/s): the
*warm* reference. A large file copied on the same disk reads from the disk and must reach
it: the *cold* reference evicts the source's pages first and counts ``cp`` + ``sync``.
Both are reported; a transfer measured against the cold one has its source evicted too.
Eviction needs no root: ``fsync`` then ``posix_fadvise(POSIX_FADV_DONTNEED)`` (the kernel
drops clean pages it is told to; a hypervisor's cache below the VM may still hold them).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

__all__ = ["CpRef", "evict", "measure_cp", "read_through"]


def evict(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (written back first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through(path: Path) -> None:
    """Read ``path`` once, so that its pages are in the cache (a warm source)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass


class CpRef:
    """Seconds ``cp`` took: ``warm`` (source cached, no sync) and ``cold`` (source evicted,
    ``cp`` + ``sync``)."""

    def __init__(self, warm_s: float, cold_s: float) -> None:
        self.warm_s, self.cold_s = warm_s, cold_s

    def text(self, mb: float) -> str:
        return (f"cp warm (source in the page cache, no sync: a memory copy) {mb / self.warm_s:.0f} MB/s "
                f"({self.warm_s:.1f} s); cp cold (source evicted, cp + sync) {mb / self.cold_s:.0f} MB/s "
                f"({self.cold_s:.1f} s)")

    def ratios(self, what: str, seconds: float) -> str:
        return (f"{what} / cp warm = {self.warm_s / seconds:.0%}, "
                f"{what} / cp cold = {self.cold_s / seconds:.0%}")


def measure_cp(src: Path, dst: Path) -> CpRef:
    """Both references for copying ``src`` to ``dst`` (removed after each)."""
    read_through(src)
    t = time.monotonic()
    subprocess.run(["cp", str(src), str(dst)], check=True)
    warm = time.monotonic() - t
    dst.unlink()
    evict(src)
    t = time.monotonic()
    subprocess.run(["cp", str(src), str(dst)], check=True)
    subprocess.run(["sync", str(dst)], check=False)
    cold = time.monotonic() - t
    dst.unlink()
    return CpRef(warm, cold)
