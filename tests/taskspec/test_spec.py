"""Parsing: both kinds through one parse_taskspec, defaults, structural errors, warnings."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from argus.config import TaskSpecConfig
from argus.taskspec import (
    AdvancedTaskSpec,
    BasicTaskSpec,
    TaskSpecError,
    encode_taskspec,
    parse_taskspec,
    parse_taskspec_with_warnings,
)
from tests.taskspec.support import SEED_EXAMPLE

BASIC_YAML = """\
workload: ppo
nnodes: 1
n_gpus_per_node: 8
model_id: Qwen/Qwen2.5-0.5B-Instruct
train_file: /private/datasets/gsm8k/train.parquet
val_file: /private/datasets/gsm8k/test.parquet
"""


def basic(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(BASIC_YAML)
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not ...}


def test_basic_defaults() -> None:
    spec = parse_taskspec(BASIC_YAML)
    assert isinstance(spec, BasicTaskSpec)
    assert (spec.workload, spec.nnodes, spec.n_gpus_per_node) == ("ppo", 1, 8)
    assert spec.priority == 0 and spec.max_attempts == 3
    assert spec.total_epochs == 1 and spec.train_batch_size == 256
    assert spec.save_freq == 10 and spec.test_freq == 10
    assert spec.learning_rate is None and spec.rollout_engine is None
    assert spec.extra_overrides == ()


def test_seed_advanced_example_parses_and_infers_workload() -> None:
    spec, warnings = parse_taskspec_with_warnings(SEED_EXAMPLE)
    assert isinstance(spec, AdvancedTaskSpec)
    assert spec.kind == "advanced" and spec.workload == "ppo"
    assert (spec.nnodes, spec.n_gpus_per_node) == (2, 4)
    assert spec.command.startswith("PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo")
    assert warnings == ["workload: not set; ppo inferred from the command"]


@pytest.mark.parametrize(
    ("command", "workload"),
    [
        ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo", "grpo"),
        ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae", "ppo"),
        ("python3 -m verl.trainer.sft_trainer_ray model.path=x", "sft"),
    ],
)
def test_advanced_workload_inference(command: str, workload: str) -> None:
    doc = {"kind": "advanced", "nnodes": 1, "n_gpus_per_node": 1, "command": command}
    assert parse_taskspec(doc).workload == workload


def test_advanced_workload_required_when_not_inferable() -> None:
    doc = {"kind": "advanced", "nnodes": 1, "n_gpus_per_node": 1,
           "command": "python3 -m argus.examples.toy"}
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(doc)
    assert err.value.field == "workload" and "ppo, grpo, sft" in err.value.message


def test_json_text_and_mapping_give_the_same_spec() -> None:
    doc = basic()
    assert parse_taskspec(json.dumps(doc)) == parse_taskspec(doc) == parse_taskspec(BASIC_YAML.encode())


def test_yaml_reads_1e_minus_6_as_a_float() -> None:
    # YAML 1.1 reads 1e-6 (no dot) as a string; the spec must still get a float.
    spec = parse_taskspec(BASIC_YAML + "learning_rate: 1e-6\n")
    assert isinstance(spec, BasicTaskSpec) and spec.learning_rate == 1e-6


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"nnodes": ...}, "nnodes", "is required"),
        ({"n_gpus_per_node": ...}, "n_gpus_per_node", "is required"),
        ({"nnodes": 0}, "nnodes", "an integer from 1 to"),
        ({"nnodes": -2}, "nnodes", ">= 1"),
        ({"nnodes": "two"}, "nnodes", "an integer from 1 to"),
        ({"nnodes": True}, "nnodes", "Expected `int`"),
        ({"nnodes": 1.5}, "nnodes", "Expected `int`"),
        ({"n_gpus_per_node": 65}, "n_gpus_per_node", "from 1 to 64"),
        ({"workload": "dpo"}, "workload", "one of ppo, grpo, sft"),
        ({"model_id": ""}, "model_id", "hub id"),
        ({"train_file": ...}, "train_file", "is required"),
        ({"learning_rate": 0}, "learning_rate", "positive finite"),
        ({"learning_rate": ".nan"}, "learning_rate", "positive finite"),
        ({"save_freq": 0}, "save_freq", "-1 (never) or a positive integer"),
        ({"test_freq": -5}, "test_freq", "-1 (never)"),
        ({"max_attempts": 0}, "max_attempts", "from 1 to 100"),
        ({"priority": "high"}, "priority", "higher runs first"),
        ({"rollout_engine": "hf"}, "rollout_engine", "vllm, sglang"),
        ({"workload": "grpo", "rollout_n": 1}, "rollout_n", "2 or more"),
        ({"ppo_mini_batch_size": 512}, "ppo_mini_batch_size", "at most train_batch_size"),
        ({"extra_overrides": "a=b"}, "extra_overrides", "a list of Hydra overrides"),
        ({"extra_overrides": ["trainer.nnodes=4"]}, "extra_overrides[0]", "set by Argus"),
        ({"extra_overrides": ["ok=1", "trainer.default_local_dir=/x"]}, "extra_overrides[1]", "set by Argus"),
        ({"extra_overrides": ["no_equals"]}, "extra_overrides[0]", "has no '='"),
        ({"extra_overrides": ["=x"]}, "extra_overrides[0]", "not a Hydra override"),
        ({"extra_overrides": ["a=b\nc=d"]}, "extra_overrides[0]", "one line"),
        ({"kind": "expert"}, "kind", "'advanced'"),
    ],
)
def test_basic_structural_errors(change: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(basic(**change))
    assert err.value.field == field, err.value
    assert fragment in err.value.message, err.value.message
    assert str(err.value).startswith(f"{field}: ")


def test_command_without_kind_says_to_add_kind() -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec({"workload": "ppo", "nnodes": 1, "n_gpus_per_node": 1, "command": "python3 -m x"})
    assert err.value.field == "kind" and "kind: advanced" in err.value.message


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ("- a\n- b\n", "must be a mapping"),
        ("just text", "must be a mapping"),
        ("a: [1, 2\n", "not valid YAML or JSON"),
        (b"\xff\xfe", "not UTF-8"),
        ("a: 1\x00", "NUL byte"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("when: 2001-02-30\n", "not valid YAML"),
        (12, "must be YAML/JSON text or a mapping"),
    ],
)
def test_document_errors(document: Any, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(document)
    assert err.value.field == "document" and fragment in err.value.message


def test_document_size_limit() -> None:
    config = TaskSpecConfig(max_document_bytes=300)
    parse_taskspec(BASIC_YAML, config=config)
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(BASIC_YAML + "#" * 300, config=config)
    assert err.value.field == "document" and "limit is 300 bytes" in err.value.message
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(basic(model_id="x" * 400), config=config)
    assert err.value.field == "document"


def test_command_size_limit() -> None:
    config = TaskSpecConfig(max_command_bytes=100)
    cmd = "python3 -m verl.trainer.main_ppo " + "a=1 " * 30
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec({"kind": "advanced", "workload": "ppo", "nnodes": 1,
                        "n_gpus_per_node": 1, "command": cmd}, config=config)
    assert err.value.field == "command" and "limit is 100 bytes" in err.value.message


def test_empty_command() -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec({"kind": "advanced", "workload": "ppo", "nnodes": 1,
                        "n_gpus_per_node": 1, "command": " \n "})
    assert err.value.field == "command"


def test_legacy_keys_are_warnings() -> None:
    spec, warnings = parse_taskspec_with_warnings(basic(submission_id="x", code_path="/c"))
    assert isinstance(spec, BasicTaskSpec)
    assert any(w.startswith("'submission_id': ignored, the submission id is computed") for w in warnings)
    assert any(w.startswith("'code_path': ignored") for w in warnings)


def test_unknown_key_is_an_error_listing_the_fields() -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(basic(colour="red"))
    assert err.value.field == "colour"
    assert err.value.message.startswith("unknown field; the fields of a basic spec are: workload,")
    assert "model_id" in err.value.message


def test_rl_only_fields_warn_for_sft() -> None:
    _spec, warnings = parse_taskspec_with_warnings(basic(workload="sft", rollout_n=4))
    assert "rollout_n: ignored for workload sft (it applies to ppo and grpo)" in warnings


def test_logger_override_without_file_warns() -> None:
    _spec, warnings = parse_taskspec_with_warnings(basic(extra_overrides=["trainer.logger=[console,wandb]"]))
    assert any("without 'file'" in w for w in warnings)
    _spec, warnings = parse_taskspec_with_warnings(basic(extra_overrides=["trainer.logger=[console,file,wandb]"]))
    assert not any("without 'file'" in w for w in warnings)


def test_encode_is_json_ready_and_round_trips() -> None:
    for doc in (BASIC_YAML, SEED_EXAMPLE, basic(extra_overrides=["a.b=1"], learning_rate=2e-6)):
        spec = parse_taskspec(doc)
        encoded = encode_taskspec(spec)
        assert json.loads(json.dumps(encoded)) == encoded
        assert parse_taskspec(encoded) == spec
    assert "kind" not in encode_taskspec(parse_taskspec(BASIC_YAML))
    assert encode_taskspec(parse_taskspec(SEED_EXAMPLE))["kind"] == "advanced"


def test_explicit_kind_basic_is_the_basic_kind() -> None:
    spec = parse_taskspec(BASIC_YAML + "kind: basic\n")
    assert isinstance(spec, BasicTaskSpec) and spec == parse_taskspec(BASIC_YAML)


@pytest.mark.parametrize(
    "retry_on, fragment",
    [
        (["USER_ERROR"], "not a failure kind the admin lets specs retry on (RUNTIME_ERROR, UNKNOWN)"),
        ([300], "exit code 300 is not from 1 to 255"),
        ([True], "got `bool`"),
        ("RUNTIME_ERROR", "Expected `array`"),
        ([1] * 17, "at most 16"),
    ],
)
def test_retry_on_names_what_the_admin_allows(retry_on: Any, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(basic(retry_on=retry_on))
    assert err.value.field.startswith("retry_on") and fragment in err.value.message, err.value


def test_retry_on_kinds_and_exit_codes() -> None:
    spec = parse_taskspec(basic(retry_on=["RUNTIME_ERROR", 137]))
    assert spec.retry_on == ("RUNTIME_ERROR", 137)
    wider = TaskSpecConfig(retry_on_kinds=["RUNTIME_ERROR", "USER_ERROR"])
    assert parse_taskspec(basic(retry_on=["USER_ERROR"]), config=wider).retry_on == ("USER_ERROR",)
