"""Properties: any document fails only with TaskSpecError; accepted specs round-trip;
accepted commands mean to bash what they mean to our lexer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.taskspec import TaskSpecError, encode_taskspec, parse_taskspec, prepare_task
from argus.taskspec.command import split_command

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.sampled_from([None, "advanced", "basic", 1]),
    "workload": st.sampled_from(["ppo", "grpo", "sft", "dpo", None, 3]),
    "nnodes": st.integers(-2, 1100) | st.sampled_from(["2", True, 1.0, None]),
    "n_gpus_per_node": st.integers(-1, 70) | st.sampled_from(["8", None]),
    "model_id": st.sampled_from(["Qwen/Qwen2.5-0.5B", "$HOME/models/m", "", "a/b/c", 5]),
    "train_file": st.sampled_from(["$HOME/datasets/a.parquet", "/private/datasets/x", "../x", None]),
    "val_file": st.sampled_from([None, "$HOME/common/datasets/v.parquet", 1]),
    "total_epochs": st.integers(-1, 5),
    "total_training_steps": st.none() | st.integers(-1, 100),
    "train_batch_size": st.integers(0, 600),
    "micro_batch_size_per_gpu": st.integers(0, 8),
    "learning_rate": st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(["1e-6", "x"]),
    "save_freq": st.integers(-2, 20),
    "test_freq": st.integers(-2, 20),
    "ppo_mini_batch_size": st.none() | st.integers(0, 600),
    "max_prompt_length": st.none() | st.integers(0, 2048),
    "max_response_length": st.none() | st.integers(0, 2048),
    "rollout_engine": st.sampled_from([None, "vllm", "sglang", "hf"]),
    "rollout_n": st.none() | st.integers(0, 8),
    "rollout_tp": st.none() | st.integers(0, 4),
    "extra_overrides": st.lists(
        st.sampled_from(["a.b=1", "+x.y=z", "~k", "trainer.nnodes=3", "bad", "l=[a,b]", "q=x y;z"]),
        max_size=3,
    ) | st.text(max_size=5),
    "command": st.sampled_from([
        "python3 -m verl.trainer.main_ppo data.train_files=$HOME/datasets/a.parquet",
        "python3 -m verl.trainer.sft_trainer_ray a=1",
        "python3 -m os",
        "",
        "rm -rf /",
    ]),
    "priority": st.integers(-5, 5) | st.just(10**9),
    "max_attempts": st.integers(-1, 120),
    "colour": json_values,
}

near_valid_docs = st.fixed_dictionaries(
    {}, optional={name: strategy for name, strategy in FIELD_VALUES.items()}
)
any_docs = near_valid_docs | st.dictionaries(st.text(max_size=12), json_values, max_size=6) | json_values


@pytest.fixture(scope="module")
def shared_root() -> Iterator[Path]:
    # Module-scoped (Hypothesis runs many examples per test function).
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for sub in ("users/alice/datasets", "users/alice/code", "users/bob/datasets", "datasets", "hf"):
            (root / sub).mkdir(parents=True)
        os.symlink(root / "users/bob/datasets", root / "users/alice/datasets/link")
        yield root


def _parse_or_reject(document: Any) -> Any:
    try:
        return parse_taskspec(document)
    except TaskSpecError as exc:
        assert exc.field and exc.message and str(exc).startswith(exc.field)
        return None


@FAST
@given(any_docs)
def test_any_document_as_mapping_yaml_or_json_fails_only_with_taskspec_error(doc: Any) -> None:
    _parse_or_reject(doc)
    _parse_or_reject(yaml.safe_dump(doc, allow_unicode=True))
    try:
        text = json.dumps(doc, allow_nan=True)
    except (TypeError, ValueError):
        return
    _parse_or_reject(text)
    _parse_or_reject(text.encode())


@FAST
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_any_text_fails_only_with_taskspec_error(text: str | bytes) -> None:
    _parse_or_reject(text)


@FAST
@given(near_valid_docs)
def test_accepted_specs_round_trip(doc: dict[str, Any]) -> None:
    spec = _parse_or_reject(doc)
    if spec is None:
        return
    encoded = encode_taskspec(spec)
    assert parse_taskspec(encoded) == spec
    assert parse_taskspec(json.dumps(encoded)) == spec
    assert parse_taskspec(yaml.safe_dump(encoded)) == spec
    assert encode_taskspec(parse_taskspec(encoded)) == encoded


# Command fragments: valid words, path tricks and shell syntax, to fuzz the lexer and policy.
TOKENS = st.sampled_from([
    "a=1", "data.train_files=$HOME/datasets/a.parquet", "data.val_files=$HOME/datasets/link/x",
    "x=${ARGUS_JOB_DIR}/o", "'q=a b'", '"d=$ARGUS_USER"', "l=[a,b]", "m=$HOME/../bob",
    "custom_reward_function.path=$HOME/code/r.py", "p=/private/users/bob", "%2e%2e", "..",
    ";", "&&", "|", "`", "$(", "${", "$", "'", '"', "\\", "\\\n", "\n", "{", "*", "~", "#",
    "<(", ">", "(", "\t", "\x00", "é", "$HOMEX", "${HOME}", "//", "=",
])


@st.composite
def commands(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["", "A=1 ", "PATH=/x ", "ARGUS_JOB_DIR=/y "]))
    head = draw(st.sampled_from(["python3 -m verl.trainer.main_ppo", "python3 -u -m argus.examples.x", "python3 -m os", "sh"]))
    body = draw(st.lists(TOKENS, max_size=8))
    seps = draw(st.lists(st.sampled_from([" ", "", " \\\n  "]), min_size=len(body), max_size=len(body)))
    return prefix + head + "".join(sep + tok for sep, tok in zip(seps, body))


@FAST
@given(commands(), st.sampled_from(["ppo", "grpo", "sft"]))
def test_any_command_fails_only_with_taskspec_error(shared_root: Path, command: str, workload: str) -> None:
    doc = {"kind": "advanced", "workload": workload, "nnodes": 1, "n_gpus_per_node": 1, "command": command}
    try:
        task = prepare_task(doc, user="alice", task_id="t", shared_root=shared_root)
    except TaskSpecError as exc:
        assert exc.field and exc.message
        return
    assert "$HOME" not in task.command.replace("$HOMEX", "")
    assert f"{shared_root}/users/bob" not in task.command


# Words bash must split exactly as we do: quoting, escapes in double quotes, runtime
# variables, continuations, characters that are only special in some places.
BASH_PIECES = st.sampled_from([
    "a", "=", "1", "x.y", "+", "-", "/p/q", "#", "=[a,b]", "é", ":", "%", ",", "@", "!",
    "'s p;|&<>()`$(x)*?~{}'", "''", '""', '"d q"', '"$ARGUS_JOB_DIR"', '"${ARGUS_USER}x"',
    '"e\\"x\\\\y\\$z\\`w"', '"n\\q"', "$ARGUS_JOB_DIR/", "${ARGUS_USER}", '"\\\n"',
])


@st.composite
def simple_commands(draw: st.DrawFn) -> str:
    # "k=" first: a word may not start with '#' (a comment), the rest may contain anything.
    words = draw(st.lists(st.lists(BASH_PIECES, min_size=1, max_size=4).map(lambda p: "k=" + "".join(p)), max_size=6))
    seps = draw(st.lists(st.sampled_from([" ", "  ", "\t", " \\\n  "]), min_size=len(words), max_size=len(words)))
    prefix = draw(st.sampled_from(["", "A=1 ", "B='x y' "]))
    return prefix + "python3 -m argus.examples.x" + "".join(sep + w for sep, w in zip(seps, words))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(simple_commands())
def test_accepted_commands_split_like_bash(tmp_path: Path, command: str) -> None:
    words = split_command(command)  # these pieces are all acceptable
    shim = tmp_path / "python3"
    if not shim.exists():
        # A shell shim, not Python: starts in milliseconds. NUL-separated, never in words.
        shim.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
        shim.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "ARGUS_JOB_DIR": "/J", "ARGUS_USER": "u", "LC_ALL": "C.UTF-8"}
    out = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    values = [w.value for w in words]
    ours = [v.replace("${ARGUS_JOB_DIR}", "/J").replace("${ARGUS_USER}", "u") for v in values]
    argv = out.stdout.split("\0")[:-1]
    assert argv == ours[ours.index("python3") + 1:]
