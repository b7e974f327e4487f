"""A sample custom reward for ``custom_reward_function.path/name`` (verl's signature).

Use with the toy trainer (or verl):
    custom_reward_function.path=$HOME/code/reward_example.py
    custom_reward_function.name=compute_score
    +custom_reward_function.reward_kwargs.partial_credit=0.1
"""

from __future__ import annotations

from typing import Any

__all__ = ["compute_score"]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    partial_credit: float = 0.0,
    **_: Any,
) -> float:
    """1.0 for an exact answer; ``partial_credit`` when the answer is off by one (numbers
    only), so the reward is shaped; 0.0 otherwise."""
    answer, truth = str(solution_str).strip(), str(ground_truth).strip()
    if answer == truth:
        return 1.0
    try:
        if abs(float(answer) - float(truth)) == 1.0:
            return float(partial_credit)
    except ValueError:
        pass
    return 0.0
