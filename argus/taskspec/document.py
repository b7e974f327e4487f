"""Reading a submitted document (YAML or JSON text, or a mapping) into a dict, with its
size limits, and YAML errors that say where (line and column, 1-based)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec
import yaml

from argus.config import TaskSpecConfig
from argus.taskspec.errors import TaskSpecError

__all__ = ["MAX_NESTING", "decode_json", "load_document", "too_deep"]

# How deep a document may nest lists and maps. A TaskSpec needs 3 or 4 levels; the bound
# keeps every recursive walk (encoding, validation, the log) far from Python's limit.
MAX_NESTING = 32


class _UniqueKeys:
    """Refuses a mapping that gives a key twice. YAML loaders keep the last value, while a
    reader of the text (and the raw spec Argus shows) sees the first: which one did the user
    mean? They are asked to say it once."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)  # type: ignore[attr-defined]
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"the key {key!r} is given twice; give each key once",
                            key_node.start_mark)
                    seen.add(key)
                except TypeError:  # unhashable: the base constructor refuses it with its message
                    pass
        return super().construct_mapping(node, deep)  # type: ignore[misc]


class _NoAliasLoader(_UniqueKeys, yaml.SafeLoader):
    """SafeLoader without anchors/aliases: an alias bomb is tiny as text but huge once
    walked, and no TaskSpec needs them."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a TaskSpec", event.start_mark
            )
        return super().compose_node(parent, index)


_CSafeLoader: Any = (type("_UniqueKeysCLoader", (_UniqueKeys, yaml.CSafeLoader), {})
                     if hasattr(yaml, "CSafeLoader") else None)  # None without libyaml
# Texts libyaml may read differently from _NoAliasLoader go to the pure-Python loader:
# '*' (an alias: libyaml cannot be told to refuse them), '!' (tags; a bare '!' is '' in
# libyaml, None in PyYAML), tabs, BOM and Unicode line breaks, and '|#' / '>-#' (libyaml
# accepts them). What remains reads the same in both (differential fuzzing); libyaml
# does it at a fraction of the CPU, and its errors are re-worded by the pure-Python one.
_C_UNSAFE_RE = re.compile("[!*\t\ufeff\x85\u2028\u2029]|[|>][-+0-9]*#")


def _yaml_error_text(exc: BaseException) -> str:
    """Where and what: ``line 2, column 9: mapping values are not allowed here``, with the
    construct that was left open (an unclosed bracket or quote) when YAML names one."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"({detail[:200]})"
    # PyYAML's marks are 0-based; editors count from 1.
    text = f"line {mark.line + 1}, column {mark.column + 1}: {str(problem)[:200]}"
    context, where = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and where is not None and (where.line, where.column) != (mark.line, mark.column):
        text += f" ({context[:80]} that starts at line {where.line + 1}, column {where.column + 1})"
    return text


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether lists and maps nest deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def decode_json(raw: bytes | str) -> Any:
    """JSON text as Python values; raises msgspec.DecodeError for what is not JSON and
    TaskSpecError for what nests deeper than MAX_NESTING (msgspec itself would raise
    RecursionError near 1,000 levels)."""
    try:
        value = msgspec.json.decode(raw)
    except RecursionError:
        value = None
        deep = True
    else:
        deep = too_deep(value)
    if deep:
        raise _too_deep_error()
    return value


def _too_deep_error() -> TaskSpecError:
    return TaskSpecError("document", f"nests lists or maps deeper than {MAX_NESTING} levels; "
                         "a TaskSpec needs a few")


def _load_text(text: str) -> Any:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return decode_json(stripped)
        except msgspec.DecodeError:
            pass  # not strict JSON; YAML flow syntax is a superset, try that
    if _CSafeLoader is not None and _C_UNSAFE_RE.search(text) is None:
        try:
            return yaml.load(text, Loader=_CSafeLoader)  # noqa: S506 - safe loader
        except Exception:  # noqa: BLE001, S110 - the pure-Python loader words the error
            pass
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - SafeLoader subclass
    except Exception as exc:  # yaml raises YAMLError, ValueError (bad dates), RecursionError...
        detail = _yaml_error_text(exc)
        sep = " " if detail.startswith("(") else ": "
        raise TaskSpecError("document", f"not valid YAML or JSON{sep}{detail}") from None


def load_document(document: str | bytes | Mapping[str, Any], config: TaskSpecConfig) -> dict[Any, Any]:
    """The document as a dict (keys as written, possibly not strings); raises
    TaskSpecError for what is not a mapping, too large, not UTF-8 or not YAML/JSON."""
    limit = config.max_document_bytes
    if isinstance(document, Mapping):
        data: Any = dict(document)
        if too_deep(data):
            raise _too_deep_error()
        try:
            # The size of the mapping as a client would have sent it.
            size = len(msgspec.json.encode(data))
        except (TypeError, ValueError, OverflowError, RecursionError):
            raise TaskSpecError(
                "document", "values must be JSON-compatible (strings, numbers, lists, maps)"
            ) from None
    elif isinstance(document, (str, bytes)):
        raw = document.encode("utf-8", "surrogatepass") if isinstance(document, str) else document
        size = len(raw)
        if size > limit:
            raise TaskSpecError("document", f"is {size} bytes; the limit is {limit} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TaskSpecError("document", "is not UTF-8 text") from None
        if "\x00" in text:
            raise TaskSpecError("document", "contains a NUL byte; send plain YAML or JSON text")
        data = _load_text(text)
        if too_deep(data):
            raise _too_deep_error()
    else:
        raise TaskSpecError("document", "must be YAML/JSON text or a mapping")
    if size > limit:
        raise TaskSpecError("document", f"is {size} bytes; the limit is {limit} bytes")
    if not isinstance(data, dict):
        raise TaskSpecError(
            "document", f"must be a mapping of fields at the top level, got {type(data).__name__}"
        )
    return data
