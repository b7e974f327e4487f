"""Reading an attempt's job directory: the driver log's tail and training progress.

``<shared>/users/<user>/jobs/<submission_id>/`` holds ``driver.log`` (stdout and stderr),
``exit_code`` and verl-style JSONL metrics (its file logger: one ``{"step": N, "data":
{...}}`` object per line). Lines ``step:N - key:value - ...`` in the driver log (verl's
console logger) are the fallback when there is no JSONL file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

import msgspec

__all__ = ["last_step", "parse_progress", "read_new", "tail_lines"]

_STEP_LINE = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
_KV = re.compile(r"([A-Za-z0-9_./@\-]+):\s*(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")
MAX_POINTS = 5000


def tail_lines(path: Path, n: int, chunk: int = 65536) -> tuple[str, int]:
    """The last ``n`` lines of ``path`` and the file size they end at ("" if missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            pos, data = size, b""
            while pos > 0 and data.count(b"\n") <= n:
                step = min(chunk, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return "", 0
    lines = data.splitlines(keepends=True)[-n:] if n > 0 else []
    return b"".join(lines).decode("utf-8", "replace"), size


def read_new(path: Path, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
    """Bytes appended to ``path`` after ``offset`` (complete lines only)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        return b"", offset
    cut = data.rfind(b"\n")
    if cut < 0:
        return b"", offset
    return data[: cut + 1], offset + cut + 1


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _jsonl_points(directory: Path) -> Iterator[tuple[int, dict[str, float]]]:
    for path in sorted(set(directory.glob("*.jsonl")) | set(directory.glob("**/metrics*.jsonl"))):
        with open(path, "rb") as f:
            for line in f:
                try:
                    obj = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    continue
                if not isinstance(obj, dict) or not isinstance(obj.get("step"), int):
                    continue
                data = obj.get("data")
                metrics = _numbers(data if isinstance(data, dict) else obj)
                metrics.pop("step", None)
                yield obj["step"], metrics


def _log_points(log: Path) -> Iterator[tuple[int, dict[str, float]]]:
    try:
        f = open(log, "r", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with f:
        for line in f:
            m = _STEP_LINE.search(line)
            if m:
                yield int(m.group(1)), {k: float(v) for k, v in _KV.findall(m.group(2))}


def parse_progress(directory: Path) -> list[tuple[int, dict[str, float]]]:
    """Steps with their metrics, in step order (later lines win for a repeated step)."""
    points: dict[int, dict[str, float]] = {}
    seen_jsonl = False
    if directory.is_dir():
        for step, metrics in _jsonl_points(directory):
            seen_jsonl = True
            points.setdefault(step, {}).update(metrics)
        if not seen_jsonl:
            for step, metrics in _log_points(directory / "driver.log"):
                points.setdefault(step, {}).update(metrics)
    steps = sorted(points)[-MAX_POINTS:]
    return [(s, points[s]) for s in steps]


_LAST_STEP = re.compile(rb"(?:^|\s)step:(\d+)\s+-")


def last_step(log: Path, window: int = 65536) -> int | None:
    """The last ``step:N - …`` in the final ``window`` bytes of a driver log: what a task
    list shows for a running task without reading the whole log (bounded work per row; the
    file's last component is not followed if a job replaced it with a symlink)."""
    try:
        fd = os.open(log, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - window))
        found = _LAST_STEP.findall(f.read(window))
    return int(found[-1]) if found else None
