"""``argus replay usage``: the usage report (``projections.usage_report``) from projections
rebuilt from the log in a scratch database, not from the live tables: what
``GET /usage`` says must equal it."""

from __future__ import annotations

from pathlib import Path

from argus.replay.source import head_position, open_log, scratch_db
from argus.store import read_transaction
from projections import default_projections, rebuild_projections
from projections.usage_report import UsageBy, UsageReport, read_usage_report

__all__ = ["usage_from_log"]


def usage_from_log(db_path: str | Path, *, by: UsageBy, since: float, until: float, now: float) -> UsageReport:
    """Usage in [since, until) at ``now``, from a rebuild of the whole log."""
    with open_log(db_path) as source, read_transaction(source.conn) as conn:
        position = head_position(conn)
        with scratch_db() as scratch:
            with read_transaction(scratch):
                if position > 0:
                    rebuild_projections(conn, scratch, default_projections(), until=position)
            return read_usage_report(scratch, by=by, since=since, until=until, now=now)
