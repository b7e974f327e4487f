"""Streaming responses that keep their own media type.

Litestar gives a route's media type precedence over a streaming response's (the opposite
of a plain Response), so a route documented as JSON or text would send an event stream or
a download with the wrong Content-Type. These pin theirs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from litestar.response import ServerSentEvent, Stream

__all__ = ["Download", "EventStream"]


class _Pinned:
    pinned_media_type: ClassVar[str]

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["media_type"] = self.pinned_media_type
        return super().to_asgi_response(*args, **kwargs)  # type: ignore[misc]


class EventStream(_Pinned, ServerSentEvent):
    """Server-sent events, ``text/event-stream`` on any route."""

    pinned_media_type = "text/event-stream"


class Download(_Pinned, Stream):
    """A file's bytes, ``application/octet-stream`` on any route."""

    pinned_media_type = "application/octet-stream"
