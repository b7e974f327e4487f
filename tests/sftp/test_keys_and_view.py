"""SSH keys (parsing, the ssh_keys projection's rules, its rebuild) and the SFTP view's
path mapping, without a server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from argus import safefs
from argus.events import user_stream
from argus.service.sshkeys import KeyRefused, parse_public_key
from argus.sftp.view import normalize, resolve
from argus.store import AppendBatch, InvariantViolation
from projections import open_store
from projections.ssh_keys import ssh_key_login, user_ssh_keys
from tests.events import factories as f
from tests.projections.compare import assert_projections_match_rebuild
from tests.sftp.conftest import keygen, needs_openssh


def _keygen(path: Path, *args: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-C", "me@host", *args, "-f", str(path)], check=True)
    return path


@needs_openssh
def test_parse_public_key(tmp_path: Path) -> None:
    key = keygen(tmp_path / "id")
    text = (tmp_path / "id.pub").read_text()
    parsed = parse_public_key(text)
    want = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "id.pub")], capture_output=True, text=True,
                          check=True).stdout.split()[1]
    assert parsed.fingerprint == want and parsed.line == " ".join(text.split()[:2])
    with pytest.raises(KeyRefused, match="private key"):
        parse_public_key(key.read_text())
    with pytest.raises(KeyRefused, match="one public key"):
        parse_public_key(text + text)
    with pytest.raises(KeyRefused, match="not an OpenSSH public key"):
        parse_public_key("ssh-ed25519 AAAAnot-base64")
    with pytest.raises(KeyRefused, match="empty"):
        parse_public_key("  \n")
    weak = _keygen(tmp_path / "rsa1024", "-t", "rsa", "-b", "1024")
    with pytest.raises(KeyRefused, match="1024 bits is too weak"):
        parse_public_key(Path(f"{weak}.pub").read_text())
    strong = _keygen(tmp_path / "rsa3072", "-t", "rsa", "-b", "3072")
    assert parse_public_key(Path(f"{strong}.pub").read_text()).fingerprint.startswith("SHA256:")


def _batch(user: str, *events: object) -> AppendBatch:
    return AppendBatch(stream=user_stream(user), expected_version=None, events=list(events), owner=user)


async def test_a_fingerprint_names_one_user_and_the_tables_rebuild(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    store = await open_store(db, synchronous="OFF")
    try:
        await store.append_batches([_batch("alice", f.user_created("alice"))])
        await store.append_batches([_batch("bob", f.user_created("bob"))])
        await store.append_batches([_batch("alice", f.ssh_key_added("alice", "SHA256:a"))])
        with pytest.raises(InvariantViolation, match="registered already"):
            await store.append_batches([_batch("bob", f.ssh_key_added("bob", "SHA256:a"))])
        with pytest.raises(InvariantViolation, match="not found"):
            await store.append_batches([_batch("bob", f.ssh_key_revoked("bob", "SHA256:a"))])
        login = await store.read_snapshot(lambda d: ssh_key_login(d, "SHA256:a"))
        assert login is not None and login.user_id == "alice"
        await store.append_batches([_batch("alice", f.ssh_key_revoked("alice", "SHA256:a"))])
        assert await store.read_snapshot(lambda d: ssh_key_login(d, "SHA256:a")) is None
        # Revoked, the key may be registered again (here by bob, who made it anew).
        await store.append_batches([_batch("bob", f.ssh_key_added("bob", "SHA256:a"))])
        keys = await store.read_snapshot(lambda d: user_ssh_keys(d, "bob"))
        assert [(k.fingerprint, k.revoked) for k in keys] == [("SHA256:a", False)]
    finally:
        await store.close()
    assert_projections_match_rebuild(db, tmp_path / "scratch.sqlite3")


def test_the_view_maps_paths_textually(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    assert normalize(b"/../../etc/passwd") == "/etc/passwd"
    assert normalize(b"datasets/../..//models/./m") == "/models/m"
    t = resolve(shared, "bob", b"/../datasets/a/b", may_write_common=False)
    assert (t.base, t.names, t.writable, t.parts) == (str(shared / "users"), ("bob", "datasets", "a", "b"), True, ("a", "b"))
    t = resolve(shared, "bob", b"/common/hf/models--x", may_write_common=False)
    assert (t.base, t.names, t.writable) == (str(shared), ("hf", "models--x"), False)
    assert resolve(shared, "root", b"/common/datasets", may_write_common=True).writable
    assert not resolve(shared, "bob", b"/jobs/x", may_write_common=True).writable
    assert resolve(shared, "bob", b"/", may_write_common=False).virtual == ("datasets", "models", "code", "jobs", "common")
    for bad, status in ((b"/users/alice", 404), (b"/etc", 404), (b"/common/x", 404), (b"/datasets/a\x00b", 400),
                        (b"/datasets/" + b"a/" * 70, 400), (b"/datasets/" + b"x" * 256, 400)):
        with pytest.raises(safefs.Refused) as refused:
            resolve(shared, "bob", bad, may_write_common=False)
        assert refused.value.status == status, bad
