"""A cap on how fast one user may submit: a token bucket per user (``v2.api.submit_burst``
tasks at once, then ``v2.api.submit_rate_per_s``). One user's script in a loop must not
fill the log and the queue for everyone; a refused submission writes nothing and is told
when to try again (429 with Retry-After)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["SubmitRateLimit"]


class SubmitRateLimit:
    """Per-user token buckets, in this API process's memory (a restart refills them)."""

    def __init__(self, burst: int, rate_per_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.rate_per_s, self.clock = burst, rate_per_s, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, as of)

    @property
    def enabled(self) -> bool:
        return self.burst > 0 and self.rate_per_s > 0

    def take(self, user: str) -> float:
        """Take one submission for ``user``: 0.0 if allowed, else the seconds to wait."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        tokens, since = self._buckets.get(user, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) * self.rate_per_s)
        if tokens >= 1.0:
            self._buckets[user] = (tokens - 1.0, now)
            return 0.0
        self._buckets[user] = (tokens, now)
        return (1.0 - tokens) / self.rate_per_s

    def refusal(self, wait_s: float) -> tuple[str, dict[str, str]]:
        """The 429's message and headers."""
        retry = max(1, math.ceil(wait_s))
        return (f"too many submissions: at most {self.burst} at once, then "
                f"{self.rate_per_s:g} per second per user; try again in {retry} s",
                {"Retry-After": str(retry)})
