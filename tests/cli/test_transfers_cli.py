"""``argus files put/get`` (-r) against a real server through a TCP proxy that cuts the
connection: a ~200 MB file sent with the connection cut twice arrives whole and checked,
a stopped command goes on where it stopped when run again, trees go both ways."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from argus.cli import main, transfer
from argus.cli.client import EXIT_REFUSED, Client
from tests.cli.test_cli import Server, run

SIZE = 200 * 1024 * 1024 + 12345


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to the server; while ``cuts`` is above zero, a connection
    that has carried ``after`` bytes upstream is closed (both ways), and ``cuts`` drops."""

    def __init__(self, target: str, after: int, cuts: int, upstream: bool = True,
                 then: int | None = None) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.after, self.cuts, self.cut, self.upstream = after, cuts, 0, upstream
        self.then = after if then is None else then  # where later connections are cut
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        carried = 0
        try:
            while data := src.recv(1 << 20):
                carried += len(data)
                if up == self.upstream and carried > self.after:
                    with self.lock:
                        cut = self.cuts > 0
                        if cut:
                            self.cuts -= 1
                            self.cut += 1
                            self.after = self.then
                    if cut:
                        break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli-transfers")) as s:
        yield s


@pytest.fixture(scope="module")
def fay(server: Server) -> str:
    r = run(server, "users", "create", "fay")
    assert r.exit_code == 0, r.output
    return r.output.strip().splitlines()[-1].split(": ")[-1]


def _cli(url: str, token: str, cache: Path, *args: str) -> Any:
    env = {"ARGUS_URL": url, "ARGUS_TOKEN": token, "XDG_CONFIG_HOME": "/nonexistent",
           "XDG_CACHE_HOME": str(cache)}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _generated(path: Path, size: int) -> str:
    """A file of ``size`` pseudo-random bytes, written 4 MiB at a time; its sha256."""
    h = hashlib.sha256()
    block = hashlib.sha256(b"seed").digest() * (4 * 1024 * 1024 // 32)
    with open(path, "wb") as f:
        left, i = size, 0
        while left > 0:
            piece = (i.to_bytes(8, "little") + block)[:min(len(block), left)]
            f.write(piece)
            h.update(piece)
            left -= len(piece)
            i += 1
    return h.hexdigest()


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(4 << 20):
            h.update(data)
    return h.hexdigest()


def test_a_big_file_with_the_connection_cut_twice(server: Server, fay: str, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    sha = _generated(src, SIZE)
    proxy = CuttingProxy(server.url, after=50 * 1024 * 1024, cuts=2)
    try:
        r = _cli(proxy.url, fay, tmp_path / "cache", "files", "put", "models/big.bin", str(src))
    finally:
        proxy.close()
    assert r.exit_code == 0, r.output
    assert proxy.cut == 2
    dest = Path(server.config.shared_root) / "users/fay/models/big.bin"
    assert dest.stat().st_size == SIZE and _sha(dest) == sha
    assert not list((Path(server.config.shared_root) / ".uploads/fay").iterdir())
    # Down again, cut twice too, going on with Range.
    proxy = CuttingProxy(server.url, after=60 * 1024 * 1024, cuts=2, upstream=False)
    try:
        out = tmp_path / "back.bin"
        r = _cli(proxy.url, fay, tmp_path / "cache", "files", "get", "models/big.bin", str(out))
    finally:
        proxy.close()
    assert r.exit_code == 0, r.output
    assert proxy.cut == 2 and _sha(out) == sha
    os.unlink(dest)


def test_a_stopped_upload_goes_on_when_run_again(server: Server, fay: str, tmp_path: Path) -> None:
    src = tmp_path / "mid.bin"
    sha = _generated(src, 80 * 1024 * 1024)
    cache = tmp_path / "cache"
    # One chunk gets through, then every connection is cut early: the command gives up.
    proxy = CuttingProxy(server.url, after=40 * 1024 * 1024, cuts=100, then=1024 * 1024)
    try:
        r = _cli(proxy.url, fay, cache, "files", "put", "--retries", "1", "datasets/mid.bin",
                 str(src))
    finally:
        proxy.close()
    assert r.exit_code == 3 and "run the same command again" in r.output, r.output
    staged = [p for p in (Path(server.config.shared_root) / ".uploads/fay").iterdir()
              if p.suffix == ".data"]
    assert len(staged) == 1 and staged[0].stat().st_size >= 32 * 1024 * 1024  # a chunk kept
    r = _cli(server.url, fay, cache, "files", "put", "datasets/mid.bin", str(src))
    assert r.exit_code == 0, r.output
    dest = Path(server.config.shared_root) / "users/fay/datasets/mid.bin"
    assert _sha(dest) == sha


def test_a_file_changed_while_sent_is_not_published(server: Server, fay: str,
                                                  tmp_path: Path) -> None:
    """The whole file's sha256 is hashed while sending: a file written to meanwhile (after
    its first chunk went) is caught before the last chunk, and nothing is published."""
    src = tmp_path / "moving.bin"
    _generated(src, 40 * 1024 * 1024)  # two chunks
    client = Client(server.url, fay)
    real = client.http.patch

    def patch(url: str, **kw: Any) -> Any:
        r = real(url, **kw)
        with open(src, "r+b") as f:  # the job writing it is not done
            f.seek(0, os.SEEK_END)
            f.write(b"more")
        return r

    client.http.patch = patch  # type: ignore[method-assign]
    shared = Path(server.config.shared_root)
    folder = shared / ".uploads/fay"
    staged = set(folder.iterdir()) if folder.is_dir() else set()  # other tests' uploads
    with pytest.raises(SystemExit) as exc:
        transfer.upload_file(client, src, "datasets/moving.bin",
                             transfer.StateFile(tmp_path / "t.json"), transfer.Progress(_Bar()))
    assert exc.value.code == EXIT_REFUSED
    assert not (shared / "users/fay/datasets/moving.bin").exists()
    assert set(folder.iterdir()) == staged  # its upload deleted


class _Bar:
    def update(self, n: int) -> None:
        pass


def test_trees_both_ways_and_housekeeping(server: Server, fay: str, tmp_path: Path) -> None:
    tree = tmp_path / "gsm8k"
    (tree / "sub/deeper").mkdir(parents=True)
    (tree / "train.jsonl").write_text('{"q": 1}\n' * 1000)
    (tree / "sub/test.jsonl").write_text('{"q": 2}\n')
    (tree / "sub/deeper/empty").write_bytes(b"")
    (tree / "link").symlink_to("/etc/passwd")
    cache = tmp_path / "cache"
    r = _cli(server.url, fay, cache, "files", "put", "-r", "datasets/gsm8k", str(tree))
    assert r.exit_code == 0, r.output
    assert "3 files" in r.output and "skipped" in r.output
    root = Path(server.config.shared_root) / "users/fay/datasets/gsm8k"
    assert (root / "sub/test.jsonl").read_text() == '{"q": 2}\n'
    assert not (root / "link").exists()
    back = tmp_path / "back"
    r = _cli(server.url, fay, cache, "files", "get", "-r", "datasets/gsm8k", str(back))
    assert r.exit_code == 0, r.output
    assert (back / "train.jsonl").read_text() == (tree / "train.jsonl").read_text()
    assert (back / "sub/deeper/empty").read_bytes() == b""
    r = _cli(server.url, fay, cache, "files", "mkdir", "models/new/folder")
    assert r.exit_code == 0 and (root.parent.parent / "models/new/folder").is_dir()
    r = _cli(server.url, fay, cache, "files", "mv", "datasets/gsm8k", "datasets/gsm8k-v2")
    assert r.exit_code == 0, r.output
    assert (root.parent / "gsm8k-v2/sub/test.jsonl").is_file()
    r = _cli(server.url, fay, cache, "files", "rm", "datasets/gsm8k-v2")
    assert r.exit_code == 1 and "argus files rm -r" in r.output
    r = _cli(server.url, fay, cache, "files", "rm", "-r", "datasets/gsm8k-v2")
    assert r.exit_code == 0 and not (root.parent / "gsm8k-v2").exists()
    r = _cli(server.url, fay, cache, "files", "ls")
    assert "storage:" in r.output and "used" in r.output
