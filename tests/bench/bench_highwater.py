"""What the high-water file costs an append (argus.store.integrity.HighWater), measured A/B
in one process so that the host's wandering fsync times fall on both sides alike.

    python tests/bench/bench_highwater.py [--blocks 40] [--per-block 25] [--callers 16] [--dir PATH]

One store at synchronous=FULL; blocks of one-event appends alternate between the store as
shipped (the mark written and fsynced after each commit) and the same store with the mark
switched off. Then the same with ``--callers`` concurrent callers through group commit
(one mark per shared transaction). Prints each side's median per-block rate; not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from argus.events import task_stream  # noqa: E402
from argus.store import GroupCommitLog  # noqa: E402
from projections import open_store  # noqa: E402
from tests.events import factories as f  # noqa: E402


async def run(directory: Path, blocks: int, per_block: int, callers: int) -> dict[str, dict[str, list[float]]]:
    store = await open_store(directory / "hw.sqlite3", synchronous="FULL")
    mark = store._highwater
    group = GroupCommitLog(store)
    rates: dict[str, dict[str, list[float]]] = {"single": {"with": [], "without": []},
                                                "group": {"with": [], "without": []}}
    n = 0

    async def append(log: object, i: int) -> None:
        await log.append(task_stream(f"t{i:07d}"), 0, [f.submitted(f"t{i:07d}", f"user{i % 50}")])  # type: ignore[attr-defined]

    for b in range(blocks):
        side = "with" if b % 2 == 0 else "without"
        store._highwater = mark if side == "with" else None
        started = time.perf_counter()
        for _ in range(per_block):
            n += 1
            await append(store, n)
        rates["single"][side].append(per_block / (time.perf_counter() - started))
        first, n = n, n + per_block * callers
        work = iter(range(first + 1, n + 1))

        async def caller() -> None:
            for i in work:
                await append(group, i)
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        rates["group"][side].append(per_block * callers / (time.perf_counter() - started))
    store._highwater = mark
    await group.close()
    await store.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=40, help="blocks, alternating with and without the mark")
    parser.add_argument("--per-block", type=int, default=25, help="one-event appends per block (per caller)")
    parser.add_argument("--callers", type=int, default=16, help="concurrent callers through group commit")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the database (local disk)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rates = asyncio.run(run(Path(tmp), args.blocks, args.per_block, args.callers))
    print(f"durable one-event appends/s, median of {args.blocks // 2} blocks each side (synchronous=FULL)\n")
    print(f"{'':40} {'with the mark':>14} {'without':>10} {'ratio':>7}")
    for key, label in (("single", "one caller, one transaction each"),
                       ("group", f"{args.callers} callers, group commit")):
        w, wo = statistics.median(rates[key]["with"]), statistics.median(rates[key]["without"])
        print(f"{label:40} {w:14,.0f} {wo:10,.0f} {w / wo:7.2f}")


if __name__ == "__main__":
    main()
