"""The log under damage: what a start checks before it writes, each event's digest, and
the high-water mark of acknowledged positions kept outside the database.

At start (``check_log``, before anything writes to the file):

1. ``PRAGMA quick_check``: the b-tree pages, their headers and cells. On a log of a
   million events (336 MiB) it takes 0.3 s with the file in the page cache
   (docs/evaluation/2026-12-03-log-integrity.md).
2. The high-water file (``<db>-acked``): the highest position ever acknowledged. A log
   that ends before it lost acknowledged events (a WAL cut, storage that dropped fsynced
   writes, an old backup put back); appending to it would give their positions to other
   events, so nothing is appended until an admin accepts the loss (``argus db accept-loss``).
3. Every event after the last verified point (``log_verified``): it must decode, and its
   stored digest must match its columns. The point then moves to the head, so a start
   reads only what was written since the one before.

A damaged log is refused with ``LogDamaged``, or opened for reads only where the admin
chose that (``v2.sqlite.on_damage: serve_reads``).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Sequence
from urllib.parse import quote

import msgspec

from argus.events.codec import EventDecodeError, UnknownEventType
from argus.store.errors import StoreError
from argus.store.log import Decoders

__all__ = [
    "Damage", "HighWater", "LogCheck", "LogDamaged", "Tampering", "accept_loss", "check_log", "event_digest",
    "IntegrityFacts", "find_tampering", "highwater_path", "integrity_facts", "record_verified", "sealed_head",
]

_encode = msgspec.json.Encoder().encode
_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}  # SQLite's words for a damaged file
_ROW = "position, stream, version, type, schema_version, data, meta, owner, recorded_at"


def event_digest(position: int, stream: str, version: int, type_: str, schema: int, data: bytes,
                 meta: bytes, owner: str | None, recorded_at: float) -> bytes:
    """BLAKE2b-128 of one event's columns, as stored. Lengths are hashed before the
    payloads, so no two rows share an input. It is not keyed: it shows a row changed by
    storage or by a tool that does not recompute it, not by one that does."""
    head = _encode((position, stream, version, type_, schema, owner, recorded_at, len(data), len(meta)))
    return hashlib.blake2b(head + data + meta, digest_size=16).digest()


def digest_row(row: Sequence[object]) -> bytes:
    """``event_digest`` of a row in ``EVENT_COLUMNS`` order."""
    return event_digest(*row)  # type: ignore[arg-type]


class Damage(msgspec.Struct, frozen=True, kw_only=True):
    """What a check found. ``kind``: malformed (SQLite's own structures), undecodable (an
    event that does not decode), tampered (an event that does not match its digest),
    missing (acknowledged positions the log no longer holds), highwater (the high-water
    file cannot be read)."""

    kind: str
    detail: str
    position: int | None = None
    missing: int = 0


class LogDamaged(StoreError):
    """The log is damaged: it takes no writes. The message says what was found, where, and
    the commands that tell more or repair."""

    def __init__(self, path: str, damage: Damage) -> None:
        self.path = path
        self.damage = damage
        if damage.kind == "missing":
            then = (f"restore the file from a backup that holds them, or accept the loss with `argus db "
                    f"accept-loss --db {path} --missing {damage.missing}` (those positions are never used again)")
        else:
            then = f"`argus replay --db {path} verify` tells more; restore the file from a backup"
        super().__init__(
            f"the event log {path} is damaged: {damage.detail}. It takes no writes: {then}. To serve "
            "reads only meanwhile, set v2.sqlite.on_damage: serve_reads (docs/operations.md, \"A damaged log\")")


class LogCheck(msgspec.Struct, frozen=True, kw_only=True):
    """A start's check: the head it saw (lost positions an admin accepted count as
    written), how many events it decoded, and the damage, if any."""

    head: int
    checked: int = 0
    seconds: float = 0.0
    damage: Damage | None = None


def highwater_path(db_path: str | Path) -> Path:
    """Where the high-water mark of ``db_path`` is kept: next to it."""
    return Path(f"{db_path}-acked")


_WIDTH = 21  # 20 digits and a newline: every write is the same size, within one sector


class HighWater:
    """The highest position ever acknowledged, in a small file next to the database.

    After each commit the position is written (``stage``: no fsync; an exclusive ``flock``
    around read-compare-write, so the mark only grows across processes too), and the
    caller is answered once it is on disk (``durable``). The fsyncs are coalesced, like
    the commits: one ``fdatasync``, on a thread of its own (the event loop goes on), covers
    every position written before it began. Without ``fsync``
    (synchronous=NORMAL or OFF) the mark is as durable as the commits: not across a crash
    of the machine."""

    def __init__(self, db_path: str | Path, *, fsync: bool) -> None:
        self.path = highwater_path(db_path)
        self.fsync = fsync
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.known = read_highwater(self.path) or 0  # written (by anyone) up to here
        self.synced = 0  # on disk up to here, as far as this process knows
        self._flushing: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="argus-highwater")

    def stage(self, position: int) -> None:
        """Write ``position`` as acknowledged (no-op when the file is already past it)."""
        if position <= self.known:  # the file only grows: it is at least what we last saw
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            current = _parse(os.pread(self._fd, 64, 0))
            if current is None or position > current:
                os.pwrite(self._fd, b"%020d\n" % position, 0)
                current = position
            self.known = current
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def advance(self, position: int) -> None:
        """``stage`` and sync at once (at open, off the append path)."""
        self.stage(position)
        if self.fsync:
            os.fdatasync(self._fd)
            self.synced = max(self.synced, self.known)

    async def durable(self, position: int) -> None:
        """Return once the mark is on disk at ``position`` or past it."""
        if not self.fsync:
            return
        while self.synced < position:
            if self._flushing is None:
                self._flushing = asyncio.ensure_future(self._flush(self.known))
            # Shielded: a caller that goes away does not cancel the others' fsync.
            await asyncio.shield(self._flushing)

    async def _flush(self, target: int) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, os.fdatasync, self._fd)
            self.synced = max(self.synced, target)
        finally:
            self._flushing = None

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        os.close(self._fd)


def _parse(raw: bytes) -> int | None:
    text = raw.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def read_highwater(path: Path) -> int | None:
    """The mark in ``path``: None when the file is missing or empty; ValueError when it
    holds anything but a number."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    value = _parse(raw[:64])
    if value is None or len(raw) > _WIDTH:
        raise ValueError(f"{path} does not hold a position ({raw[:40]!r})")
    return value


def _connect_ro(path: str) -> sqlite3.Connection:
    # mode=ro: a read-only connection never checkpoints the WAL into the main file.
    return sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True, isolation_level=None)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")}  # not an attached one


def sealed_head(conn: sqlite3.Connection) -> int:
    """The last position used: the log's head, or the end of a loss an admin accepted."""
    head = int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])
    if "first" in _columns(conn, "log_losses"):
        head = max(head, int(conn.execute("SELECT coalesce(max(last), 0) FROM log_losses").fetchone()[0]))
    return head


def check_log(path: str) -> LogCheck:
    """Check the database at ``path`` without writing to it (see the module docstring).
    A file that does not exist yet is whole, unless the high-water file says it held events."""
    started = time.perf_counter()
    damage: Damage | None = None
    head = checked = 0
    try:
        mark = read_highwater(highwater_path(path))
    except ValueError as exc:
        return LogCheck(head=0, damage=Damage(kind="highwater", detail=f"{exc}; if the log is known to be "
                                              "whole, remove that file and it is written anew"))
    if Path(path).exists():
        conn = _connect_ro(path)
        try:
            head, checked, damage = _check_file(conn)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in _DAMAGED:
                raise  # not damage (a file this user may not read, say): the open says so
            damage = Damage(kind="malformed", detail=f"SQLite cannot read it ({exc})")
        finally:
            conn.close()
    if damage is None and mark is not None and mark > head:
        damage = Damage(kind="missing", missing=mark - head, position=head + 1, detail=(
            f"{mark - head} acknowledged event(s) are missing: the log ends at position {head}, but position "
            f"{mark} was acknowledged ({highwater_path(path)}); appending would give their positions to new events"))
    return LogCheck(head=head, checked=checked, seconds=time.perf_counter() - started, damage=damage)


def _check_file(conn: sqlite3.Connection) -> tuple[int, int, Damage | None]:
    problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        return 0, 0, Damage(kind="malformed", detail="SQLite's quick_check failed: " + "; ".join(problems))
    if "position" not in _columns(conn, "events"):
        return 0, 0, None  # not a log yet (migrations create it)
    head = sealed_head(conn)
    verified = 0
    if "position" in _columns(conn, "log_verified"):
        row = conn.execute("SELECT position FROM log_verified WHERE id = 1").fetchone()
        verified = int(row[0]) if row else 0
    checked = int(conn.execute("SELECT count(*) FROM events WHERE position > ?", (verified,)).fetchone()[0])
    for finding in _scan(conn, verified, None, stop_at_first=True):
        return head, checked, finding
    return head, checked, None


def _scan(conn: sqlite3.Connection, after: int, until: int | None, *, stop_at_first: bool) -> Iterator[Damage]:
    """Decode each event after ``after`` (up to ``until``) and compare its digest; yield
    what does not hold."""
    has_digest = "digest" in _columns(conn, "events")
    sql = f"SELECT {_ROW}, {'digest' if has_digest else 'NULL'} FROM events WHERE position > ?"
    params: list[int] = [after]
    if until is not None:
        sql += " AND position <= ?"
        params.append(until)
    decoders = Decoders()
    for row in conn.execute(sql + " ORDER BY position", params):
        position, stream, type_, schema, digest = row[0], row[1], row[3], row[4], row[9]
        found = None
        try:
            decoders[type_, schema](row[5])
        except (msgspec.DecodeError, EventDecodeError, UnknownEventType) as exc:
            found = Damage(kind="undecodable", position=position, detail=(
                f"the {type_} at position {position} (stream {stream}) does not decode: {exc}"))
        if found is None and digest is not None and digest != digest_row(row[:9]):
            found = Damage(kind="tampered", position=position, detail=(
                f"the {type_} at position {position} (stream {stream}) was changed after it was written: "
                "its columns no longer match its digest"))
        if found is not None:
            yield found
            if stop_at_first:
                return


class Tampering(msgspec.Struct, frozen=True, kw_only=True):
    """One event found changed or unreadable by ``find_tampering``."""

    position: int
    kind: str  # tampered | undecodable
    detail: str


def find_tampering(conn: sqlite3.Connection, until: int, limit: int = 100) -> tuple[list[Tampering], int]:
    """Every event up to ``until`` whose digest or decoding fails (at most ``limit``),
    and how many events carry no digest (written before digests were kept)."""
    found: list[Tampering] = []
    for d in _scan(conn, 0, until, stop_at_first=False):
        found.append(Tampering(position=d.position or 0, kind=d.kind, detail=d.detail))
        if len(found) >= limit:
            break
    unsealed = 0
    if "digest" in _columns(conn, "events"):
        unsealed = int(conn.execute("SELECT count(*) FROM events WHERE position <= ? AND digest IS NULL",
                                    (until,)).fetchone()[0])
    return found, unsealed


def record_verified(db: sqlite3.Connection, position: int) -> None:
    """Inside a write transaction: the log is checked up to ``position``."""
    db.execute("INSERT INTO log_verified VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET "
               "position = max(position, excluded.position), checked_at = excluded.checked_at",
               (position, time.time()))


def accept_loss(db_path: str, missing: int, by: str) -> tuple[int, int]:
    """Record positions head+1 .. mark as lost, as an admin acknowledged; returns them.
    Raises ValueError when ``missing`` is not what is missing (nothing is written then)."""
    mark = read_highwater(highwater_path(db_path)) or 0
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("BEGIN IMMEDIATE")
        try:
            head = sealed_head(conn)
            if mark - head != missing:
                raise ValueError(f"{max(mark - head, 0)} event(s) are missing (log head {head}, acknowledged "
                                 f"up to {mark}), not {missing}; nothing was recorded")
            conn.execute("INSERT INTO log_losses VALUES (?, ?, ?, ?)", (head + 1, mark, time.time(), by))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return head + 1, mark


class IntegrityFacts(msgspec.Struct, frozen=True, kw_only=True):
    """For ``argus db status``: the high-water mark (as text: a number, ``none yet``, or
    why it is unreadable), the verified point, and the losses accepted (first, last, by)."""

    highwater: str
    verified: int
    losses: list[tuple[int, int, str]]


def integrity_facts(db_path: str) -> IntegrityFacts:
    """What ``db_path`` and its high-water file say of its integrity (read-only)."""
    try:
        mark = read_highwater(highwater_path(db_path))
        highwater = str(mark) if mark is not None else "none yet"
    except ValueError as exc:
        highwater = f"unreadable ({exc})"
    verified, losses = 0, []
    conn = _connect_ro(db_path)
    try:
        if "position" in _columns(conn, "log_verified"):
            row = conn.execute("SELECT position FROM log_verified WHERE id = 1").fetchone()
            verified = int(row[0]) if row else 0
        if "first" in _columns(conn, "log_losses"):
            losses = [(int(a), int(b), str(c)) for a, b, c in
                      conn.execute("SELECT first, last, acknowledged_by FROM log_losses ORDER BY first")]
    finally:
        conn.close()
    return IntegrityFacts(highwater=highwater, verified=verified, losses=losses)
