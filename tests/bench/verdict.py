"""A bench's targets, said one per line as MET or NOT MET; the exit status is 1 when any is
NOT MET, so a bench run by a script or CI cannot report a miss and pass."""

from __future__ import annotations

import sys

__all__ = ["Verdict"]


class Verdict:
    """Collects a bench's checks; :meth:`finish` prints them and exits 1 on a miss."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.missed: list[str] = []

    def check(self, target: str, met: bool, measured: str) -> bool:
        """One target: what it asks ("steady turn <= 10 ms CPU"), whether it held, and
        the figure it was judged on ("median 3.1 ms")."""
        self.lines.append(f"{target}: {'MET' if met else 'NOT MET'} ({measured})")
        if not met:
            self.missed.append(target)
        return met

    def at_most(self, target: str, value: float, limit: float, unit: str = "ms") -> bool:
        return self.check(f"{target} <= {limit:g} {unit}", value <= limit, f"{value:.1f} {unit}")

    def finish(self) -> None:
        for line in self.lines:
            print(f"verdict: {line}")
        if self.missed:
            print(f"NOT MET: {'; '.join(self.missed)}")
            sys.exit(1)
