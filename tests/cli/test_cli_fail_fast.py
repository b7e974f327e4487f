"""The CLI prints what the server refused and why: every TaskSpec problem on its own line,
a bad user id with the rule in words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from argus.cli.client import refusal_text
from tests.cli.test_cli import Server, run

BAD_SPEC = """\
workload: ppo
nnodes: 0
n_gpu_per_node: 1
model_id: Qwen/Qwen2.5-0.5B-Instruct
train_file: $HOME/datasets/toy/missing.jsonl
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli-fail-fast")) as s:
        yield s


def test_users_create_with_a_bad_id_prints_the_rule(server: Server) -> None:
    r = run(server, "users", "create", "bob.smith")
    assert r.exit_code == 1
    assert ("error: 400: user id 'bob.smith' is not allowed: use 1 to 32 characters: lowercase "
            "letters (a-z), digits, '_' or '-', starting with a letter, e.g. 'bob_smith'") in r.output
    assert "Validation failed" not in r.output
    assert "bob.smith" not in run(server, "users", "list").output


@pytest.mark.parametrize("validate", [False, True])
def test_submit_prints_every_problem_one_per_line(server: Server, tmp_path: Path, validate: bool) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)
    r = run(server, "submit", *(["--validate"] if validate else []), str(spec))
    assert r.exit_code == 1
    lines = r.output.splitlines()
    expected = [
        "n_gpu_per_node: unknown field; did you mean n_gpus_per_node?",
        "nnodes: Expected `int` >= 1; accepted: an integer from 1 to 1024",
        "train_file: '$HOME/datasets/toy/missing.jsonl' does not exist",
    ]
    for text in expected:
        assert sum(line.strip().removeprefix("error: ").startswith(text) for line in lines) == 1, r.output
    if not validate:
        assert lines[0] == "error: 400: 3 problems:"


def test_refusal_text() -> None:
    one = {"errors": [{"field": "nnodes", "message": "m"}]}
    assert refusal_text(400, "nnodes: m", one) == "400: nnodes: m"
    two = {"errors": [{"field": "a", "message": "x"}, {"field": "", "message": "y"}]}
    assert refusal_text(400, "the TaskSpec has 2 problems: a: x; y", two) == "400: 2 problems:\n  a: x\n  y"
    # Litestar's own validation errors: a list of {key, message}.
    litestar = [{"key": "user_id", "message": "Expected `str`, got `int`", "source": "body"}]
    assert refusal_text(400, "Validation failed for POST /api/v2/users", litestar) == (
        "400: Validation failed for POST /api/v2/users\n  user_id: Expected `str`, got `int`")
    assert refusal_text(404, "task not found", None) == "404: task not found"
