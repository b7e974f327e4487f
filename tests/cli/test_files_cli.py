"""``argus files`` against a real server: the jobs area (ls, get to stdout with ``-`` or
to a folder), and names no URL can carry refused with a message, not a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli import Server, run

SID = "erin-ppo-20250101-120000-7f3a--a01"
LOG = "starting\nstep:1 - loss:1.0\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli-files")) as s:
        yield s


@pytest.fixture(scope="module")
def erin(server: Server) -> str:
    """A user with one attempt's folder written as a job leaves it; their token."""
    r = run(server, "users", "create", "erin")
    assert r.exit_code == 0, r.output
    job = Path(server.config.shared_root) / "users" / "erin" / "jobs" / SID
    (job / "checkpoints").mkdir(parents=True)
    (job / "driver.log").write_text(LOG)
    (job / "metrics.jsonl").write_text('{"step": 1, "data": {"loss": 1.0}}\n')
    (job / "planted").symlink_to("/etc/passwd")
    return r.output.strip().splitlines()[-1].split(": ")[-1]


def test_ls_jobs(server: Server, erin: str) -> None:
    r = run(server, "files", "ls", token=erin)
    assert r.exit_code == 0 and "jobs" in r.output.split()
    r = run(server, "files", "ls", "jobs", token=erin)
    assert r.exit_code == 0, r.output
    assert f"{SID}/" in r.output and "dir" in r.output
    r = run(server, "files", "ls", f"jobs/{SID}/", token=erin)
    assert r.exit_code == 0, r.output
    lines = {line.split()[0]: line.split() for line in r.output.splitlines()[1:]}
    assert set(lines) == {"checkpoints/", "driver.log", "metrics.jsonl", "planted@"}
    assert lines["driver.log"][1:3] == ["file", str(len(LOG))]
    assert lines["planted@"][1] == "link"


def test_get_to_stdout_with_a_dash(server: Server, erin: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run(server, "files", "get", f"jobs/{SID}/driver.log", "-", token=erin)
    assert r.exit_code == 0, r.output
    assert r.stdout == LOG
    assert not (tmp_path / "-").exists()
    r = run(server, "files", "get", f"jobs/{SID}/driver.log", token=erin)
    assert r.stdout == LOG


def test_get_into_a_folder_or_a_file(server: Server, erin: str, tmp_path: Path) -> None:
    r = run(server, "files", "get", f"jobs/{SID}/driver.log", str(tmp_path), token=erin)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "driver.log").read_text() == LOG
    r = run(server, "files", "get", f"jobs/{SID}/metrics.jsonl", str(tmp_path / "m.jsonl"),
            token=erin)
    assert r.exit_code == 0 and (tmp_path / "m.jsonl").read_text().startswith('{"step": 1')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver.log", "m.jsonl"]
    r = run(server, "files", "get", f"jobs/{SID}/driver.log", f"{tmp_path}/missing/", token=erin)
    assert r.exit_code == 2 and "no such folder" in r.output


def test_get_refusals(server: Server, erin: str, tmp_path: Path) -> None:
    r = run(server, "files", "get", f"jobs/{SID}", str(tmp_path / "x"), token=erin)
    assert r.exit_code == 2 and "is a folder" in r.output
    assert not list(tmp_path.iterdir())
    r = run(server, "files", "get", f"jobs/{SID}/planted", "-", token=erin)
    assert r.exit_code == 1 and "symbolic link" in r.output and "root:" not in r.output
    r = run(server, "files", "get", f"jobs/{SID}/driver.log", "-")  # the admin: not theirs
    assert r.exit_code == 1 and "404" in r.output


def test_put_refusals(server: Server, erin: str, tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("x")
    r = run(server, "files", "put", "datasets/a\nb.txt", str(src), token=erin)
    assert r.exit_code == 2 and "cannot contain '\\n'" in r.output
    assert "Traceback" not in r.output
    r = run(server, "files", "put", f"jobs/{SID}/x.txt", str(src), token=erin)
    assert r.exit_code == 1 and "jobs is written by your tasks" in r.output
    r = run(server, "files", "rm", f"jobs/{SID}/driver.log", token=erin)  # no task of hers: nothing deleted
    assert r.exit_code == 1 and "409" in r.output, r.output


def test_names_with_url_characters_round_trip(server: Server, erin: str, tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("hash")
    r = run(server, "files", "put", "datasets/odd/a #1?.txt", str(src), token=erin)
    assert r.exit_code == 0, r.output
    r = run(server, "files", "ls", "datasets/odd", token=erin)
    assert "a #1?.txt" in r.output
    r = run(server, "files", "get", "datasets/odd/a #1?.txt", "-", token=erin)
    assert r.stdout == "hash"
