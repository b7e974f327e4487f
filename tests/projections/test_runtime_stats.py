"""Run-time estimates: a time limit first, else the median of the same user's succeeded runs
of the same workload and gang shape (kept by the runtime_stats projection), else the
configured default. Failed runs and other users' runs do not count."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from argus.events import task_stream
from argus.store import AppendBatch
from projections import load_task, open_store
from argus.scheduler.history import RunKey, RuntimeHistory, bucket_of, run_key
from projections.runtime_stats import read_runtime_history
from tests.events import factories as f


def _run(tid: str, user: str, seconds: float, *, ok: bool = True) -> AppendBatch:
    t0 = f.T0
    end = [f.ended(tid, at=t0 + 1 + seconds), f.succeeded(tid, at=t0 + 1 + seconds)] if ok else [
        f.ended(tid, 1, "FAILED", at=t0 + 1 + seconds), f.failed(tid, at=t0 + 1 + seconds)]
    return AppendBatch(stream=task_stream(tid), expected_version=0, owner=user, events=[
        f.submitted(tid, user, at=t0), f.starting(tid, at=t0), f.attempt_submitted(tid, at=t0),
        f.running(tid, at=t0 + 1), *end])


async def test_estimates_come_from_the_users_own_succeeded_runs_of_the_shape(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    try:
        await store.append_batches([_run("a1", "alice", 100), _run("a2", "alice", 300), _run("a4", "alice", 2000),
                                    _run("a3", "alice", 5000, ok=False), _run("b1", "bob", 10)])
        await store.append_batches([AppendBatch(stream=task_stream("new"), expected_version=0, owner="alice",
                                                events=[f.submitted("new", "alice", at=f.T0)])])
        history = await store.read_snapshot(read_runtime_history)
        new = await store.read_snapshot(lambda db: load_task(db, "new"))
        assert new is not None
        # The median (300 s, to within its bucket: 2^(1/4) wide), not the mean (800 s): one
        # long run does not make every estimate long. The failed run does not count.
        estimate, said = history.estimate(new, 3600)
        assert estimate == pytest.approx(300, rel=0.1) and said == "the median of 3 earlier run(s)"
        assert history.sums[run_key(new)] == (3, 2400.0)  # the mean is kept too
        assert history.estimate(msgspec.structs.replace(new, user="carol"), 3600)[0] == 3600
        assert history.estimate(msgspec.structs.replace(new, time_limit_s=60.0), 3600) == (60.0, "its time_limit")
    finally:
        await store.close()


def test_the_median_is_within_a_bucket_of_the_true_one() -> None:
    import random

    rng = random.Random(3)
    history = RuntimeHistory()
    k = RunKey("u", "ppo", 1, 8)
    runs = [rng.lognormvariate(7, 1.5) for _ in range(501)]  # heavy-tailed, as real run times
    for x in runs:
        history.add(k, x)
    true_median = sorted(runs)[250]
    found = history.median(k)
    assert found is not None and found[1] == 501
    assert abs(bucket_of(found[0]) - bucket_of(true_median)) <= 1
    assert found[0] == pytest.approx(true_median, rel=0.2)
