"""Checks of the WebUI's static assets that need no browser: the New Task templates are
valid TaskSpecs, and the JavaScript keeps the rules (no innerHTML, no token storage, no
download from elsewhere)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from argus.taskspec.prepare import prepare_task
from argus.ui import STATIC_DIR, TEMPLATES_DIR

TEMPLATES = sorted(TEMPLATES_DIR.glob("*.yaml"))
SCRIPTS = sorted(STATIC_DIR.rglob("*.js"))


def test_every_template_is_there() -> None:
    assert {p.stem for p in TEMPLATES} == {"ppo", "grpo", "sft", "advanced"}


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_template_is_a_valid_taskspec_without_warnings(path: Path, tmp_path: Path) -> None:
    # The templates name files a user uploads first: only the spec and its paths are
    # checked here, not that the files exist (require_files=False).
    prepared = prepare_task(path.read_text(encoding="utf-8"), user="alice",
                            task_id="alice-ppo-20260101-000000-abcd", shared_root=tmp_path,
                            require_files=False)
    assert prepared.warnings == []
    assert prepared.workload in ("ppo", "grpo", "sft")
    assert f"{tmp_path}/users/alice" in prepared.command or f"{tmp_path}/datasets" in prepared.command


def test_advanced_template_is_verls_grpo_example_in_script_form(tmp_path: Path) -> None:
    """The advanced template is a real verl GRPO command as verl publishes its examples
    (comments, exports, one continued command), not the toy trainer: production allows
    only verl.trainer.* (argus.examples off)."""
    from argus.config import TaskSpecConfig

    text = (TEMPLATES_DIR / "advanced.yaml").read_text(encoding="utf-8")
    prepared = prepare_task(text, user="alice", task_id="alice-grpo-20260101-000000-abcd",
                            shared_root=tmp_path, require_files=False,
                            config=TaskSpecConfig(allow_examples=False))
    assert prepared.kind == "advanced" and prepared.workload == "grpo"
    assert "export VLLM_USE_V1=1" in prepared.command_raw and "\\\n" in prepared.command_raw
    assert prepared.command.startswith("VLLM_USE_V1=1 PYTHONUNBUFFERED=1 ")
    for piece in ("-m verl.trainer.main_ppo", "algorithm.adv_estimator=grpo", "trainer.nnodes=1",
                  "trainer.n_gpus_per_node=4", f"data.train_files={tmp_path}/datasets/gsm8k/train.parquet",
                  "actor_rollout_ref.rollout.n=5", "+ray_kwargs.ray_init.address=auto"):
        assert piece in prepared.command, piece
    assert "argus.examples" not in text


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(STATIC_DIR)))
def test_script_keeps_the_rules(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "innerHTML" not in text and "outerHTML" not in text and "insertAdjacentHTML" not in text
    assert "localStorage" not in text
    assert "eval(" not in text
    # Nothing is fetched from another host (no CDN: there is no internet).
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)


def test_index_loads_only_local_assets() -> None:
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    for ref in re.findall(r"(?:src|href)=\"([^\"#][^\"]*)\"", html):
        if ref.startswith("data:"):
            continue
        assert (STATIC_DIR / ref).is_file(), ref
