"""Tokens and who holds them: hashing, and a cache from token hash to principal."""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING

import msgspec

from projections.reads import ProjectionReads

if TYPE_CHECKING:
    from argus.store import EventStore

__all__ = ["AuthCache", "Principal", "hash_token", "new_token"]


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """The caller of a request, as the users projection says now."""

    user_id: str
    is_admin: bool
    disabled: bool
    display_name: str = ""
    token_id: str = ""
    token_last_used_at: float | None = None  # as last recorded (coarse: see TokenUsed)
    # What their tasks may ask for (UserLimitsSet; admins are not limited)
    max_priority: int = 0
    may_pin: bool = False  # may submit preemptible: false
    max_queued: int = 0  # 0: the server's default (v2.api.default_max_queued)
    max_gpus: float = 0.0  # GPUs their admitted tasks may hold at once (0: no cap)

    @property
    def actor(self) -> str:
        return f"user:{self.user_id}"


def new_token() -> str:
    """A fresh random token (shown to its owner once)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What the log and the tokens table keep: SHA-256 hex of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


class AuthCache:
    """token hash → Principal, read through from the projection. Cleared whenever a user
    event is appended here or seen by the event tailer, so a disabled user or a revoked
    token is refused at once."""

    def __init__(self, store: "EventStore", max_entries: int = 10_000) -> None:
        self._store = store
        self._reads = ProjectionReads(store)
        self._cache: dict[str, Principal | None] = {}
        self._max = max_entries
        self._generation = 0

    def invalidate(self) -> None:
        self._cache.clear()
        self._generation += 1

    async def lookup(self, token: str) -> Principal | None:
        digest = hash_token(token)
        if digest in self._cache:
            return self._cache[digest]
        generation = self._generation
        holder = await self._reads.token_holder(digest)
        # Not found on a copy of a shared log: the token may have been issued on another
        # host a moment ago, before this copy followed it. One look at the log settles it.
        if holder is None and await self._store.catch_up():
            holder = await self._reads.token_holder(digest)
        principal = None
        if holder is not None:
            principal = Principal(
                user_id=holder.user_id, is_admin=holder.is_admin, disabled=holder.disabled,
                display_name=holder.display_name, token_id=holder.token_id,
                token_last_used_at=holder.last_used_at, max_priority=holder.max_priority,
                may_pin=holder.may_pin, max_queued=holder.max_queued, max_gpus=holder.max_gpus,
            )
        if generation != self._generation:
            return principal  # a user event came in meanwhile: the row may predate it
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[digest] = principal
        return principal
