"""``export`` a range of the log as JSON Lines; ``import`` it into an empty database.

One line per event, every column of ``events``. ``data`` and ``meta`` are the stored bytes
embedded verbatim as JSON values (msgspec.Raw), so other tools read real JSON objects and
an import writes back exactly the bytes that were exported. A payload that is not a JSON
value byte-for-byte (never written by Argus, but possible in a damaged file) goes as base64
in ``data_b64``/``meta_b64`` instead. ``owner`` is always present (null: no owner).
"""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path
from typing import IO, Iterable, Iterator

import msgspec

from argus.lifecycle import IllegalTransition
from argus.replay.source import ReplayError, open_log
from argus.store import LoadedLog, NotEmpty, load_log, log_rows, read_transaction
from projections import PROJECTION_TABLES, default_projections, rebuild_projections

__all__ = ["ExportedEvent", "ImportRefused", "ImportReport", "export_jsonl", "import_jsonl"]

UNSET = msgspec.UNSET


class ExportedEvent(msgspec.Struct, kw_only=True):
    position: int
    stream: str
    version: int
    type: str
    schema_version: int
    data: msgspec.Raw | msgspec.UnsetType = UNSET
    data_b64: str | msgspec.UnsetType = UNSET
    meta: msgspec.Raw | msgspec.UnsetType = UNSET
    meta_b64: str | msgspec.UnsetType = UNSET
    owner: str | None
    recorded_at: float


class ImportReport(msgspec.Struct, frozen=True, kw_only=True):
    events: int
    first_position: int
    last_position: int
    rebuilt: bool  # projections rebuilt (only for a log that starts at position 1)


class ImportRefused(ReplayError):
    """The target is not empty, or the lines are not a valid log."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ExportedEvent)


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _raw_or_b64(value: bytes) -> tuple[msgspec.Raw | msgspec.UnsetType, str | msgspec.UnsetType]:
    try:
        raw = msgspec.json.decode(value, type=msgspec.Raw)
        if bytes(raw) == value:  # whitespace around the value would not survive: use base64
            return msgspec.Raw(value), UNSET
    except msgspec.DecodeError:
        pass
    return UNSET, base64.b64encode(value).decode()


def iter_export(conn: sqlite3.Connection, *, after: int = 0, until: int | None = None) -> Iterator[bytes]:
    """JSON lines (with their newline) for the events after ``after`` up to ``until``."""
    for position, stream, version, type_, schema, data, meta, owner, recorded_at in log_rows(
        conn, after, until, meta=True
    ):
        d, d64 = _raw_or_b64(_as_bytes(data))
        m, m64 = _raw_or_b64(_as_bytes(meta))
        line = ExportedEvent(
            position=position, stream=stream, version=version, type=type_,
            schema_version=schema, data=d, data_b64=d64, meta=m, meta_b64=m64,
            owner=owner, recorded_at=recorded_at,
        )
        yield _encoder.encode(line) + b"\n"


def export_jsonl(db_path: str | Path, out: IO[bytes], *, after: int = 0,
                 until: int | None = None) -> int:
    """Write events (after, until] of ``db_path`` to ``out``; return how many."""
    n = 0
    with open_log(db_path) as source, read_transaction(source.conn):  # one snapshot, however long
        for line in iter_export(source.conn, after=after, until=until):
            out.write(line)
            n += 1
    return n


def _column(raw: msgspec.Raw | msgspec.UnsetType, b64: str | msgspec.UnsetType, name: str,
            position: int) -> bytes:
    if raw is not UNSET:
        return bytes(raw)  # type: ignore[arg-type]
    if b64 is not UNSET:
        return base64.b64decode(b64)  # type: ignore[arg-type]
    raise ImportRefused(f"line for position {position} has no {name}")


def _rows(lines: Iterable[bytes], allow_partial: bool) -> Iterator[tuple[object, ...]]:
    expected: int | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ev = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ImportRefused(f"line {number}: {exc}") from exc
        if expected is None and ev.position != 1 and not allow_partial:
            raise ImportRefused(
                f"the export starts at position {ev.position}, not 1: projections cannot be "
                "rebuilt from a partial log (use allow_partial to import the events only)"
            )
        if expected is not None and ev.position != expected:
            raise ImportRefused(f"line {number}: position {ev.position}, expected {expected} "
                                "(positions must be gapless and in order)")
        expected = ev.position + 1
        yield (
            ev.position, ev.stream, ev.version, ev.type, ev.schema_version,
            _column(ev.data, ev.data_b64, "data", ev.position),
            _column(ev.meta, ev.meta_b64, "meta", ev.position),
            ev.owner, ev.recorded_at,
        )


def import_jsonl(lines: Iterable[bytes], db_path: str | Path, *,
                 allow_partial: bool = False) -> ImportReport:
    """Load exported lines into the empty database ``db_path`` (created if missing),
    keeping positions, streams, versions and recorded_at; then rebuild its projections.
    All or nothing: one transaction."""
    def rebuild(conn: sqlite3.Connection, loaded: LoadedLog) -> None:
        if loaded.first_position == 1 or loaded.events == 0:  # a whole log: its projections
            rebuild_projections(conn, conn, default_projections())

    try:
        loaded = load_log(db_path, _rows(lines, allow_partial), empty=PROJECTION_TABLES, then=rebuild)
    except NotEmpty as exc:
        raise ImportRefused(str(exc)) from exc
    except ImportRefused:
        raise
    except (sqlite3.IntegrityError, IllegalTransition, ValueError) as exc:
        # ValueError covers the projections' own refusals (UserEventError, decode errors).
        raise ImportRefused(f"the lines are not a valid log: {exc}") from exc
    return ImportReport(events=loaded.events, first_position=loaded.first_position,
                        last_position=loaded.last_position,
                        rebuilt=loaded.first_position == 1 or loaded.events == 0)
