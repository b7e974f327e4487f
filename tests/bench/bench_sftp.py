"""SFTP throughput: upload and download MB/s through the SFTP door with the real OpenSSH
``sftp`` client, against ``cp`` of the same file on the same disk. Prints numbers.

    python -m tests.bench.bench_sftp [--size-mb 1024] [--dir /some/disk] [--cipher aes128-gcm@openssh.com]

The server is a real ``argus serve`` process (its own CPU, as in production) with
``v2.sftp.port`` set, on a fresh data folder under ``--dir``; a user and their ed25519
key (``ssh-keygen``) are made through the API. The file is ``--size-mb`` MiB of random
bytes (a 16 MiB random block repeated: SSH does not compress by default). Each transfer is
checked byte for byte after it. Two ``cp`` references (tests/bench/cpref.py): *warm*
(the source in the page cache, no sync: a memory copy) and *cold* (the source's pages
evicted, ``cp`` + ``sync``). Each transfer reads cold (the source, or the stored file the
door sends, evicted first) and its time includes syncing what it wrote, as the cold ``cp``
does. The server's CPU seconds per transfer come from /proc. Target (issue 53): SFTP at
least 50 % of ``cp`` for a large file, each way, judged against both references; the exit
status is 1 when one is missed (``tests.bench.verdict``).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.cpref import evict, measure_cp
from tests.bench.verdict import Verdict

ADMIN = "bench-admin-token-0123456789abcdef0123"
BLOCK = 16 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (and its waited-for children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _make_file(path: Path, size_mb: int) -> None:
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        left = size_mb << 20
        while left > 0:
            f.write(block[:left])
            left -= BLOCK


def _timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=None, help="where the data goes (default: a temp folder)")
    ap.add_argument("--cipher", default="", help="ssh -c CIPHER (default: the client's choice)")
    ap.add_argument("--asyncssh-ciphers", action="store_true",
                    help="the server offers asyncssh's default ciphers (v2.sftp.ciphers: []), ChaCha20 included")
    ap.add_argument("--sftp-option", action="append", default=[], help="more sftp arguments (e.g. -B 262144)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-sftp-", dir=args.dir))
    api_port, sftp_port = _free_port(), _free_port()
    (root / "config.yaml").write_text(
        f"shared_root: {root / 'shared'}\nv2:\n  sqlite: {{db_path: {root / 'argus.sqlite3'}}}\n"
        f"  api: {{port: {api_port}, max_upload_bytes: {(args.size_mb + 1) << 20}}}\n"
        f"  sftp: {{port: {sftp_port}, host: 127.0.0.1{', ciphers: []' if args.asyncssh_ciphers else ''}}}\n")
    env = {**os.environ, "ARGUS_ADMIN_TOKEN": ADMIN, "ARGUS_CONFIG": str(root / "config.yaml")}
    server = subprocess.Popen([sys.executable, "-m", "argus", "serve"], env=env, cwd=root,
                              stdout=(root / "server.log").open("wb"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{api_port}/api/v2",
                           headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        deadline = time.monotonic() + 120
        while True:
            try:
                if api.get("/sftp").json().get("enabled"):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the server did not start: see " + str(root / "server.log"))
            time.sleep(0.3)
        api.post("/users", json={"user_id": "bench"}).raise_for_status()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "id")], check=True)
        api.post("/users/bench/ssh-keys", json={"public_key": (root / "id.pub").read_text()}).raise_for_status()
        src = root / "src.bin"
        _make_file(src, args.size_mb)
        mb = args.size_mb * 1.048576  # MB (10^6 bytes), as the figures say
        ssh = ["-P", str(sftp_port), "-i", str(root / "id"), "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", "LogLevel=ERROR", *(["-c", args.cipher] if args.cipher else []), *args.sftp_option]
        (root / "up.txt").write_text("put src.bin datasets/big.bin\n")
        (root / "down.txt").write_text("get datasets/big.bin got.bin\n")
        (root / "ls.txt").write_text("ls\n")
        probe = subprocess.run(["sftp", "-v", "-b", "ls.txt", *ssh, "bench@127.0.0.1"], cwd=root,
                               capture_output=True, text=True)
        negotiated = next((line.split("cipher:", 1)[1].split()[0] for line in probe.stderr.splitlines()
                           if "client->server cipher:" in line), "?")
        cp = measure_cp(src, root / "cp.bin")
        stored = root / "shared" / "users" / "bench" / "datasets" / "big.bin"
        got = root / "got.bin"
        evict(src)
        cpu0 = _cpu_s(server.pid)
        up_s = _timed(["sftp", "-b", "up.txt", *ssh, "bench@127.0.0.1"], root)
        up_s += _timed(["sync", str(stored)], root)
        cpu1 = _cpu_s(server.pid)
        evict(stored)
        down_s = _timed(["sftp", "-b", "down.txt", *ssh, "bench@127.0.0.1"], root)
        down_s += _timed(["sync", str(got)], root)
        cpu2 = _cpu_s(server.pid)
        assert filecmp.cmp(src, stored, shallow=False), "the upload differs"
        assert filecmp.cmp(src, got, shallow=False), "the download differs"
        cipher = f"{negotiated} (server offers {'asyncssh defaults' if args.asyncssh_ciphers else 'v2.sftp.ciphers'})"
        print(f"file: {args.size_mb} MiB, disk: {root}, cipher: {cipher} "
              f"{' '.join(args.sftp_option)}, "
              f"host load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(cp.text(mb))
        print(f"sftp upload:   {mb / up_s:8.1f} MB/s ({up_s:.2f} s, read cold, + sync; server CPU {cpu1 - cpu0:.2f} s)")
        print(f"sftp download: {mb / down_s:8.1f} MB/s ({down_s:.2f} s, served cold, + sync; server CPU {cpu2 - cpu1:.2f} s)")
        verdict = Verdict()
        for ref, ref_s in (("cold", cp.cold_s), ("warm", cp.warm_s)):
            verdict.check(f"sftp upload >= 50 % of cp {ref}", up_s <= 2 * ref_s, f"{100 * ref_s / up_s:.0f} % of cp {ref}")
            verdict.check(f"sftp download >= 50 % of cp {ref}", down_s <= 2 * ref_s,
                          f"{100 * ref_s / down_s:.0f} % of cp {ref}")
        verdict.finish()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
