"""Cursors of keyset pagination: where a page ended, handed to the client as opaque text
and back. Subclasses add the fields of their list's order."""

from __future__ import annotations

import base64
from typing import TypeVar

import msgspec

__all__ = ["Cursor"]

C = TypeVar("C", bound="Cursor")
_REFUSED = "not a cursor from a previous page (pass next_cursor back unchanged)"


class Cursor(msgspec.Struct, frozen=True, array_like=True):
    """A page's end, as URL-safe text (``encode``) and back (``decode``)."""

    def encode(self) -> str:
        return base64.urlsafe_b64encode(msgspec.json.encode(self)).decode().rstrip("=")

    @classmethod
    def decode(cls: type[C], text: str) -> C:
        """ValueError for text that is not a cursor of this kind."""
        try:
            return msgspec.json.decode(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), type=cls)
        except (ValueError, msgspec.DecodeError) as exc:
            raise ValueError(_REFUSED) from exc

    @staticmethod
    def refused() -> ValueError:
        """The error for a cursor that decodes but does not fit (another list, order)."""
        return ValueError(_REFUSED)
