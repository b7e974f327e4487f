"""The base of every event (``argus.events.catalog`` has the rules they follow)."""

from __future__ import annotations

from typing import ClassVar

import msgspec

__all__ = ["EventBase"]


class EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    """Base of every event. ``SCHEMA`` is the version written with new events.

    ``gc=False`` (inherited): events are immutable values that never hold a reference back
    to themselves, so the cycle collector need not track them; a rebuild makes millions."""

    SCHEMA: ClassVar[int] = 1
