"""Plain uploads (``argus files put``'s client code) of one file, alternating between
checkouts of Argus (A/B: before and after a change), each against its own server: wall
time and the CPU seconds the client and the server spent, per run. CPU seconds move far
less than wall time on a loaded host. The source's pages are evicted before each upload
(a cold read, as ``cp`` cold in :mod:`tests.bench.cpref`), unless ``--warm``. Usage:

    python -m tests.bench.bench_upload_ab --gb 1 --runs 4 <checkout A> <checkout B>
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.bench_transfers import SERVER, TOKEN, generate
from tests.bench.cpref import evict, measure_cp, read_through

CLIENT = """
import sys
from pathlib import Path
from argus.cli import transfer
from argus.cli.client import Client
class Bar:
    def update(self, n): pass
transfer.upload_file(Client(sys.argv[1], sys.argv[2]), Path(sys.argv[3]), "models/ab.bin",
                     transfer.StateFile(Path(sys.argv[4])), transfer.Progress(Bar()))
"""


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--warm", action="store_true", help="read the source from the page cache")
    ap.add_argument("trees", nargs=2, help="two checkouts of Argus: A and B")
    args = ap.parse_args()
    size = int(args.gb * 1000**3)
    work = Path(tempfile.mkdtemp(prefix="argus-bench-upload-ab-", dir=args.dir))
    servers: list[tuple[str, str, subprocess.Popen[bytes], Path]] = []
    try:
        src = work / "src.bin"
        generate(src, size)
        print(measure_cp(src, work / "cp.bin").text(size / 1e6), flush=True)
        for i, tree in enumerate(args.trees):
            root = work / f"root{i}"
            root.mkdir()
            port = 18500 + os.getpid() % 400 + i
            env = {**os.environ, "PYTHONPATH": tree}
            p = subprocess.Popen([sys.executable, "-c", SERVER, str(root), TOKEN, str(port)],
                                 env=env, cwd=tree)
            servers.append((tree, f"http://127.0.0.1:{port}", p, root))
        for _, url, _, _ in servers:
            for _ in range(300):
                try:
                    if httpx.get(url + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
        for run in range(args.runs):
            for name, (tree, url, p, root) in zip("AB", servers):
                (read_through if args.warm else evict)(src)
                before, server_cpu = resource.getrusage(resource.RUSAGE_CHILDREN), _cpu(p.pid)
                t = time.monotonic()
                subprocess.run([sys.executable, "-c", CLIENT, url, TOKEN, str(src),
                                str(work / f"state{run}{name}.json")],
                               env={**os.environ, "PYTHONPATH": tree}, cwd=tree, check=True)
                wall = time.monotonic() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                client_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                (root / "shared/users/admin/models/ab.bin").unlink()
                print(f"run {run + 1} {name}: {size / 1e6 / wall:.0f} MB/s ({wall:.1f} s); CPU "
                      f"client {client_cpu:.1f} s, server {_cpu(p.pid) - server_cpu:.1f} s; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for _, _, p, _ in servers:
            p.terminate()
            p.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
