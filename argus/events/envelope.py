"""The envelope of a stored event: where it sits in the log and who caused it."""

from __future__ import annotations

import msgspec

from argus.events.catalog import EventBase

__all__ = ["EventMeta", "Recorded"]


class EventMeta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Who caused an event: ``actor`` is ``user:<id>``, ``reactor:<id>`` or ``system``."""

    actor: str = "system"
    request_id: str = ""


class Recorded(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as read back from the log. (Not tracked by the cycle collector: an
    immutable value without cycles, made once per event read.)"""

    position: int
    stream: str
    version: int
    type: str
    event: EventBase
    meta: EventMeta
    owner: str | None
    recorded_at: float
