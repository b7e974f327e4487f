"""argus.gcpause: the cycle collector is off inside a pause and back on after the last one."""

from __future__ import annotations

import gc

import pytest

from argus.gcpause import collector_paused


def test_a_pause_turns_the_collector_off_and_back_on_even_when_the_body_raises() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_resume_after_the_last_one() -> None:
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # interleaved, as two coroutines may end them
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_cycle_made_during_a_pause_is_collected_after_it() -> None:
    class Node:
        other: "Node"

    gc.collect()
    with collector_paused():
        c, d = Node(), Node()
        c.other, d.other = d, c
        del c, d
    assert gc.collect() >= 2  # the two nodes (and their attribute dicts)
