"""Field-level checks of a TaskSpec mapping that report every bad field at once: unknown
keys (with "did you mean"), missing required fields, and each field's type and range."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from argus.taskspec.errors import Problem, Problems

__all__ = ["convert_fields", "split_known", "unknown_key"]

Accepts = Callable[[str], str]  # field name -> what it accepts, appended to type errors


def unknown_key(key: Any, names: tuple[str, ...], kind: str,
                elsewhere: Mapping[str, str]) -> Problem:
    """Name ``key`` as written and say what was probably meant: a close field name, or
    (``elsewhere``) where a field of the other kind of spec goes, else every field."""
    plain = isinstance(key, str) and key.isprintable() and key.strip() == key != ""
    shown = key[:80] if plain else repr(key)[:80]  # '' or ' x' must stay visible
    if isinstance(key, str):
        # Case and '-' for '_' are the usual slips; difflib scores the rest.
        lowered = {name.lower(): name for name in names}
        close = difflib.get_close_matches(key.lower().replace("-", "_"), list(lowered), n=1)
        if close:
            return Problem(shown, f"unknown field; did you mean {lowered[close[0]]}?")
        if key in elsewhere:
            return Problem(shown, elsewhere[key])
    return Problem(shown, f"unknown field; the fields of {kind} spec are: {', '.join(names)}")


def split_known(
    data: Mapping[Any, Any], names: tuple[str, ...], kind: str, *,
    ignored: Mapping[str, str], elsewhere: Mapping[str, str], problems: Problems,
) -> tuple[dict[str, Any], list[str], set[str]]:
    """The known fields, warnings for ``ignored`` legacy keys, and the fields that an
    unknown key was probably meant as. Any other key is a problem: a typo would otherwise
    be dropped and its field silently take its default."""
    known: dict[str, Any] = {}
    warnings: list[str] = []
    meant: set[str] = set()
    for key, value in data.items():
        if isinstance(key, str) and key in names:
            known[key] = value
        elif isinstance(key, str) and key in ignored:
            warnings.append(f"{key!r}: ignored, {ignored[key]}")
        else:
            problem = unknown_key(key, names, kind, elsewhere)
            guess = re.search(r"did you mean (\w+)\?$", problem.message)
            if guess:
                meant.add(guess.group(1))
            problems.items.append(problem)
    return known, warnings, meant - set(known)


def _field_problem(name: str, exc: msgspec.ValidationError, accepts: Accepts) -> Problem:
    text = str(exc)
    at = re.search(r" - at `\$([^`]*)`$", text)  # "[2]" for an item of a list field
    message = text[: at.start()] if at else text
    return Problem(f"{name}{at.group(1) if at else ''}", f"{message}; accepted: {accepts(name)}")


def _whole_struct_problem(exc: msgspec.ValidationError, accepts: Accepts) -> Problem:
    """The first problem msgspec found converting the whole struct."""
    text = str(exc)
    missing = re.search(r"missing required field `([^`]+)`", text)
    if missing:
        field, message = missing.group(1), "is required"
    else:
        at = re.search(r" - at `\$\.?([^`]*)`$", text)
        field = (at.group(1) if at else "") or "document"
        message = text[: at.start()] if at else text
    base = re.sub(r"\[\d+\]$", "", field)  # extra_overrides[2] accepts what extra_overrides does
    return Problem(field, f"{message}; accepted: {accepts(base)}")


def convert_fields(
    known: dict[str, Any], cls: type[msgspec.Struct], problems: Problems, *,
    accepts: Accepts, skip_missing: frozenset[str] | set[str] = frozenset(),
) -> tuple[Any, dict[str, Any]]:
    """``(struct, values)``. When the struct does not convert (struct is None), each field
    is converted on its own so that every bad field is named; ``values`` then holds the
    fields that converted (defaults for absent optional ones). A missing field in
    ``skip_missing`` is not reported: a misspelt key already names it."""
    try:
        # strict=False: YAML 1.1 reads 1e-6 as a string; lax mode turns it into a float.
        spec = msgspec.convert(known, cls, strict=False)
        return spec, {name: getattr(spec, name) for name in cls.__struct_fields__}
    except msgspec.ValidationError as exc:
        first = _whole_struct_problem(exc, accepts)
    values: dict[str, Any] = {}
    before, skipped = len(problems), False
    for info in msgspec.structs.fields(cls):
        if info.name in known:
            try:
                values[info.name] = msgspec.convert(known[info.name], info.type, strict=False)
            except msgspec.ValidationError as exc:
                problems.items.append(_field_problem(info.name, exc, accepts))
        elif not info.required:
            values[info.name] = info.default
        elif info.name in skip_missing:
            skipped = True
        else:
            problems.add(info.name, f"is required; accepted: {accepts(info.name)}")
    if len(problems) == before and not skipped:
        problems.items.append(first)  # never silent, should the two ways ever disagree
    return None, values
