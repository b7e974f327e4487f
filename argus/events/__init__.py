"""Events: the catalog of facts (``catalog``) and their storage encoding (``codec``)."""

from argus.events.catalog import *  # noqa: F403
from argus.events.catalog import __all__ as _catalog_all
from argus.events.cancel import cancel_events
from argus.events.envelope import EventMeta, Recorded
from argus.events.codec import (
    EventDecodeError,
    UnknownEventType,
    decode_event,
    encode_event,
    register_upcaster,
)

__all__ = [
    *_catalog_all,
    "EventDecodeError",
    "EventMeta",
    "Recorded",
    "UnknownEventType",
    "cancel_events",
    "decode_event",
    "encode_event",
    "register_upcaster",
]
