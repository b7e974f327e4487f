"""``export`` a range of the log as JSON Lines; ``import`` it into an empty database.

One line per event, every column of ``events``. ``data`` and ``meta`` are the stored bytes
embedded verbatim as JSON values (msgspec.Raw), so other tools read real JSON objects and
an import writes back exactly the bytes that were exported. A payload that is not a JSON
value byte-for-byte (never written by Argus, but possible in a damaged file) goes as base64
in ``data_b64``/``meta_b64`` instead. ``owner`` is always present (null: no owner).
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable, Iterator

import msgspec

from argus.lifecycle import IllegalTransition
from argus.replay.source import ReplayError, is_postgres_url, open_log
from argus.store import LoadedLog, NotEmpty, load_log, log_rows, read_transaction
from projections import PROJECTION_TABLES, default_projections, rebuild_projections

if TYPE_CHECKING:
    from argus.store.postgres import PostgresEventLog

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


def _line(row: tuple[object, ...]) -> bytes:
    """One stored row as its JSON line (with the newline)."""
    position, stream, version, type_, schema, data, meta, owner, recorded_at = row
    d, d64 = _raw_or_b64(_as_bytes(data))  # type: ignore[arg-type]
    m, m64 = _raw_or_b64(_as_bytes(meta))  # type: ignore[arg-type]
    return _encoder.encode(ExportedEvent(
        position=position, stream=stream, version=version, type=type_,  # type: ignore[arg-type]
        schema_version=schema, data=d, data_b64=d64, meta=m, meta_b64=m64,  # type: ignore[arg-type]
        owner=owner, recorded_at=recorded_at,  # type: ignore[arg-type]
    )) + b"\n"


def iter_export(conn: sqlite3.Connection, *, after: int = 0, until: int | None = None) -> Iterator[bytes]:
    """JSON lines (with their newline) for the events after ``after`` up to ``until``."""
    for row in log_rows(conn, after, until, meta=True):
        yield _line(tuple(row))


def export_jsonl(db_path: str | Path, out: IO[bytes], *, after: int = 0,
                 until: int | None = None) -> int:
    """Write events (after, until] of ``db_path`` (a SQLite file, or a PostgreSQL URL) to
    ``out``; return how many."""
    if is_postgres_url(str(db_path)):
        return asyncio.run(_export_postgres(str(db_path), out, after, until))
    n = 0
    with open_log(db_path) as source, read_transaction(source.conn):  # one snapshot, however long
        for line in iter_export(source.conn, after=after, until=until):
            out.write(line)
            n += 1
    return n


async def _export_postgres(url: str, out: IO[bytes], after: int, until: int | None) -> int:
    n = 0
    log = await _open_postgres(url)
    try:
        async for row in log.raw_rows(after, until):
            out.write(_line(row))
            n += 1
    finally:
        await log.close()
    return n


async def _open_postgres(url: str) -> "PostgresEventLog":
    try:
        from argus.store.postgres import PostgresEventLog

        return await PostgresEventLog.open(url)
    except Exception as exc:  # noqa: BLE001 - the driver's errors: one line, the password hidden
        from argus.store.postgres import describe_open_failure

        raise ReplayError(describe_open_failure(url, exc)) from exc


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
    """Load exported lines into the empty database ``db_path`` (created if missing; or a
    PostgreSQL URL, whose log must be empty), keeping positions, streams, versions and
    recorded_at; then rebuild its projections (SQLite: PostgreSQL keeps none yet). All or
    nothing: one transaction."""
    if is_postgres_url(str(db_path)):
        return asyncio.run(_import_postgres(lines, str(db_path), allow_partial))

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


async def _import_postgres(lines: Iterable[bytes], url: str, allow_partial: bool) -> ImportReport:
    log = await _open_postgres(url)
    try:
        events, first, last = await log.load_rows(_rows(lines, allow_partial))
    except ImportRefused:
        raise
    except NotEmpty as exc:
        raise ImportRefused(str(exc)) from exc
    except Exception as exc:  # a row that does not decode; the database's refusal (asyncpg's errors)
        raise ImportRefused(f"the lines are not a valid log: {exc}") from exc
    finally:
        await log.close()
    return ImportReport(events=events, first_position=first, last_position=last, rebuilt=False)
