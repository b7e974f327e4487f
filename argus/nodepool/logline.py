"""One line per watchdog decision: ``ts level event key=value …``.

Lines go to stdout (supervisord forwards it to ``docker logs``) and, when a node log
directory is configured and writable, to ``watchdog.log`` there on the shared filesystem.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

__all__ = ["DecisionLog", "format_line"]

_MAX_FILE_BYTES = 20 * 1024 * 1024


def _value(value: Any) -> str:
    text = str(value)
    # Quote values a `key=value` splitter would misread; keep plain values bare for grep.
    if text == "" or any(ch in text for ch in ' "=\n\t'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def format_line(level: str, event: str, fields: dict[str, Any], ts: datetime | None = None) -> str:
    """Render one decision line (no trailing newline)."""
    stamp = (ts or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    parts = [stamp, level.upper(), event]
    parts.extend(f"{key}={_value(val)}" for key, val in fields.items() if val is not None)
    return " ".join(parts)


class DecisionLog:
    """Writes decision lines for one watchdog (``role`` is added to every line)."""

    def __init__(self, role: str, log_dir: str = "", stream: IO[str] | None = None) -> None:
        self.role = role
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self.log_dir = Path(log_dir) if log_dir else None
        if self.log_dir is not None:
            self._file = self._open("watchdog.log")

    def _open(self, name: str) -> IO[str] | None:
        assert self.log_dir is not None
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = self.log_dir / name
            # Crude rotation at start-up: one previous file is kept, so a crash-looping
            # watchdog cannot fill the shared filesystem.
            if path.exists() and path.stat().st_size > _MAX_FILE_BYTES:
                path.replace(path.with_suffix(path.suffix + ".1"))
            return open(path, "a", encoding="utf-8", buffering=1)
        except OSError as exc:
            self._emit(format_line("WARNING", "log_file_unavailable", {
                "role": self.role, "path": str(self.log_dir / name), "error": exc}))
            return None

    def open_aux(self, name: str) -> IO[str] | None:
        """Another append-only file in the node log directory (Ray's own output)."""
        return self._open(name) if self.log_dir is not None else None

    def _emit(self, line: str) -> None:
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass
            if self._file is not None:
                try:
                    self._file.write(line + "\n")
                except OSError:
                    pass

    def log(self, level: str, event: str, **fields: Any) -> None:
        self._emit(format_line(level, event, {"role": self.role, **fields}))

    def info(self, event: str, **fields: Any) -> None:
        self.log("INFO", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.log("WARNING", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self.log("ERROR", event, **fields)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
