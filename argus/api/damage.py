"""A damaged log, as the API says it: the answers of a request that met damage, the
server log (once per damage) and ``/healthz``.

Damage found at start is the store's (``EventStore.damage``, with ``v2.sqlite.on_damage:
serve_reads``): every write answers 503. Damage met while reading (an event that does not
decode, a page SQLite cannot read) answers 500 naming it, never the generic 500.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Callable

from litestar import Request, Response
from litestar.exceptions import HTTPException

from argus.store import EventDecodeError, LogDamaged, UnknownEventType

__all__ = ["DamageBoard", "damage_handlers"]

log = logging.getLogger("argus.api")
_CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_MAX_SAID = 1000  # distinct damage said in the server log (a bound on what is remembered)
_MAX_KEPT = 20  # damage reports kept for /healthz (the first ones: the rest are alike)
_HOW = "the event log is damaged: {}; `argus replay verify` tells more (docs/operations.md, \"A damaged log\")"


class DamageBoard:
    """The damage this server has met, each said once in the server log."""

    def __init__(self) -> None:
        self.reports: list[str] = []
        self._seen: set[str] = set()

    def report(self, text: str) -> None:
        if text in self._seen or len(self._seen) > _MAX_SAID:
            return
        self._seen.add(text)
        log.error("%s", text if len(self._seen) <= _MAX_SAID else "more damage met; not said again until restart")
        if len(self.reports) < _MAX_KEPT:
            self.reports.append(text)


Handler = Callable[[Request[Any, Any, Any], Any], Response[Any]]


def damage_handlers(http_error: Handler, internal_error: Handler) -> dict[int | type[Exception], Handler]:
    """The app's exception handlers for damage: ``http_error`` gives every error body its
    one shape; ``internal_error`` answers the database errors that are not damage."""

    def answer(request: Request[Any, Any, Any], status: int, text: str) -> Response[Any]:
        board: DamageBoard = request.app.state.damage
        board.report(text)
        return http_error(request, HTTPException(status_code=status, detail=text))

    def refused_write(request: Request[Any, Any, Any], exc: LogDamaged) -> Response[Any]:
        """A write to a log found damaged at start (served for reads only): nothing written."""
        return answer(request, 503, f"nothing was written: {exc}")

    def undecodable(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        return answer(request, 500, _HOW.format(exc))

    def database_error(request: Request[Any, Any, Any], exc: sqlite3.DatabaseError) -> Response[Any]:
        """SQLite's own damage (a malformed page) is named; any other database error is
        the generic handler's."""
        if getattr(exc, "sqlite_errorcode", None) in _CORRUPT:
            return answer(request, 500, _HOW.format(f"SQLite: {exc}"))
        return internal_error(request, exc)

    return {LogDamaged: refused_write, EventDecodeError: undecodable, UnknownEventType: undecodable,
            sqlite3.DatabaseError: database_error}
