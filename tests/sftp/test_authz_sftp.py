"""The authorization matrix (tests/api/test_authz.py) over SFTP: every operation × {no key,
a stranger's key, a disabled user's key, alice, bob, admin} through a real SSH connection
(asyncssh's client). What bob and admin see of alice's files is counted as leaks: 0."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import asyncssh
import pytest

from tests.sftp.conftest import Door, keygen, needs_openssh

pytestmark = needs_openssh

SID = "t1--a01"
SECRET = b"alice-secret-bytes-7f3a"
OK, DENIED, MISSING, FAILED = "ok", "denied", "missing", "failed"
Op = Callable[[asyncssh.SFTPClient], Awaitable[Any]]


def _put(path: str) -> Op:
    async def op(s: asyncssh.SFTPClient) -> Any:
        async with s.open(path, "wb") as f:
            await f.write(b"abc")
    return op


def _get(path: str) -> Op:
    async def op(s: asyncssh.SFTPClient) -> Any:
        async with s.open(path, "rb") as f:
            return await f.read()
    return op


# (what, operation, expected for alice, bob, admin)
ROWS: list[tuple[str, Op, dict[str, str]]] = [
    ("ls /", lambda s: s.listdir("/"), {"alice": OK, "bob": OK, "admin": OK}),
    ("ls /datasets", lambda s: s.listdir("/datasets"), {"alice": OK, "bob": OK, "admin": OK}),
    ("get /datasets/toy/train.jsonl", _get("/datasets/toy/train.jsonl"), {"alice": OK, "bob": MISSING, "admin": MISSING}),
    ("stat /datasets/toy", lambda s: s.stat("/datasets/toy"), {"alice": OK, "bob": MISSING, "admin": MISSING}),
    ("put /models/m.bin", _put("/models/m.bin"), {"alice": OK, "bob": OK, "admin": OK}),
    ("rm /datasets/toy/train.jsonl", lambda s: s.remove("/datasets/toy/train.jsonl"),
     {"alice": OK, "bob": MISSING, "admin": MISSING}),
    ("mkdir /code/new", lambda s: s.mkdir("/code/new"), {"alice": OK, "bob": OK, "admin": OK}),
    ("rename /datasets/toy → /models/toy", lambda s: s.rename("/datasets/toy", "/models/toy"),
     {"alice": OK, "bob": MISSING, "admin": MISSING}),
    ("ls /jobs", lambda s: s.listdir("/jobs"), {"alice": OK, "bob": OK, "admin": OK}),
    (f"get /jobs/{SID}/driver.log", _get(f"/jobs/{SID}/driver.log"), {"alice": OK, "bob": MISSING, "admin": MISSING}),
    (f"get /jobs/{SID}/planted", _get(f"/jobs/{SID}/planted"), {"alice": DENIED, "bob": MISSING, "admin": MISSING}),
    ("put /jobs/x", _put("/jobs/x"), {"alice": DENIED, "bob": DENIED, "admin": DENIED}),
    # An attempt the log does not know as ended (here: not at all) is not deleted.
    (f"rm /jobs/{SID}/driver.log", lambda s: s.remove(f"/jobs/{SID}/driver.log"),
     {"alice": DENIED, "bob": DENIED, "admin": DENIED}),
    ("ls /common/datasets", lambda s: s.listdir("/common/datasets"), {"alice": OK, "bob": OK, "admin": OK}),
    ("put /common/datasets/x", _put("/common/datasets/x"), {"alice": DENIED, "bob": DENIED, "admin": OK}),
    ("mkdir /common/hf/m", lambda s: s.mkdir("/common/hf/m"), {"alice": DENIED, "bob": DENIED, "admin": OK}),
    ("put /x", _put("/x"), {"alice": MISSING, "bob": MISSING, "admin": MISSING}),
    ("get /../users/alice/datasets/toy/train.jsonl", _get("/../users/alice/datasets/toy/train.jsonl"),
     {"alice": MISSING, "bob": MISSING, "admin": MISSING}),
    ("ls /users", lambda s: s.listdir("/users"), {"alice": MISSING, "bob": MISSING, "admin": MISSING}),
    ("symlink", lambda s: s.symlink("/etc/passwd", "/datasets/pw"), {"alice": DENIED, "bob": DENIED, "admin": DENIED}),
    ("readlink", lambda s: s.readlink(f"/jobs/{SID}/planted"), {"alice": DENIED, "bob": DENIED, "admin": DENIED}),
]


def _setup(door: Door) -> None:
    toy = door.home("alice") / "datasets" / "toy"
    toy.mkdir(parents=True, exist_ok=True)
    (toy / "train.jsonl").write_bytes(SECRET)
    job = door.home("alice") / "jobs" / SID
    job.mkdir(parents=True, exist_ok=True)
    (job / "driver.log").write_bytes(SECRET)
    if not (job / "planted").is_symlink():
        os.symlink("/etc/passwd", job / "planted")
    for p in (door.home("alice") / "models" / "toy", door.home("alice") / "code" / "new"):
        if p.exists():
            for child in p.iterdir():
                child.unlink()
            p.rmdir()
    for p in (door.shared / "datasets" / "x",):
        p.unlink(missing_ok=True)
    if (door.shared / "hf" / "m").exists():
        (door.shared / "hf" / "m").rmdir()
    (door.shared / "datasets").mkdir(parents=True, exist_ok=True)
    (door.shared / "hf").mkdir(parents=True, exist_ok=True)


def _outcome(exc: BaseException | None) -> str:
    if exc is None:
        return OK
    if isinstance(exc, (asyncssh.SFTPPermissionDenied,)):
        return DENIED
    if isinstance(exc, (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath)):
        return MISSING
    return FAILED


async def _connect(door: Door, user: str, key: Path) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect("127.0.0.1", door.port, username=user, known_hosts=None,
                                  client_keys=[asyncssh.read_private_key(key)], password=None,
                                  preferred_auth="publickey")


async def test_sftp_matrix(door: Door) -> None:
    # A disabled user's registered key, and a key nobody registered.
    dave_key = keygen(door.tmp / "id_dave")
    r = await door.env.client.post("/api/v2/users/dave/ssh-keys", headers=door.env.h("admin"),
                                   json={"public_key": (door.tmp / "id_dave.pub").read_text()})
    assert r.status_code == 201, r.text
    stranger = keygen(door.tmp / "id_stranger")
    for user, key in (("dave", dave_key), ("alice", stranger), ("bob", door.keys["alice"]),
                      ("admin", door.keys["bob"])):
        with pytest.raises(asyncssh.PermissionDenied):
            await _connect(door, user, key)

    leaks: list[str] = []
    wrong: list[str] = []
    for who in ("bob", "admin", "alice"):
        async with await _connect(door, who, door.keys[who]) as conn:
            async with conn.start_sftp_client() as sftp:
                for what, op, expected in ROWS:
                    _setup(door)
                    error: BaseException | None = None
                    result: Any = None
                    try:
                        result = await op(sftp)
                    except asyncssh.SFTPError as exc:
                        error = exc
                    got = _outcome(error)
                    if got != expected[who]:
                        wrong.append(f"{who} {what}: {got} (want {expected[who]}): {error}")
                    # A leak: alice's bytes, or names only she has, in what the others get back
                    # (an error may repeat the path they asked for, nothing more), or the
                    # server's own paths in anything anyone gets.
                    if str(door.shared) in f"{result!r} {error}":
                        leaks.append(f"{who} {what}: a server path: {error}")
                    if who != "alice" and (SECRET.decode() in f"{result!r} {error}" or any(
                            name in repr(result) for name in ("toy", "driver.log", SID, "planted"))):
                        leaks.append(f"{who} {what}: {result!r:.200} {error}")
    assert not wrong, "\n".join(wrong)
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks)
    # Nothing of alice's was made or moved by the others; what they wrote is their own.
    assert sorted(os.listdir(door.home("bob") / "datasets")) == []
    assert (door.home("bob") / "models" / "m.bin").read_bytes() == b"abc"
    assert (door.home("admin") / "models" / "m.bin").read_bytes() == b"abc"
