"""``verify``: rebuild every projection from the log and compare it with the live tables,
and read every event against its digest (``argus.store.integrity``): an event changed in
place, or one that no longer decodes, is reported as tampering at its position.

The rebuild is ``projections.rebuild_projections`` — the fold the store runs on start —
into a scratch database. Events and live tables are read inside one read transaction, so a
log that is being appended to is compared at one consistent position.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import msgspec

from argus.replay.source import ReplayError, head_position, open_log, scratch_db
from argus.store import read_transaction
from argus.store.integrity import Tampering, find_tampering
from projections import default_projections, rebuild_projections
from projections.compare import RowDiff, attached, compare_tables

__all__ = ["RowDiff", "VerifyReport", "compare_tables", "verify"]


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    position: int  # the log position compared at
    rows_compared: dict[str, int]  # table -> rows on the live side
    diffs: list[RowDiff]
    diffs_truncated: bool = False  # more differences existed than were kept
    tampering: list[Tampering] = []  # events changed in place or undecodable, by position
    unsealed: int = 0  # events with no digest (written before digests were kept): not compared
    copied: bool = False  # read from a temporary copy of the database
    events_per_s: float = 0.0
    seconds: float = 0.0

    def render(self) -> str:
        lines = [f"TAMPERING at position {t.position}: {t.detail}" for t in self.tampering]
        lines += [d.render() for d in self.diffs]
        if self.diffs_truncated:
            lines.append("… more differences not shown")
        if self.unsealed:
            lines.append(f"note: {self.unsealed} event(s) carry no digest (written before digests were kept)")
        total = sum(self.rows_compared.values())
        verdict = ("OK: projections equal the log" if self.ok else
                   f"TAMPERED: {len(self.tampering)} event(s); DIFFERENT: {len(self.diffs)} row(s)" if self.tampering
                   else f"DIFFERENT: {len(self.diffs)} row(s)")
        lines.append(
            f"{verdict} (position {self.position}, {total} rows in {len(self.rows_compared)} "
            f"tables, {self.seconds:.2f} s, {self.events_per_s:,.0f} events/s)"
        )
        return "\n".join(lines)


def verify(db_path: str | Path, *, max_diffs: int = 100) -> VerifyReport:
    """Rebuild every projection of ``db_path`` from its log and compare it with the live
    tables, row by row. ``report.ok`` is False when any row differs."""
    started = time.perf_counter()
    with open_log(db_path) as source, scratch_db() as scratch:
        live = source.conn
        # The rebuild is readable from the live connection too, so that equal tables are
        # recognised inside SQLite (a join on the key) and only differing ones are walked
        # row by row in Python. Attached before the read transaction, as SQLite requires.
        with attached(live, scratch, as_name="rebuilt"), read_transaction(live):
            head = head_position(live)  # one snapshot for the events and the live tables
            tampering, unsealed = _tampering(live, head, max_diffs)
            counts: dict[str, int] = {}
            diffs: list[RowDiff] = []
            truncated = False
            if not any(t.kind == "undecodable" for t in tampering):  # else the rebuild would stop there
                with read_transaction(scratch):
                    rebuild_projections(live, scratch, default_projections(), until=head)
                counts, diffs, truncated = compare_tables(live, scratch, max_diffs=max_diffs, attached="rebuilt")
        seconds = time.perf_counter() - started
        return VerifyReport(
            ok=not diffs and not tampering, position=head, rows_compared=counts, diffs=diffs,
            tampering=tampering, unsealed=unsealed,
            diffs_truncated=truncated, copied=source.copied, seconds=seconds,
            events_per_s=head / seconds if seconds > 0 else 0.0,
        )


def _tampering(conn: sqlite3.Connection, head: int, limit: int) -> tuple[list[Tampering], int]:
    try:
        return find_tampering(conn, head, limit)
    except sqlite3.DatabaseError as exc:  # SQLite's own structures: nothing further can be read
        raise ReplayError(f"SQLite cannot read the log ({exc}): the file is damaged; restore it "
                          "from a backup (docs/operations.md, \"A damaged log\")") from exc
