"""argus.gcpause: the cycle collector is off inside a pause and back on after the last one.

The collector is one switch for the whole process, and the suite's shared stacks run a
reactor in a background thread whose turns pause it. So each case runs in a fresh
interpreter, where nothing else can turn it off: in the suite's own process a turn of a
session-wide stack, caught mid-way, failed the first assertion on a loaded host."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _in_fresh_python(body: str) -> None:
    """Run ``body`` (with ``gc`` and ``collector_paused`` imported) in a new interpreter;
    its assertions are the test's."""
    code = "import gc\nfrom argus.gcpause import collector_paused\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_pause_turns_the_collector_off_and_back_on_even_when_the_body_raises() -> None:
    _in_fresh_python("""
        assert gc.isenabled()
        try:
            with collector_paused():
                assert not gc.isenabled()
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        else:
            raise AssertionError("the body's error was swallowed")
        assert gc.isenabled()
    """)


def test_overlapping_pauses_resume_after_the_last_one() -> None:
    _in_fresh_python("""
        first, second = collector_paused(), collector_paused()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # interleaved, as two coroutines may end them
        assert not gc.isenabled()
        second.__exit__(None, None, None)
        assert gc.isenabled()
    """)


def test_a_collector_that_was_off_stays_off() -> None:
    _in_fresh_python("""
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()
    """)


def test_a_cycle_made_during_a_pause_is_collected_after_it() -> None:
    _in_fresh_python("""
        class Node:
            pass

        gc.collect()
        with collector_paused():
            c, d = Node(), Node()
            c.other, d.other = d, c
            del c, d
        assert gc.collect() >= 2  # the two nodes (and their attribute dicts)
    """)
