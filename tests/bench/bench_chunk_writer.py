"""The server's per-byte work on a tus chunk without HTTP: ``ChunkWriter`` of two checkouts
(A/B) writing 1 GiB as 32 chunks of 32 MiB, each fed 4 MiB at a time as 256 KiB pieces
(what the HTTP server hands over), with a SHA-1 chunk checksum and the running SHA-256,
then ``fdatasync``; CPU seconds of this process (all threads) and wall time, alternating.
A checkout whose ``write`` takes one buffer gets the pieces joined first, as its
``_stream_chunk`` did. Usage:

    python -m tests.bench.bench_chunk_writer --runs 3 --dir /tmp <checkout A> <checkout B>
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import os
import resource
import tempfile
import time
from pathlib import Path
from types import ModuleType

PIECES = [os.urandom(256 << 10) for _ in range(16)]


def _staging(tree: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(tree) / "argus/api/staging.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(mod: ModuleType, path: Path) -> tuple[float, float]:
    """CPU and wall seconds for 1 GiB through ``mod.ChunkWriter``."""
    takes_list = "pieces" in inspect.signature(mod.ChunkWriter.write).parameters
    path.write_bytes(b"")
    c, t, offset = _cpu(), time.perf_counter(), 0
    for _ in range(32):
        writer = mod.ChunkWriter(path, offset, hashlib.sha256(), "sha1")
        for _ in range(8):
            if takes_list:
                writer.write(list(PIECES))
            else:
                buf = bytearray()
                for piece in PIECES:
                    buf += piece
                writer.write(buf)
        writer.finish()
        offset += writer.written
    cpu, wall = _cpu() - c, time.perf_counter() - t
    path.unlink()
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("trees", nargs=2, help="two checkouts of Argus: A and B")
    args = ap.parse_args()
    mods = [_staging(tree, f"staging_{n}") for n, tree in zip("AB", args.trees)]
    path = Path(tempfile.mkdtemp(prefix="argus-bench-chunk-", dir=args.dir)) / "chunk.data"
    try:
        for run in range(args.runs):
            for name, mod in zip("AB", mods):
                cpu, wall = one(mod, path)
                print(f"run {run + 1} {name}: CPU {cpu:.2f} s per GiB, wall {wall:.2f} s, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()


if __name__ == "__main__":
    main()
