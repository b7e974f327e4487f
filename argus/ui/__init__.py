"""The WebUI: static ES modules and CSS served by the API at ``/`` (no build step).

The API mounts :data:`STATIC_DIR` (``index.html`` at ``/``); everything the browser needs
is in that folder, with no download at runtime. See ``argus/ui/README.md``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR", "TEMPLATES_DIR", "static_dir"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
TEMPLATES_DIR = STATIC_DIR / "templates"


def static_dir() -> Path:
    """The folder to serve at ``/`` (holds ``index.html``)."""
    return STATIC_DIR
