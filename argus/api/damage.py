"""A damaged log, as the API says it: the answers of a request that met damage, the
server log (once per damage) and ``/healthz``.

Damage found at start is the store's (``EventStore.damage``, with ``v2.sqlite.on_damage:
serve_reads``): every write answers 503. Damage met while reading (an event that does not
decode, a page SQLite cannot read) answers 500 naming it, never the generic 500.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from argus.store import EventDecodeError, LogDamaged, UnknownEventType

__all__ = ["DamageBoard", "damage_handlers"]

log = logging.getLogger("argus.api")
_CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_MAX_KEPT = 20  # damage reports kept for /healthz (the first ones: the rest are alike)
_HOW = "the event log is damaged: {}; `argus replay verify` tells more (docs/operations.md, \"A damaged log\")"


class DamageBoard:
    """The damage this server has met, each said once in the server log."""

    def __init__(self) -> None:
        self.reports: list[str] = []
        self._seen: set[str] = set()

    def report(self, text: str) -> None:
        if text in self._seen:
            return
        self._seen.add(text)
        log.error("%s", text)
        if len(self.reports) < _MAX_KEPT:
            self.reports.append(text)


def _board(request: Request[Any, Any, Any]) -> DamageBoard:
    board: DamageBoard = request.app.state.damage
    return board


def _answer(request: Request[Any, Any, Any], status: int, text: str) -> Response[dict[str, Any]]:
    from argus.api.app import _http_error  # the one shape of every error body

    _board(request).report(text)
    return _http_error(request, HTTPException(status_code=status, detail=text))


def _refused_write(request: Request[Any, Any, Any], exc: LogDamaged) -> Response[dict[str, Any]]:
    """A write to a log found damaged at start (served for reads only): 503, nothing written."""
    return _answer(request, 503, f"nothing was written: {exc}")


def _undecodable(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    return _answer(request, 500, _HOW.format(exc))


def _database_error(request: Request[Any, Any, Any], exc: sqlite3.DatabaseError) -> Response[dict[str, Any]]:
    """SQLite's own damage (a malformed page) is named; any other database error is the
    generic handler's."""
    if getattr(exc, "sqlite_errorcode", None) in _CORRUPT:
        return _answer(request, 500, _HOW.format(f"SQLite: {exc}"))
    from argus.api.app import _internal_error

    return _internal_error(request, exc)


def damage_handlers() -> dict[type[Exception], Any]:
    """The app's exception handlers for damage."""
    return {LogDamaged: _refused_write, EventDecodeError: _undecodable, UnknownEventType: _undecodable,
            sqlite3.DatabaseError: _database_error}
