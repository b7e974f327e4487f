"""The reactor: consumes the log, decides admissions, and talks to Ray (docs/design.md §1, §4, §5)."""

from argus.reactor.classify import classify_failure, is_duplicate_submission
from argus.reactor.reactor import CRASH_POINTS, Reactor
from argus.reactor.state import ReactorState

__all__ = ["CRASH_POINTS", "Reactor", "ReactorState", "classify_failure", "is_duplicate_submission"]
