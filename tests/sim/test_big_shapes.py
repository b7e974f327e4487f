"""The simulator's "big p99" is about the largest gangs present, not the 90th percentile of
GPUs (1 GPU on openb, so it was the p99 of every task)."""

from __future__ import annotations

from argus.sim.metrics import big_shapes


def test_the_largest_shapes_until_a_tenth_never_the_common_one() -> None:
    # openb-like: mostly 1-GPU tasks, a few 2x8 gangs (16 GPUs), some 8 and 2 GPUs.
    gpus = [1] * 900 + [2] * 40 + [8] * 30 + [16] * 30
    assert big_shapes(gpus) == {16, 8, 2}  # 30, then 60, then 100 tasks: a tenth
    assert big_shapes([1] * 800 + [16] * 200) == {16}
    assert big_shapes([1] * 99 + [16]) == {16}  # fewer than a tenth: the largest anyway
    assert big_shapes([4] * 10) == frozenset()  # one size: nothing is big
    assert 1 not in big_shapes([1] * 10 + [2] * 1)
