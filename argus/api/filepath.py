"""The files routes' path parameter: what the OpenAPI document says it is, and the one
check that holds the handlers to exactly that.

``/files/{rest}`` takes an area and a path in it, ``datasets/toy/train.jsonl``. A client
may send its separators plain (``/files/datasets/toy/train.jsonl``, the CLI and the WebUI)
or percent-encoded, as an OpenAPI client encodes a path parameter
(``/files/datasets%2Ftoy%2Ftrain.jsonl``): both name the same file. The value is the
URL's text after ``/files/``, percent-decoded once as UTF-8, and it must match
``READ_PATTERN`` (reads) or ``WRITE_PATTERN`` (uploads, deletes, folder operations: a
path below the area, never the area itself):

- an area (``datasets models code jobs common/datasets common/hf``), then at most
  ``MAX_DEPTH`` components, each after one ``/``, and optionally a final ``/``;
- a component is not ``.`` or ``..`` and has no NUL, ``/``, backslash or ``%``;
- and fits in a file name (255 bytes in UTF-8): at most 255 characters when all are
  ASCII, 127 when none is above U+07FF (accented Latin, Greek, Cyrillic, ...), 85 when
  none is above U+FFFF (CJK, ...), 63 otherwise (emoji);
- at most ``MAX_CHARS`` characters in all.

Anything else is a 400 whose detail says which rule it broke (an unknown area: a 404
naming the areas). Nothing is resolved here: the handlers walk the components on disk
without following links (argus.safefs).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import Parameter

__all__ = ["AREAS", "MAX_CHARS", "MAX_DEPTH", "READ_PATTERN", "WRITE_PATTERN", "DEST_PATTERN",
           "ReadPath", "WritePath", "check_path", "url_path"]

AREAS = ("datasets", "models", "code", "jobs", "common/datasets", "common/hf")
MAX_DEPTH = 64  # components below an area; deeper is a 400, never walked
MAX_CHARS = 4096
_OK = r"\x01-\x24\x26-\x2e\x30-\x5b\x5d"  # all but NUL, '%', '/', '\' (up to ']')
# One component: not '.' or '..' (dots followed by a '/' or the end: written without '$',
# which Python's re would also match before a final newline, a legal character here).
_COMPONENT = (r"(?!\.{1,2}(?![^/]))(?:[" + _OK + r"-\x7f]{1,255}|[" + _OK + r"-\u07ff]{1,127}"
              r"|[" + _OK + r"-\ud7ff\ue000-\uffff]{1,85}|[^\x00%/\\]{1,63})")
_AREA = "(?:" + "|".join(AREAS) + ")"


def _pattern(least: int) -> str:
    return rf"^{_AREA}(?:/{_COMPONENT}){{{least},{MAX_DEPTH}}}/?$"


READ_PATTERN = _pattern(0)
WRITE_PATTERN = _pattern(1)
# A move's destination (FileOpIn.to): a write path, or empty (mkdir needs none).
DEST_PATTERN = rf"^(?:{_AREA}(?:/{_COMPONENT}){{1,{MAX_DEPTH}}}/?)?$"

_RULE = ("components after one '/' each, none '.' or '..', without NUL, backslash or '%', "
         "each at most 255 bytes in UTF-8 (255 ASCII characters, 127 up to U+07FF, 85 up "
         "to U+FFFF, 63 otherwise)")


def _param(pattern: str, what: str) -> Any:
    return Parameter(description=f"{what}: an area ({', '.join(AREAS)}) and a path in it, "
                     f"{_RULE}; at most {MAX_DEPTH} components and {MAX_CHARS} characters. "
                     "'/' may be sent plain or percent-encoded (%2F): the same path",
                     schema_extra={"pattern": pattern, "maxLength": MAX_CHARS})


ReadPath = Annotated[str, _param(READ_PATTERN, "a file or folder")]
WritePath = Annotated[str, _param(WRITE_PATTERN, "a file or folder below an area")]


def _name_limit(name: str) -> int:
    top = max(map(ord, name))
    if top < 0x10000 and any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        return 63  # a lone surrogate: the pattern's last class, as for characters past U+FFFF
    return 255 if top < 0x80 else 127 if top < 0x800 else 85 if top < 0x10000 else 63


def _why(value: str, write: bool) -> HTTPException | None:
    """The rule ``value`` breaks, as a 400 (a 404 for an unknown area); None: it keeps
    them all, i.e. the document's pattern matches it (tests/api/test_file_paths.py)."""
    def bad(detail: str) -> HTTPException:
        return HTTPException(status_code=400, detail=f"{value[:200]!r}: {detail}")

    if not value:
        return bad("name an area and a path in it, e.g. datasets/toy/train.jsonl")
    if value.startswith("/"):
        return bad("the path must be relative: no leading '/' (nor '//')")
    area = next((a for a in AREAS if value == a or value.startswith(a + "/")), None)
    if area is None:
        return NotFoundException(f"unknown area {value.split('/', 1)[0][:100]!r}; use one of "
                                 f"{', '.join(AREAS)}")
    rest = value[len(area):]
    parts = rest[1:].split("/") if rest else []
    if parts and parts[-1] == "":
        parts.pop()  # one final '/' is allowed
    if len(value) > MAX_CHARS:
        return bad(f"the path is longer than {MAX_CHARS} characters")
    for part in parts:
        if part == "":
            return bad("an empty component ('//'): separate components with one '/'")
        if part in (".", ".."):
            return bad("'.' and '..' are not allowed: name the path from its area down")
        if any(c in part for c in "\x00\\%"):
            return bad("a component may not contain NUL, a backslash or '%'")
        if len(part) > _name_limit(part):
            return bad(f"{part[:40]!r}... is too long for a file name: at most 255 bytes in "
                       "UTF-8 (255 ASCII characters, 127 up to U+07FF, 85 up to U+FFFF, 63 otherwise)")
    if len(parts) > MAX_DEPTH:
        return bad(f"too deep: at most {MAX_DEPTH} components below an area")
    if write and not parts:
        return bad("name a file or folder inside the area, not the area itself")
    return None


def check_path(value: str, write: bool = False) -> str:
    """``value`` if it matches the document's pattern (``WRITE_PATTERN`` when ``write``),
    else a 400 (404: an unknown area) saying what to change. Checked rule by rule, never
    with the pattern itself: its alternatives overlap, and a regular expression engine
    backtracks through them exponentially on a path one component too deep (a request
    could hold the server's event loop for minutes)."""
    problem = _why(value, write)
    if problem is not None:
        raise problem
    return value


def url_path(request: Any, rest: str, write: bool = False) -> str:
    """The path the URL names after ``/files/``: its raw text percent-decoded once (so
    ``%2F`` is a separator, as a plain ``/``), checked by :func:`check_path`. From the
    raw path, not the router's ``rest``: the router would quietly merge ``//``."""
    raw = request.scope.get("raw_path")
    if raw is None:  # an ASGI server that does not give it: the router's decoding
        return check_path(rest.lstrip("/"), write)
    tail = raw.split(b"?", 1)[0].split(b"/files/", 1)[-1]
    try:
        value = unquote_to_bytes(tail).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(status_code=400, detail="the path is not UTF-8 once "
                            "percent-decoded: name files in UTF-8") from None
    return check_path(value, write)
