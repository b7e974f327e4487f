"""What the start's integrity check costs on a big log (argus.store.integrity.check_log).

    python tests/bench/bench_start_check.py [--events 1000000] [--dir PATH]

Builds a log of ``--events`` events (bench_store's task lifecycles), then times: SQLite's
``PRAGMA quick_check`` alone; the first start (no verified point: every event decoded,
and compared with its digest where it has one); and the next starts (nothing new since:
the quick_check and a few lookups). Prints seconds; not a timed test. The file is read
from the page cache after the build; a cold start reads it from disk first.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.store.integrity import check_log, record_verified  # noqa: E402
from tests.bench.bench_store import build_log  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the log (local disk)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "big.sqlite3"
        build_log(path, args.events)
        print(f"log of {args.events:,} events, {path.stat().st_size / 2**20:,.0f} MiB")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        started = time.perf_counter()
        conn.execute("PRAGMA quick_check").fetchall()
        print(f"{'PRAGMA quick_check alone':44} {time.perf_counter() - started:8.2f} s")
        conn.close()
        first = check_log(str(path))
        assert first.damage is None, first.damage
        print(f"{'first start (every event decoded)':44} {first.seconds:8.2f} s  ({first.checked:,} events)")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        record_verified(conn, first.head)
        conn.execute("COMMIT")
        conn.close()
        for i in range(3):
            again = check_log(str(path))
            print(f"{f'next start {i + 1} (nothing new)':44} {again.seconds:8.2f} s  ({again.checked:,} events)")


if __name__ == "__main__":
    main()
