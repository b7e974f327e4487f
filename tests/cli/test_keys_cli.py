"""``argus keys add/list/rm`` against a real server: a key made by ssh-keygen registered,
listed with its fingerprint, refused twice, revoked by fingerprint; a private key refused."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import Server, run
from tests.sftp.conftest import needs_openssh


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli-keys")) as s:
        yield s


@needs_openssh
def test_keys_add_list_rm(server: Server, tmp_path: Path) -> None:
    r = run(server, "users", "create", "kim")
    assert r.exit_code == 0, r.output
    token = r.output.strip().splitlines()[-1].split(": ")[-1]
    key = tmp_path / "id_kim"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kim@laptop", "-f", str(key)], check=True)
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", f"{key}.pub"], check=True, capture_output=True,
                                 text=True).stdout.split()[1]
    r = run(server, "keys", "add", f"{key}.pub", token=token)
    assert r.exit_code == 0 and fingerprint in r.output, r.output
    r = run(server, "keys", "add", f"{key}.pub", token=token)
    assert r.exit_code != 0 and "registered already" in r.output, r.output
    r = run(server, "keys", "add", str(key), token=token)
    assert r.exit_code != 0 and "private key" in r.output, r.output
    r = run(server, "keys", "list", token=token)
    assert r.exit_code == 0 and fingerprint in r.output and "kim@laptop" in r.output, r.output
    r = run(server, "keys", "rm", fingerprint, token=token)
    assert r.exit_code == 0 and "revoked" in r.output, r.output
    r = run(server, "keys", "list", token=token)
    assert "True" in r.output, r.output
