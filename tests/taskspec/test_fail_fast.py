"""Fail fast at submit: unknown fields with a suggestion, every problem at once, YAML
errors with line and column, and input files that must exist (without following links)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from argus.taskspec import TaskSpecError, parse_taskspec, parse_taskspec_with_warnings, prepare_task
from argus.taskspec.errors import MAX_PROBLEMS, Problem, Problems
from argus.taskspec.paths import _exists_under
from tests.taskspec.support import Prepare, advanced

PPO = "python3 -m verl.trainer.main_ppo"
TAIL = " trainer.nnodes=2 trainer.n_gpus_per_node=4 +ray_kwargs.ray_init.address=auto"


def basic(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "workload": "ppo", "nnodes": 2, "n_gpus_per_node": 4,
        "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
        "train_file": "$HOME/datasets/gsm8k/train.parquet",
        "val_file": "$HOME/datasets/gsm8k/test.parquet",
    }
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not ...}


def problems_of(document: Any, **kwargs: Any) -> dict[str, str]:
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(document, **kwargs)
    return dict(err.value.problems)


# -- unknown fields ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("n_gpu_per_node", "n_gpus_per_node"),
        ("N_GPUS_PER_NODE", "n_gpus_per_node"),
        ("n-gpus-per-node", "n_gpus_per_node"),
        ("nnode", "nnodes"),
    ],
)
def test_misspelt_required_field_is_reported_once_as_the_typo(key: str, meant: str) -> None:
    value = basic()[meant]
    basic_doc, advanced_doc = basic(**{meant: ...}), advanced(f"{PPO} a=1")
    del advanced_doc[meant]
    for doc in (basic_doc, advanced_doc):
        doc[key] = value
        problems = problems_of(doc)
        assert problems == {key: f"unknown field; did you mean {meant}?"}, problems


def test_misspelt_optional_field_is_refused_not_ignored() -> None:
    # Ignored, it would silently train with the default learning rate.
    assert problems_of(basic(learning_rat=1e-5)) == {
        "learning_rat": "unknown field; did you mean learning_rate?"}


def test_unknown_field_without_a_close_name_lists_the_fields() -> None:
    message = problems_of(basic(colour="red"))["colour"]
    assert message.startswith("unknown field; the fields of a basic spec are: workload, nnodes")
    message = problems_of({**advanced(f"{PPO} a=1"), "colour": "red"})["colour"]
    assert message.startswith("unknown field; the fields of an advanced spec are: kind, workload, ")
    assert "command, priority, max_attempts" in message


def test_odd_keys_are_shown_so_they_can_be_found() -> None:
    problems = problems_of({**basic(), "": 1, 3: 4, " nnodes": 2})
    assert {"''", "3", "' nnodes'"} <= set(problems)


def test_basic_field_in_an_advanced_spec() -> None:
    doc = {**advanced(f"{PPO} a=1"), "train_file": "$HOME/datasets/a.parquet", "total_epochs": 2}
    problems = problems_of(doc)
    assert "writes data.train_files=... in its command" in problems["train_file"]
    assert "matching verl override" in problems["total_epochs"]


def test_legacy_keys_stay_warnings() -> None:
    _spec, warnings = parse_taskspec_with_warnings(basic(user="x", submission_id="y"))
    assert any(w.startswith("'user': ignored") for w in warnings)


# -- every problem at once -----------------------------------------------------------


def test_every_field_problem_at_once() -> None:
    doc = basic(workload="dpo", nnodes="two", n_gpus_per_node=65, model_id=..., learning_rate=2.0,
                save_freq=0, extra_overrides=["ok=1", "trainer.nnodes=3", 5], priority="high")
    with pytest.raises(TaskSpecError) as err:
        parse_taskspec(doc)
    fields = [p.field for p in err.value.problems]
    # Each field in the struct's order, then the checks across fields.
    assert fields == ["workload", "nnodes", "n_gpus_per_node", "model_id", "extra_overrides[2]",
                      "priority", "learning_rate", "save_freq"], fields
    # The first problem is still .field / .message; str() has them all.
    assert (err.value.field, err.value.message) == err.value.problems[0]
    assert str(err.value).startswith(f"{err.value.field}: ")
    assert all(f"{p.field}: {p.message}" in str(err.value) for p in err.value.problems)


def test_cross_field_checks_run_beside_field_errors() -> None:
    problems = problems_of(basic(nnodes=0, workload="grpo", rollout_n=1,
                                 extra_overrides=["trainer.nnodes=3", "no_equals"]))
    assert set(problems) == {"nnodes", "rollout_n", "extra_overrides[0]", "extra_overrides[1]"}


def test_error_keeps_its_problems_through_pickle() -> None:
    err = TaskSpecError("a", "x", more=[Problem("b", "y")])
    again = pickle.loads(pickle.dumps(err))
    assert again.problems == err.problems and str(again) == "a: x; b: y"
    single = pickle.loads(pickle.dumps(TaskSpecError("f", "m")))
    assert (single.field, single.message, single.problems) == ("f", "m", (("f", "m"),))


def test_problems_are_capped_and_deduplicated() -> None:
    problems = Problems([Problem("f", "m")] * 3 + [Problem(f"x{i}", "m") for i in range(80)])
    with pytest.raises(TaskSpecError) as err:
        problems.raise_if_any()
    assert len(err.value.problems) == MAX_PROBLEMS + 1
    assert err.value.problems[-1] == ("document", "31 more problems not shown; fix these first")
    Problems().raise_if_any()  # nothing to raise


def test_parse_problems_and_path_problems_together(prepare: Prepare) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(basic(nnodes=0, train_file="$HOME/code/t.parquet", val_file="$HOME/datasets/nope.parquet"))
    problems = dict(err.value.problems)
    assert set(problems) == {"nnodes", "train_file", "val_file"}
    assert "data files must be under" in problems["train_file"]
    assert "does not exist" in problems["val_file"]


def test_advanced_command_checked_even_when_a_field_is_bad(prepare: Prepare) -> None:
    doc = advanced(f"{PPO} data.train_files=$HOME/../bob/x trainer.n_gpus_per_node=8", nnodes=0)
    with pytest.raises(TaskSpecError) as err:
        prepare(doc)
    problems = dict(err.value.problems)
    assert set(problems) == {"nnodes", "command[data.train_files]", "command[trainer.n_gpus_per_node]"}


def test_a_malformed_command_stops_at_its_shape(prepare: Prepare) -> None:
    """Every shape problem is named (each ';' with its column), and no path check runs on
    a command whose words cannot be read as bash would."""
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(f"{PPO} a=1 ; b=$HOME/../bob ; c=2"))
    assert [p.field for p in err.value.problems] == ["command[;]", "command[;]"]
    assert err.value.problems[0].message != err.value.problems[1].message  # two columns


# -- YAML errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kind: advanced\n  nnodes: [1,\n", "line 2, column 9: mapping values are not allowed here"),
        ("a: 1\nb: 'open\n", "(while scanning a quoted scalar that starts at line 2, column 4)"),
        ("a: &x [1]\nb: *x\n", "line 2, column 4: YAML aliases (*name) are not allowed"),
        ("a: 1\n\tb: 2\n", "line 2, column 1: found character '\\t' that cannot start any token"),
        ('{"a": 1\n "b": 2}', "line 2, column 5: expected ',' or '}'"),  # JSON: a missing comma
    ],
)
def test_yaml_errors_say_line_and_column(text: str, where: str) -> None:
    problems = problems_of(text)
    assert problems["document"].startswith("not valid YAML or JSON: line ")
    assert where in problems["document"], problems["document"]


def test_yaml_errors_without_a_position_keep_their_text() -> None:
    assert "not valid YAML or JSON (" in problems_of("when: 2001-02-30\n")["document"]


# -- input files that must exist -------------------------------------------------------


def test_missing_inputs_named_as_written_with_what_to_do(prepare: Prepare, shared_root: Path) -> None:
    cmd = (f"{PPO} data.train_files=${{HOME}}/datasets/gsm8k/train.parquet "
           "'data.val_files=[$HOME/datasets/a.parquet,$HOME/datasets/v2.parquet]' "
           "actor_rollout_ref.model.path=$HOME/common/hf/nope "
           f"custom_reward_function.path={shared_root}/users/alice/code/r.py{TAIL}")
    with pytest.raises(TaskSpecError) as err:
        prepare(advanced(cmd))
    problems = err.value.problems
    assert [p.field for p in problems] == ["command[data.val_files]", "command[actor_rollout_ref.model.path]",
                                           "command[custom_reward_function.path]"]
    val, model, reward = (p.message for p in problems)
    assert val.startswith("'$HOME/datasets/v2.parquet' does not exist (looked for "
                          f"{shared_root}/users/alice/datasets/v2.parquet); upload it with "
                          "`argus files put datasets/v2.parquet <local file>`")
    assert model.startswith("'$HOME/common/hf/nope' does not exist")
    assert "`argus files ls common/hf`" in model and "hub id" in model
    # Written as an absolute path: shown as such, nothing to add.
    assert reward.startswith(f"'{shared_root}/users/alice/code/r.py' does not exist; upload it with "
                             "`argus files put code/r.py <local file>`")


def test_hub_ids_and_existing_paths_pass(prepare: Prepare) -> None:
    prepare(basic(model_id="Qwen/Qwen2.5-0.5B", val_file=None))
    prepare(basic(model_id="$HOME/models/m1", extra_overrides=["custom_reward_function.path=$HOME/code/reward.py"]))


def test_missing_files_come_after_other_problems(prepare: Prepare) -> None:
    with pytest.raises(TaskSpecError) as err:
        prepare(basic(val_file="$HOME/datasets/nope.parquet", extra_overrides=["x=$HOME/../bob/y"]))
    assert [p.field for p in err.value.problems] == ["extra_overrides[0]", "val_file"]


def test_require_files_false_checks_only_the_rules(shared_root: Path) -> None:
    doc = basic(train_file="$HOME/datasets/nope.parquet")
    prepare_task(doc, user="alice", task_id="t", shared_root=shared_root, require_files=False)
    with pytest.raises(TaskSpecError):
        prepare_task(doc, user="alice", task_id="t", shared_root=shared_root)


def test_dangling_link_inside_the_area_is_missing(prepare: Prepare, shared_root: Path) -> None:
    datasets = shared_root / "users/alice/datasets"
    os.symlink(datasets / "gone.parquet", datasets / "latest.parquet")
    with pytest.raises(TaskSpecError) as err:
        prepare(basic(val_file="$HOME/datasets/latest.parquet"))
    assert err.value.problems == (("val_file", err.value.message),)
    assert err.value.message.startswith("'$HOME/datasets/latest.parquet' does not exist (looked for ")
    assert "gone.parquet" in err.value.message


def test_link_to_an_existing_file_in_the_area_is_fine(prepare: Prepare, shared_root: Path) -> None:
    datasets = shared_root / "users/alice/datasets"
    os.symlink(datasets / "gsm8k/train.parquet", datasets / "current.parquet")
    prepare(basic(val_file="$HOME/datasets/current.parquet"))


def test_existence_walk_never_follows_a_link(tmp_path: Path) -> None:
    """A link planted after the path was resolved (a job can write into the area) is not
    followed: the walk opens each directory with O_NOFOLLOW from the allowed root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("x")
    base = tmp_path / "area"
    (base / "d").mkdir(parents=True)
    (base / "d/f").write_text("x")
    os.symlink(outside, base / "link")
    assert _exists_under(str(base), "d/f")
    assert not _exists_under(str(base), "d/missing")
    assert os.path.exists(base / "link/f") and not _exists_under(str(base), "link/f")
    assert _exists_under(str(base), "link")  # a link itself exists (lstat)
    assert not _exists_under(str(tmp_path / "nope"), "f")
