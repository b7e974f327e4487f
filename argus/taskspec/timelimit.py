"""``time_limit``: how long one attempt of a task may run, as Slurm's ``--time`` says it.

Accepted forms (a string, so that a unit is never guessed): ``45s``, ``90m``, ``2h``,
``1d``, ``1.5h``; ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS`` (and ``D-HH``, ``D-HH:MM``).
Counted from the moment Ray reports the attempt running; the reactor stops the job at the
limit and the task fails with ``TIME_LIMIT`` (not retried).
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

__all__ = ["MAX_TIME_LIMIT_S", "MIN_TIME_LIMIT_S", "TIME_LIMIT_ACCEPTS", "TimeLimit", "time_limit_seconds"]

MIN_TIME_LIMIT_S = 10.0
MAX_TIME_LIMIT_S = 365 * 86_400.0

_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_WITH_UNIT = r"(?P<amount>\d+(?:\.\d+)?)(?P<unit>[smhd])"
_CLOCK = r"(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d{1,2}))?(?::(?P<c>\d{1,2}))?"
_FORM = re.compile(rf"^(?:{_WITH_UNIT}|{_CLOCK})$")

TIME_LIMIT_ACCEPTS = ("a duration with its unit (45s, 90m, 2h, 1d) or a clock time "
                      "(MM:SS, HH:MM:SS, D-HH:MM:SS), from 10 s to 365 days")
# The form is checked with the spec's types (every bad field reported at once); the range
# by time_limit_seconds.
TimeLimit = Annotated[str, msgspec.Meta(pattern=_FORM.pattern, max_length=32)]


def time_limit_seconds(text: str) -> float:
    """Seconds in ``text`` (one of the forms above); ValueError saying what to write."""
    found = _FORM.match(text.strip())
    if found is None:
        raise ValueError(f"{text[:32]!r} is not a duration: write {TIME_LIMIT_ACCEPTS}")
    if found["unit"]:
        seconds = float(found["amount"]) * _UNIT_S[found["unit"]]
    else:
        days = int(found["days"] or 0)
        parts = [int(p) for p in (found["a"], found["b"], found["c"]) if p is not None]
        if days:  # D-HH, D-HH:MM, D-HH:MM:SS
            hours, minutes, secs = (parts + [0, 0])[:3]
        elif len(parts) == 3:  # HH:MM:SS
            hours, minutes, secs = parts
        elif len(parts) == 2:  # MM:SS
            hours, (minutes, secs) = 0, parts
        else:  # a bare number: its unit would be a guess
            raise ValueError(f"{text[:32]!r} has no unit: write {TIME_LIMIT_ACCEPTS}")
        if (found["b"] is not None and (minutes >= 60 or secs >= 60)) or (days and hours >= 24):
            raise ValueError(f"{text[:32]!r}: minutes and seconds go to 59, hours (after a day) to 23")
        seconds = days * 86_400.0 + hours * 3600.0 + minutes * 60.0 + secs
    if not MIN_TIME_LIMIT_S <= seconds <= MAX_TIME_LIMIT_S:
        raise ValueError(f"{text[:32]!r} is {seconds:g} s: write {TIME_LIMIT_ACCEPTS}")
    return seconds

