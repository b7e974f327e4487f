"""What a confined job may reach, as rules (pure: directory listings only), and the kernel
interface on its own (a forked child restricted to one folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus.confine import Access, Confinement, Ruleset, abi_version, carve, job_confinement, rules_for


def _tree(root: Path, *paths: str) -> None:
    for rel in paths:
        (root / rel).mkdir(parents=True, exist_ok=True)


def test_carve_grants_everything_but_the_hidden_trees(tmp_path: Path) -> None:
    _tree(tmp_path, "repo/argus/x", "repo/.argus/shared", "repo/docs", "other")
    (tmp_path / "repo" / "README.md").write_text("hi")
    (tmp_path / "repo" / "link").symlink_to(tmp_path / "repo" / ".argus")
    repo = str(tmp_path / "repo")
    got = carve(repo, [f"{repo}/.argus"])
    assert got == [f"{repo}/README.md", f"{repo}/argus", f"{repo}/docs"]  # no link, no .argus
    assert carve(repo, [str(tmp_path / "other")]) == [repo]  # nothing hidden inside
    assert carve(repo, [repo]) == []
    assert carve(repo, [f"{repo}/argus/x"]) == [f"{repo}/.argus", f"{repo}/README.md", f"{repo}/docs"]


def test_other_homes_are_never_granted_however_named(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    _tree(shared, "users/alice/code", "users/bob/code", "datasets")
    sneaky = tmp_path / "sneaky"
    sneaky.symlink_to(shared / "users" / "bob")
    conf = job_confinement(shared_root=str(shared), user="alice",
                           needed=[str(shared / "users" / "bob" / "code"), str(sneaky), str(shared / "users")],
                           extra_write=[str(shared / "users" / "bob")], hidden=[])
    paths = {rule.path: rule.access for rule in rules_for(conf)}
    assert not any("/bob" in path for path in paths), paths
    assert paths[str(shared / "users" / "alice")] == int(Access.write())
    assert paths[str(shared / "datasets")] == int(Access.read())
    assert str(shared) not in paths and "/tmp" not in paths


def test_a_needed_path_is_granted_around_the_control_planes_data(tmp_path: Path) -> None:
    _tree(tmp_path, "checkout/argus", "checkout/.argus/shared/users/alice")
    checkout = tmp_path / "checkout"
    conf = job_confinement(shared_root=str(checkout / ".argus" / "shared"), user="alice",
                           needed=[str(checkout)], hidden=[str(checkout / ".argus")])
    paths = [rule.path for rule in rules_for(conf)]
    home = str(checkout / ".argus" / "shared" / "users" / "alice")
    assert str(checkout / "argus") in paths and home in paths  # the code; the home, writable
    data = str(checkout / ".argus")
    assert str(checkout) not in paths
    assert [p for p in paths if p.startswith(data)] == [home], paths


@pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")
def test_a_restricted_child_reaches_only_what_its_rules_allow(tmp_path: Path) -> None:
    _tree(tmp_path, "mine", "theirs")
    (tmp_path / "theirs" / "secret").write_text("theirs")
    ruleset = Ruleset(abi_version())
    ruleset.allow_all(rules_for(Confinement(home=str(tmp_path / "mine"), read=["/usr", "/lib"],
                                            devices=[])))
    pid = os.fork()
    if pid == 0:  # the child: restrict, then try
        code = 0
        try:
            ruleset.restrict_self()
            (tmp_path / "mine" / "ok").write_text("mine")
            try:
                (tmp_path / "theirs" / "secret").read_text()
                code |= 1
            except PermissionError:
                pass
            try:
                (tmp_path / "theirs" / "planted").write_text("x")
                code |= 2
            except PermissionError:
                pass
        except BaseException:
            code |= 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    ruleset.close()
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "mine" / "ok").read_text() == "mine"
    assert not (tmp_path / "theirs" / "planted").exists()
