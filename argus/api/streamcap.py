"""How many event and log streams (SSE) one token and one user may hold open at once.

A stream holds a connection, a queue and a task for as long as the client stays; without
a cap one token could open thousands. Each stream takes a ``Slot`` before its answer is
sent (beyond a cap: a 429 that says which cap and how many are open) and gives it back
when the stream ends, however it ends: its generator's ``finally``, or, for a stream whose
generator never started (the client left first), when the slot is dropped.
"""

from __future__ import annotations

import collections
from typing import AsyncIterator, TypeVar

from litestar.exceptions import HTTPException

from argus.service import Principal

__all__ = ["Slot", "StreamSlots", "held"]

T = TypeVar("T")


class Slot:
    """One open stream's place, given back once (``release``, or when dropped)."""

    __slots__ = ("_slots", "_keys")

    def __init__(self, slots: "StreamSlots", keys: tuple[str, str]) -> None:
        self._slots: StreamSlots | None = slots
        self._keys = keys

    def release(self) -> None:
        if self._slots is not None:
            self._slots._give_back(self._keys)
            self._slots = None

    def __del__(self) -> None:
        self.release()


class StreamSlots:
    """Open streams per token and per user, held to ``per_token`` and ``per_user``
    (``v2.api.max_streams_per_token``, ``…_per_user``; 0: no cap)."""

    def __init__(self, per_token: int, per_user: int) -> None:
        self.per_token = per_token
        self.per_user = per_user
        self.open: collections.Counter[str] = collections.Counter()

    def take(self, who: Principal) -> Slot:
        """A slot for a new stream of ``who``; HTTPException 429 when a cap is reached."""
        token, user = f"token:{who.token_id}", f"user:{who.user_id}"
        if self.per_token and who.token_id and self.open[token] >= self.per_token:
            raise self._refused(f"{self.open[token]} streams are open with this token, the cap is "
                                f"{self.per_token} (v2.api.max_streams_per_token)")
        if self.per_user and self.open[user] >= self.per_user:
            raise self._refused(f"{self.open[user]} streams are open for {who.user_id}, the cap is "
                                f"{self.per_user} (v2.api.max_streams_per_user)")
        self.open[token] += 1
        self.open[user] += 1
        return Slot(self, (token, user))

    @staticmethod
    def _refused(why: str) -> HTTPException:
        return HTTPException(status_code=429, headers={"Retry-After": "5"}, detail=(
            f"too many open event or log streams: {why}. Close one (a browser tab, a "
            "`--follow`) and try again"))

    def _give_back(self, keys: tuple[str, str]) -> None:
        for key in keys:
            self.open[key] -= 1
            if self.open[key] <= 0:
                del self.open[key]


async def held(slot: Slot, stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """``stream``, holding ``slot`` until it ends."""
    try:
        async for item in stream:
            yield item
    finally:
        slot.release()
