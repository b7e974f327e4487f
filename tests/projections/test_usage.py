"""GPU use per user (projections.usage): attempts' GPU-seconds by hour, decayed when read."""

from __future__ import annotations

import math

import pytest

from projections.tasks import AttemptView
from projections.usage import HOUR, UsageLedger, attempt_usage
from tests.events import factories as f

HALF_LIFE = 24 * 3600.0


def test_decay_halves_usage_every_half_life_and_adds_up_in_any_order() -> None:
    ledger = UsageLedger(HALF_LIFE)
    ledger.add("alice", 100, 3600.0)  # one GPU-hour in hour 100
    ledger.add("alice", 76, 3600.0)  # one, a day earlier, added after
    now = (100 + 0.5) * HOUR
    assert ledger.at(now)["alice"] == pytest.approx(3600.0 * (1 + 0.5))
    assert ledger.at(now + HALF_LIFE)["alice"] == pytest.approx(3600.0 * 1.5 / 2)
    live = ledger.at(now, [("bob", 100, 7200.0)])
    assert live["bob"] == pytest.approx(7200.0) and live["alice"] == pytest.approx(5400.0)


def test_an_attempt_is_split_over_the_hours_it_ran() -> None:
    start = 1000 * HOUR - 900  # 15 min before an hour boundary, for 30 min, on 4 GPUs
    view = f.folded_submission("t", 1, gpus=4)
    attempt = ran(start, start + 1800)
    assert attempt_usage(view, attempt) == [(999, 4 * 900.0), (1000, 4 * 900.0)]
    assert sum(s for _, s in attempt_usage(view, attempt)) == pytest.approx(4 * 1800.0)
    assert math.isclose(sum(s for _, s in attempt_usage(view, ran(start, None), start + 60)),
                        240.0)


def ran(started: float, ended: float | None) -> AttemptView:
    return AttemptView(attempt_no=1, submission_id="t--a01", ray_status="RUNNING", decided_at=started,
                       started_at=started, ended_at=ended)
