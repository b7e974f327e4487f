"""Encoding events for the log, and decoding them back, upcasting old schema versions.

An event is stored as ``(type, schema_version, data)`` where ``data`` is the msgspec JSON of
the Struct. Reading an event written with an older schema applies the registered upcasters
in order (``v1 -> v2 -> …``) on the plain JSON object, then converts it to the current
Struct. Stored rows are never rewritten.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import msgspec

from argus.events.catalog import ALL_EVENT_TYPES, EventBase

__all__ = [
    "EventDecodeError",
    "UnknownEventType",
    "decode_event",
    "decode_failure",
    "decoder_for",
    "encode_event",
    "event_codec",
    "register_upcaster",
]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# (type, from_version) -> function turning a from_version payload into from_version + 1.
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}

_encoder = msgspec.json.Encoder()
_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    name: msgspec.json.Decoder(cls) for name, cls in ALL_EVENT_TYPES.items()
}


class UnknownEventType(LookupError):
    """The log holds an event type this code does not know (written by newer code?)."""


class EventDecodeError(ValueError):
    """A stored payload does not match its event type, or its schema is newer than ours."""


def register_upcaster(type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` to lift ``type_name`` payloads from ``from_version`` by one version."""

    def wrap(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(type_name, from_version)] = fn
        return fn

    return wrap


def encode_event(event: EventBase) -> tuple[str, int, bytes]:
    """Return ``(type, schema_version, data)`` for the log."""
    cls = type(event)
    return cls.__struct_config__.tag, cls.SCHEMA, _encoder.encode(event)  # type: ignore[return-value]


class EventCodec(NamedTuple):
    """How events of one class are written at its current schema."""

    type: str
    schema: int
    encode: Callable[[EventBase], bytes]
    decode: Callable[[bytes], EventBase]  # raises msgspec.DecodeError


def event_codec(cls: type[EventBase]) -> EventCodec:
    """The codec of ``cls`` (for writers of many events: one lookup per class, not three
    per event; ``encode_event`` and ``decode_event`` do the same work one at a time)."""
    tag: str = cls.__struct_config__.tag  # type: ignore[assignment]
    return EventCodec(tag, cls.SCHEMA, _encoder.encode, _decoders[tag].decode)


def decode_event(type_name: str, schema: int, data: bytes) -> EventBase:
    """Decode a stored event, upcasting it when it was written with an older schema."""
    try:
        return decoder_for(type_name, schema)(data)
    except msgspec.DecodeError as exc:
        raise decode_failure(type_name, schema, exc) from exc


def decode_failure(type_name: str, schema: int, exc: msgspec.DecodeError, position: int | None = None) -> EventDecodeError:
    """The named error for a stored payload that msgspec could not decode (``position``:
    where it is in the log, when the caller knows)."""
    where = f"event at position {position}: " if position is not None else ""
    return EventDecodeError(f"{where}stored {type_name} v{schema} does not decode: {exc}")


def decoder_for(type_name: str, schema: int) -> Callable[[bytes], EventBase]:
    """The function that decodes stored ``type_name`` payloads of ``schema``: msgspec's own
    decoder when the schema is current, else decode + upcasters + convert. Callers that
    decode many rows keep these by (type, schema) and skip the lookups per row.

    Raises UnknownEventType or EventDecodeError when no such function can exist; the
    function itself raises ``msgspec.DecodeError`` for a payload that does not decode
    (no wrapper per call: a rebuild calls it a million times; see ``decode_event``)."""
    cls = ALL_EVENT_TYPES.get(type_name)
    if cls is None:
        raise UnknownEventType(
            f"unknown event type {type_name!r} in the log; is this database from newer code?"
        )
    if schema > cls.SCHEMA:
        raise EventDecodeError(f"{type_name} has schema v{schema}, newer than this code's v{cls.SCHEMA}")
    if schema == cls.SCHEMA:
        return _decoders[type_name].decode  # type: ignore[no-any-return]
    for version in range(schema, cls.SCHEMA):
        if (type_name, version) not in _UPCASTERS:
            raise EventDecodeError(f"no upcaster for {type_name} v{version} -> v{version + 1}")

    def upcast_and_decode(data: bytes) -> EventBase:
        payload: dict[str, Any] = msgspec.json.decode(data)
        for version in range(schema, cls.SCHEMA):
            payload = _UPCASTERS[(type_name, version)](payload)
        payload["type"] = type_name
        return msgspec.convert(payload, cls)

    return upcast_and_decode
