"""The SFTP door with the real OpenSSH ``sftp`` and ``scp`` clients: trees put and got
byte for byte, resumed transfers, confinement (bob, planted links, common), and a revoked
key or disabled user cut off, open sessions included."""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import os
from pathlib import Path

from tests.sftp.conftest import Door, keygen, needs_openssh

pytestmark = needs_openssh


def _tree(root: Path) -> Path:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    (root / "a" / "x.txt").write_text("x\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "c d").mkdir()
    (root / "c d" / "space name.jsonl").write_text('{"p": 1}\n')
    return root


def _same(a: Path, b: Path) -> None:
    cmp = filecmp.dircmp(a, b)
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files), cmp.report()
    for f in cmp.common_files:
        assert (a / f).read_bytes() == (b / f).read_bytes()
    for d in cmp.common_dirs:
        _same(a / d, b / d)


async def test_tree_put_and_get_with_sftp_and_scp(door: Door) -> None:
    tree = _tree(door.tmp / "tree")
    rc, out = await door.sftp("alice", "put -r tree datasets/\nget -r datasets/tree got\n")
    assert rc == 0, out
    _same(tree, door.home("alice") / "datasets" / "tree")
    _same(tree, door.tmp / "got")
    # scp (OpenSSH 9 speaks SFTP underneath; -O would be the old protocol, served too)
    for legacy in ([], ["-O"]):
        dest = f"scp{len(legacy)}"
        proc = await asyncio.create_subprocess_exec(
            "scp", *legacy, "-r", *door.ssh_options("alice"), str(tree), f"alice@127.0.0.1:models/{dest}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out_b, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out_b
        _same(tree, door.home("alice") / "models" / dest)
        back = door.tmp / f"back{len(legacy)}"
        proc = await asyncio.create_subprocess_exec(
            "scp", *legacy, "-r", *door.ssh_options("alice"), f"alice@127.0.0.1:models/{dest}", str(back),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out_b, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, out_b
        _same(tree, back)


async def test_reput_and_reget_resume(door: Door) -> None:
    data = os.urandom(5 * 1024 * 1024 + 123)
    (door.tmp / "big.bin").write_bytes(data)
    # What a dropped upload leaves: the first 2 MiB.
    (door.home("alice") / "datasets").mkdir(parents=True, exist_ok=True)
    (door.home("alice") / "datasets" / "big.bin").write_bytes(data[: 2 << 20])
    (door.tmp / "part.bin").write_bytes(data[: 3 << 20])
    rc, out = await door.sftp("alice", "reput big.bin datasets/big.bin\nreget datasets/big.bin part.bin\n")
    assert rc == 0, out
    assert (door.home("alice") / "datasets" / "big.bin").read_bytes() == data
    assert (door.tmp / "part.bin").read_bytes() == data


async def test_bob_sees_only_his_view(door: Door) -> None:
    secret = b"alice-only-" + os.urandom(8).hex().encode()
    (door.home("alice") / "datasets" / "s").mkdir(parents=True, exist_ok=True)
    (door.home("alice") / "datasets" / "s" / "secret.txt").write_bytes(secret)
    (door.tmp / "f.txt").write_text("bob's")
    tries = [
        "ls -l datasets", "ls -l /", "ls -l ..", "ls -l ../..", "ls -l /../alice", "ls -l /alice/datasets",
        "get /datasets/s/secret.txt out1", "get ../alice/datasets/s/secret.txt out2",
        "get /../../users/alice/datasets/s/secret.txt out3", "ls -l /users", "ls -l /common/../../alice",
        "put f.txt /alice/datasets/s/x", "put f.txt ../alice/datasets/s/x", "mkdir /alice",
        "rm /datasets/s/secret.txt", "rename /datasets/s /datasets/t", "ls -l /etc", "get /etc/passwd out4",
        "symlink /etc/passwd datasets/pw",
    ]
    outs = []
    for line in tries:
        rc, out = await door.sftp("bob", f"-{line}\n")
        outs.append(out)
    text = "\n".join(outs)
    assert secret.decode() not in text, text
    listed = [ln for ln in text.splitlines() if ln[:1] in "-dl" and ln[1:10].strip("rwxs-") == ""]
    assert not any("secret" in ln for ln in listed), listed
    assert not any((door.tmp / f"out{i}").exists() for i in range(1, 5))
    assert (door.home("alice") / "datasets" / "s" / "secret.txt").read_bytes() == secret
    assert sorted(os.listdir(door.home("alice") / "datasets" / "s")) == ["secret.txt"]
    assert not (door.home("bob") / "datasets" / "pw").exists()
    # What bob can do lands in bob's own area only.
    rc, out = await door.sftp("bob", "put f.txt datasets/f.txt\n")
    assert rc == 0, out
    assert (door.home("bob") / "datasets" / "f.txt").read_text() == "bob's"
    assert not (door.home("alice") / "datasets" / "f.txt").exists()


async def test_planted_links_are_not_followed(door: Door) -> None:
    bob_secret = door.home("bob") / "datasets" / "secret.txt"
    bob_secret.parent.mkdir(parents=True, exist_ok=True)
    bob_secret.write_text("bob-only")
    attempt = door.home("alice") / "jobs" / "t1--a01"
    attempt.mkdir(parents=True)
    (attempt / "driver.log").write_text("step:1\n")
    os.symlink(bob_secret, attempt / "secret")
    os.symlink(door.home("bob"), attempt / "bobhome")
    os.symlink("/etc", attempt / "etc")
    os.symlink(door.home("bob") / "datasets", door.home("alice") / "datasets" / "bobdata")
    (door.tmp / "f.txt").write_text("planted?")
    for line in ["get jobs/t1--a01/secret o1", "get jobs/t1--a01/bobhome/datasets/secret.txt o2",
                 "get jobs/t1--a01/etc/passwd o3", "ls jobs/t1--a01/bobhome/datasets",
                 "get datasets/bobdata/secret.txt o4", "put f.txt datasets/bobdata/x",
                 "put f.txt jobs/t1--a01/x", "rm jobs/t1--a01/driver.log", "mkdir jobs/new"]:
        rc, out = await door.sftp("alice", f"{line}\n")
        assert rc != 0, (line, out)
        assert "bob-only" not in out and "root:" not in out
    assert not any((door.tmp / f"o{i}").exists() for i in range(1, 5))
    assert sorted(os.listdir(door.home("bob") / "datasets")) == ["secret.txt"]
    rc, out = await door.sftp("alice", "ls -l jobs/t1--a01\nget jobs/t1--a01/driver.log d.log\n")
    assert rc == 0, out
    assert (door.tmp / "d.log").read_text() == "step:1\n"
    assert any(line.startswith("l") and "secret" in line for line in out.splitlines()), out


async def test_common_is_read_only_to_users(door: Door) -> None:
    (door.shared / "datasets").mkdir(parents=True, exist_ok=True)
    (door.shared / "datasets" / "gsm8k.jsonl").write_text("{}\n")
    (door.tmp / "f.txt").write_text("data")
    for line in ["put f.txt common/datasets/x", "mkdir common/hf/models--x", "rm common/datasets/gsm8k.jsonl",
                 "rename common/datasets/gsm8k.jsonl common/datasets/y", "put f.txt common/x", "mkdir /x"]:
        rc, out = await door.sftp("alice", f"{line}\n")
        assert rc != 0, (line, out)
    assert os.listdir(door.shared / "datasets") == ["gsm8k.jsonl"]
    # Listings say which areas are writable (hf not made yet: an empty read-only folder).
    rc, out = await door.sftp("alice", "ls -l\nls -l common\nls -l common/hf\n")
    assert rc == 0, out
    home, common = out.split("sftp> ls -l common\n")[0], out.split("sftp> ls -l common\n")[1]
    modes = {line.split()[-1]: line.split()[0] for line in home.splitlines() if line[:1] == "d"}
    shared = {line.split()[-1]: line.split()[0] for line in common.splitlines() if line[:1] == "d"}
    assert modes["datasets"].startswith("drwx") and modes["jobs"] == modes["common"] == "dr-xr-xr-x", out
    assert shared == {"datasets": "dr-xr-xr-x", "hf": "dr-xr-xr-x"}, out
    rc, out = await door.sftp("alice", "get common/datasets/gsm8k.jsonl g.jsonl\n")
    assert rc == 0 and (door.tmp / "g.jsonl").read_text() == "{}\n", out
    rc, out = await door.sftp("admin", "put f.txt common/datasets/new.jsonl\n")  # admins curate common
    assert rc == 0, out
    assert (door.shared / "datasets" / "new.jsonl").read_text() == "data"


async def _open_session(door: Door, user: str, key: Path | None = None) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        "sftp", *door.ssh_options(user, key), f"{user}@127.0.0.1", cwd=door.tmp,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"ls\n")
    await proc.stdin.drain()
    seen = b""
    while b"datasets" not in seen:  # the session is open and served
        chunk = await asyncio.wait_for(proc.stdout.read(4096), 60)
        assert chunk, seen
        seen += chunk
    return proc


async def _cut_off(proc: asyncio.subprocess.Process) -> None:
    """The open session is closed by the server: the client's next command finds the
    connection gone and it exits with an error (generous deadline, polled)."""
    assert proc.stdin is not None
    try:
        for _ in range(300):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ConnectionError):
                proc.stdin.write(b"ls\n")
                await proc.stdin.drain()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.1)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
            raise AssertionError("the session was not cut off")
    assert proc.returncode != 0


async def test_revoked_key_is_refused_at_once_and_its_session_cut(door: Door) -> None:
    key = keygen(door.tmp / "id_laptop")
    h = door.env.h("alice")
    r = await door.env.client.post("/api/v2/users/alice/ssh-keys", headers=h,
                                   json={"public_key": (door.tmp / "id_laptop.pub").read_text(), "label": "laptop"})
    assert r.status_code == 201, r.text
    key_id = r.json()["key_id"]
    session = await _open_session(door, "alice", key)
    other = await _open_session(door, "alice")  # another key of hers: stays open
    r = await door.env.client.delete(f"/api/v2/users/alice/ssh-keys/{key_id}", headers=h)
    assert r.status_code == 200 and r.json()["revoked"] is True, r.text
    rc, out = await door.sftp("alice", "ls\n", key=key)
    assert rc != 0 and "Permission denied" in out, out
    await _cut_off(session)
    assert other.returncode is None
    other.kill()
    await other.wait()


async def test_disabled_user_is_cut_off(door: Door) -> None:
    session = await _open_session(door, "bob")
    r = await door.env.client.post("/api/v2/users/bob/disable", headers=door.env.h("admin"))
    assert r.status_code == 200
    await _cut_off(session)
    rc, out = await door.sftp("bob", "ls\n")
    assert rc != 0 and "Permission denied" in out, out


async def test_token_as_password(door: Door) -> None:
    """v2.sftp.password_auth: the API token is the password (sshpass-free: asyncssh client)."""
    import asyncssh

    async with asyncssh.connect("127.0.0.1", door.port, username="alice", password=door.env.tokens["alice"],
                                known_hosts=None, client_keys=None) as conn:
        async with conn.start_sftp_client() as sftp:
            assert "datasets" in await sftp.listdir("/")
    # A token of bob's as his password; revoked, its open session is closed.
    r = await door.env.client.post("/api/v2/users/bob/tokens", json={"label": "sftp"}, headers=door.env.h("bob"))
    token, token_id = r.json()["token"], r.json()["token_id"]
    conn = await asyncssh.connect("127.0.0.1", door.port, username="bob", password=token, known_hosts=None,
                                  client_keys=None)
    try:
        sftp = await conn.start_sftp_client()
        assert "jobs" in await sftp.listdir("/")
        r = await door.env.client.delete(f"/api/v2/users/bob/tokens/{token_id}", headers=door.env.h("bob"))
        assert r.status_code == 200
        for _ in range(300):
            try:
                await sftp.listdir("/")
            except (asyncssh.Error, ConnectionError, asyncssh.misc.ChannelOpenError):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the session opened with a revoked token was not closed")
    finally:
        conn.close()
    for user, password in (("bob", door.env.tokens["alice"]), ("alice", "not-a-token")):
        try:
            async with asyncssh.connect("127.0.0.1", door.port, username=user, password=password,
                                        known_hosts=None, client_keys=None):
                raise AssertionError(f"{user} got in with a wrong password")
        except asyncssh.PermissionDenied:
            pass


async def _task_with_attempt(door: Door, ended: bool) -> str:
    """A task of alice's through the API, and its first attempt's events as the reactor
    appends them (ended, or still running); returns the attempt's folder name."""
    from argus.events import task_stream
    from argus.store import AppendBatch
    from tests.api.conftest import ADVANCED, put_dataset
    from tests.events import factories as f

    put_dataset(door.shared, "alice")
    r = await door.env.client.post("/api/v2/tasks", content=ADVANCED,
                                   headers={**door.env.h("alice"), "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    tid = r.json()["task_id"]
    events = [f.starting(tid), f.attempt_submitted(tid), f.running(tid)]
    if ended:
        events += [f.ended(tid, 1, "SUCCEEDED", exit_code=0), f.succeeded(tid)]
    await door.env.store.append_batches([AppendBatch(stream=task_stream(tid), expected_version=None,
                                                     events=events, owner="alice")])
    folder = door.home("alice") / "jobs" / f"{tid}--a01"
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    (folder / "checkpoints" / "step_1.pt").write_bytes(b"w" * 1000)
    (folder / "driver.log").write_text("done\n")
    return f"{tid}--a01"


async def test_a_finished_attempt_is_deletable_a_running_one_is_not(door: Door) -> None:
    done = await _task_with_attempt(door, ended=True)
    running = await _task_with_attempt(door, ended=False)
    rc, out = await door.sftp("alice", f"rm jobs/{running}/driver.log\n")
    assert rc != 0 and "Permission denied" in out, out
    assert (door.home("alice") / "jobs" / running / "driver.log").exists()
    # bob cannot delete alice's (he does not even see it), whatever its state.
    rc, out = await door.sftp("bob", f"rm jobs/{done}/driver.log\n")
    assert rc != 0, out
    assert (door.home("alice") / "jobs" / done / "driver.log").exists()
    rc, out = await door.sftp("alice", f"rm jobs/{done}/checkpoints/step_1.pt\nrmdir jobs/{done}/checkpoints\n"
                                       f"rm jobs/{done}/driver.log\nrmdir jobs/{done}\n")
    assert rc == 0, out
    assert not (door.home("alice") / "jobs" / done).exists()
    assert (door.home("alice") / "jobs" / running / "driver.log").exists()
    rc, out = await door.sftp("alice", f"put /dev/null jobs/{running}/x\nmkdir jobs/{done}\n")
    assert rc != 0, out


async def test_a_hard_link_is_not_written_through(door: Door) -> None:
    """A job can hard-link a file it can reach into alice's area; writing (or truncating)
    it through the door would change the other name too: refused, the file untouched."""
    bob_file = door.home("bob") / "datasets" / "kept.bin"
    bob_file.parent.mkdir(parents=True, exist_ok=True)
    bob_file.write_bytes(b"bob's bytes")
    os.link(bob_file, door.home("alice") / "datasets" / "linked.bin")
    (door.tmp / "f.txt").write_text("overwrite")
    rc, out = await door.sftp("alice", "put f.txt datasets/linked.bin\n")
    assert rc != 0, out
    assert bob_file.read_bytes() == b"bob's bytes"
