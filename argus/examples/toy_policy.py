"""The learning half of the toy trainer (EXAMPLE WORKLOAD): data, rewards and a tiny policy.

The policy is a linear softmax over the dataset's distinct answers, fed with hashed
bag-of-words features of the prompt. Training is GRPO-shaped: for each prompt sample a group
of answers, score them with the reward function, use ``reward - group mean`` as the
advantage, and ascend the policy gradient. Numbers are real: with the example dataset the
mean score rises over steps.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import zlib
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = [
    "FEATURE_DIM",
    "Sample",
    "grad_step",
    "featurize",
    "load_reward_fn",
    "load_samples",
    "default_compute_score",
    "make_example_dataset",
]

FEATURE_DIM = 64
RewardFn = Callable[..., float]


class Sample:
    """One training row in verl's RL dataset shape."""

    __slots__ = ("prompt", "ground_truth", "data_source", "extra_info")

    def __init__(self, prompt: str, ground_truth: str, data_source: str, extra_info: dict[str, Any]):
        self.prompt, self.ground_truth = prompt, ground_truth
        self.data_source, self.extra_info = data_source, extra_info


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):  # verl chat format: [{"role": ..., "content": ...}]
        return " ".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return str(prompt)


def _row_to_sample(row: dict[str, Any]) -> Sample:
    reward_model = row.get("reward_model") or {}
    truth = reward_model.get("ground_truth", row.get("answer"))
    if truth is None:
        raise ValueError(f"row has no reward_model.ground_truth: {str(row)[:200]}")
    return Sample(_prompt_text(row.get("prompt", "")), str(truth),
                  str(row.get("data_source", "toy")), dict(row.get("extra_info") or {}))


def load_samples(paths: list[str]) -> list[Sample]:
    """Read ``.jsonl`` / ``.json`` files, and ``.parquet`` when pyarrow is installed."""
    rows: list[dict[str, Any]] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            raise FileNotFoundError(f"data.train_files: no such file: {raw}")
        if path.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError as exc:
                raise ValueError(f"{raw}: reading parquet needs pyarrow; use .jsonl") from exc
            rows.extend(pq.read_table(path).to_pylist())
        elif path.suffix == ".json":
            data = json.loads(path.read_text())
            rows.extend(data if isinstance(data, list) else [data])
        else:
            rows.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    if not rows:
        raise ValueError(f"data.train_files: no rows in {paths}")
    return [_row_to_sample(r) for r in rows]


def make_example_dataset(path: str | Path, n: int = 128, seed: int = 0) -> Path:
    """Write a verl-shaped JSONL dataset of small additions ("What is 3 plus 1?" → "4")."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i in range(n):
            a, b = rng.randint(0, 4), rng.randint(0, 4)
            fh.write(json.dumps({
                "data_source": "toy/addition",
                "prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
            }) + "\n")
    return path


def default_compute_score(data_source: str, solution_str: str, ground_truth: str,
                          extra_info: dict[str, Any] | None = None, **_: Any) -> float:
    """Exact match, the default when no custom reward is configured."""
    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0


def load_reward_fn(path: str | None, name: str, kwargs: dict[str, Any]) -> RewardFn:
    """Like verl's ``get_custom_reward_fn``: import ``name`` from the file at ``path`` and
    bind ``reward_kwargs``."""
    if not path:
        return default_compute_score
    if not Path(path).is_file():
        raise FileNotFoundError(f"custom_reward_function.path: no such file: {path}")
    spec = importlib.util.spec_from_file_location("custom_module", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load reward module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise AttributeError(f"reward function '{name}' not found in '{path}'")
    return partial(getattr(module, name), **kwargs)


def featurize(text: str) -> np.ndarray:
    """Hashed bag of words (stable across processes: crc32, not ``hash``) plus a bias."""
    x = np.zeros(FEATURE_DIM)
    for tok in re.findall(r"\w+", text.lower()):
        x[zlib.crc32(tok.encode()) % (FEATURE_DIM - 1)] += 1.0
    x[FEATURE_DIM - 1] = 1.0
    return x


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def grad_step(weights: np.ndarray, samples: list[Sample], answers: list[str],
              reward_fn: RewardFn, group_size: int, seed: int) -> dict[str, Any]:
    """One shard's rollout + policy gradient. Returns the summed gradient and sums of the
    metrics (the caller averages across shards)."""
    rng = np.random.default_rng(seed)
    grad = np.zeros_like(weights)
    score_sum = greedy_sum = entropy_sum = loss_sum = 0.0
    for s in samples:
        x = featurize(s.prompt)
        p = _softmax(x @ weights)
        actions = rng.choice(len(answers), size=group_size, p=p)
        rewards = np.array([float(reward_fn(s.data_source, answers[a], s.ground_truth, s.extra_info))
                            for a in actions])
        adv = rewards - rewards.mean()  # GRPO: group-relative advantage
        for a, r_adv in zip(actions, adv):
            onehot = np.zeros(len(answers))
            onehot[a] = 1.0
            grad += r_adv * np.outer(x, onehot - p)  # d log p(a) / dW, weighted
            loss_sum += -r_adv * float(np.log(p[a] + 1e-12))
        score_sum += float(rewards.sum())
        greedy = answers[int(p.argmax())]
        greedy_sum += float(reward_fn(s.data_source, greedy, s.ground_truth, s.extra_info))
        entropy_sum += float(-(p * np.log(p + 1e-12)).sum())
    return {"grad": grad, "n": len(samples), "score_sum": score_sum, "greedy_sum": greedy_sum,
            "entropy_sum": entropy_sum, "loss_sum": loss_sum}
