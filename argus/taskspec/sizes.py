"""Sizes in a TaskSpec (``output_budget``): bytes, or a number with its unit."""

from __future__ import annotations

__all__ = ["format_bytes", "parse_bytes"]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
_ACCEPTS = "write bytes, or a number with KB, MB, GB, KiB, MiB or GiB"


def parse_bytes(text: str | int) -> int:
    """Bytes in ``512MiB``, ``2GB``, ``1.5 GiB`` or a plain integer; ValueError saying why."""
    if isinstance(text, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(text, int):
        return text
    cleaned = str(text).strip().lower().replace(" ", "")
    number = cleaned.rstrip("kmgtib")
    unit = cleaned[len(number):]
    if unit not in _UNITS or not number:
        raise ValueError(f"{str(text)[:32]!r} is not a size: {_ACCEPTS}")
    try:
        return int(float(number) * _UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{str(text)[:32]!r} is not a size: {_ACCEPTS}") from None


def format_bytes(n: int) -> str:
    """``n`` bytes for people: 1.5 GiB, 300 MiB, 12 KiB, 900 B."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"
