"""First contact fails fast: a bad TaskSpec or user id gets a 4xx whose message says what
to change (every problem at once), and the event log is left as it was."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import ADVANCED, Env, put_dataset

YAML = {"Content-Type": "application/yaml"}

BASIC = """\
workload: ppo
nnodes: 1
n_gpus_per_node: 1
model_id: Qwen/Qwen2.5-0.5B-Instruct
train_file: $HOME/datasets/toy/train.jsonl
"""


async def refused(env: Env, body: str, *, who: str = "alice", status: int = 400) -> dict[str, Any]:
    """POST the spec; assert the status and that no event was written; return the body."""
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks", content=body, headers={**env.h(who), **YAML})
    assert r.status_code == status, r.text
    assert await env.store.head_position() == before
    return r.json()


def errors_of(body: dict[str, Any]) -> dict[str, str]:
    return {e["field"]: e["message"] for e in body["extra"]["errors"]}


async def test_misspelt_field_is_named_with_a_suggestion(env: Env) -> None:
    put_dataset(env.shared, "alice")
    for spec in (BASIC, ADVANCED):
        body = await refused(env, spec.replace("n_gpus_per_node:", "n_gpu_per_node:"))
        assert body["detail"] == "n_gpu_per_node: unknown field; did you mean n_gpus_per_node?"
        # The field it stands for is not reported missing as well.
        assert list(errors_of(body)) == ["n_gpu_per_node"]


async def test_basic_field_in_an_advanced_spec_says_where_it_goes(env: Env) -> None:
    put_dataset(env.shared, "alice")
    body = await refused(env, ADVANCED + "train_file: $HOME/datasets/toy/train.jsonl\n")
    assert "data.train_files=" in errors_of(body)["train_file"]


async def test_every_problem_of_a_spec_at_once(env: Env) -> None:
    spec = """\
workload: dance
nnodes: 0
n_gpus_per_node: 1
model_id: Qwen/Qwen2.5-0.5B-Instruct
train_file: $HOME/datasets/toy/missing.jsonl
learning_rat: 1e-6
extra_overrides: [trainer.nnodes=2, not-an-override]
"""
    body = await refused(env, spec)
    errors = errors_of(body)
    assert set(errors) == {"learning_rat", "workload", "nnodes", "extra_overrides[0]",
                           "extra_overrides[1]", "train_file"}, errors
    assert "did you mean learning_rate?" in errors["learning_rat"]
    assert "one of ppo, grpo, sft" in errors["workload"]
    assert "an integer from 1 to 1024" in errors["nnodes"]
    assert "set by Argus" in errors["extra_overrides[0]"]
    assert "does not exist" in errors["train_file"]
    assert body["detail"].startswith("the TaskSpec has 6 problems: learning_rat: ")
    # The check endpoint lists the same problems, and writes nothing either.
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/tasks/validate", content=spec, headers={**env.h("alice"), **YAML})
    assert r.status_code == 200 and r.json()["ok"] is False
    assert {e["field"] for e in r.json()["errors"]} == set(errors)
    assert await env.store.head_position() == before


async def test_advanced_command_problems_are_all_reported(env: Env) -> None:
    put_dataset(env.shared, "alice")
    spec = ADVANCED.replace("trainer.nnodes=1", "trainer.nnodes=2 x=$HOME/../bob/y").replace(
        "data.train_files=$HOME/datasets/toy/train.jsonl",
        "data.train_files=$HOME/datasets/toy/train.jsonl data.val_files=$HOME/datasets/toy/val.jsonl")
    errors = errors_of(await refused(env, spec))
    assert "disagrees with the spec's nnodes: 1" in errors["command[trainer.nnodes]"]
    assert "another user's home (bob)" in errors["command[x]"]
    assert "'$HOME/datasets/toy/val.jsonl' does not exist" in errors["command[data.val_files]"]


async def test_yaml_error_says_line_and_column(env: Env) -> None:
    body = await refused(env, "kind: advanced\n  nnodes: [1,\n")
    assert body["detail"] == ("document: not valid YAML or JSON: line 2, column 9: "
                              "mapping values are not allowed here")
    body = await refused(env, "kind: advanced\nnnodes: [1, 2\n")
    assert "line 3, column 1: expected ',' or ']'" in body["detail"]
    assert "flow sequence that starts at line 2, column 9" in body["detail"]


async def test_missing_data_file_is_refused_with_the_upload_command(env: Env) -> None:
    # alice has no dataset at all yet.
    body = await refused(env, ADVANCED)
    message = errors_of(body)["command[data.train_files]"]
    assert message.startswith("'$HOME/datasets/toy/train.jsonl' does not exist")
    assert "argus files put datasets/toy/train.jsonl <local file>" in message
    # Once uploaded, the same spec is accepted.
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers={**env.h("alice"), **YAML})
    assert r.status_code == 201, r.text


async def test_missing_model_reward_and_val_file_of_a_basic_spec(env: Env) -> None:
    put_dataset(env.shared, "alice")
    spec = BASIC.replace("Qwen/Qwen2.5-0.5B-Instruct", "$HOME/models/qwen") + (
        "val_file: $HOME/common/datasets/toy/val.jsonl\n"
        "extra_overrides: [custom_reward_function.path=$HOME/code/reward.py]\n")
    errors = errors_of(await refused(env, spec))
    assert set(errors) == {"model_id", "val_file", "extra_overrides[0]"}, errors
    assert "argus files put models/qwen/<file>" in errors["model_id"]
    assert "argus files ls common/datasets" in errors["val_file"]
    # A fresh stack's shared datasets are empty: the message sends a WebUI user to the Data page.
    assert errors["val_file"].startswith("'$HOME/common/datasets/toy/val.jsonl' does not exist")
    assert "the WebUI's Data page shows what common/datasets holds" in errors["val_file"]
    assert "upload your own copy to datasets/ on the Data page" in errors["val_file"]
    assert "argus files put code/reward.py" in errors["extra_overrides[0]"]


async def test_hub_model_id_is_not_a_path(env: Env) -> None:
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", content=BASIC, headers={**env.h("alice"), **YAML})
    assert r.status_code == 201, r.text


async def test_symlink_out_of_the_home_is_not_followed(env: Env) -> None:
    """A link in alice's datasets to bob's file: refused as a symlink out of her area,
    never reported as existing or missing (which would tell her whether bob has it)."""
    bob = env.shared / "users/bob/datasets/secret.jsonl"
    bob.parent.mkdir(parents=True, exist_ok=True)
    bob.write_text("secret\n")
    link = env.shared / "users/alice/datasets/toy"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(bob.parent)
    spec = ADVANCED.replace("toy/train.jsonl", "toy/secret.jsonl")
    message = errors_of(await refused(env, spec))["command[data.train_files]"]
    assert "another user's home (bob)" in message and "does not exist" not in message


async def test_bad_user_id_says_the_rule_in_words(env: Env) -> None:
    before = await env.store.head_position()
    r = await env.client.post("/api/v2/users", json={"user_id": "bob.smith"}, headers=env.h("admin"))
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert detail == ("user id 'bob.smith' is not allowed: use 1 to 32 characters: lowercase "
                      "letters (a-z), digits, '_' or '-', starting with a letter, e.g. 'bob_smith'")
    assert "Validation failed" not in r.text and "[a-z]" not in r.text
    for bad in ("Bob", "1bob", "a" * 33, "", "bob smith"):
        r = await env.client.post("/api/v2/users", json={"user_id": bad}, headers=env.h("admin"))
        assert r.status_code == 400 and "is not allowed: use 1 to 32" in r.json()["detail"], r.text
    assert await env.store.head_position() == before
    assert not (env.shared / "users/bob.smith").exists()
