"""Pasted scripts: an advanced command may be written as verl's example scripts are
published (``examples/grpo_trainer/*.sh``): a shebang, ``set -x``-style option lines,
comments, blank lines, ``export NAME=value`` lines, then exactly one command continued over
lines with trailing backslashes, maybe ending in ``$@``.

:func:`read_script` reduces such a text to the one simple command the lexer accepts
(``NAME=value ... python3 -m <module> ...``): the exports become its assignments, the rest
is dropped with a note. Every problem is reported at once, each with its line counted in
the pasted text and shown as written."""

from __future__ import annotations

import re

import msgspec

from argus.taskspec.lexer import ASSIGN_RE, Lexer, Word
from argus.taskspec.errors import Problems, TaskSpecError

__all__ = ["Script", "read_script", "reduce_script"]

_SET_OPTION = r"(?:[-+][A-Za-z]+|-o|\+o|pipefail|errexit|nounset|xtrace|verbose|noglob)"
_SET_RE = re.compile(rf"^set(?:[ \t]+{_SET_OPTION})+[ \t]*$")
_EXPORT_RE = re.compile(r"[ \t]*export(?=[ \t])")
_TRAILING_ARGS = re.compile(r"[ \t]+(?:\"\$@\"|\$@|\"\$\{@\}\"|\$\{@\})[ \t]*$")
_ONLY_ONE = ("Argus runs exactly one python3 -m <module> command; before it a pasted script "
             "may have comments, blank lines, set options and export NAME=value lines, nothing "
             "else")


class Script(msgspec.Struct, frozen=True, kw_only=True):
    """The one command of a pasted text, and what was dropped from it."""

    command: str  # exports as NAME=value prefixes, then the command as written
    notes: list[str]
    # The command's words as lexed where they stand in the pasted text (exports first;
    # those of a refused construct left out): what its checks read and name lines by.
    words: list[Word] = []
    # Where the first refused construct inside the command stands (None: none): the words
    # from there on are not the command's as bash would read them.
    refused_at: int | None = None


def _lines(text: str) -> list[tuple[int, int, int]]:
    """``(number, start, end)`` of each line, ``end`` before its newline."""
    out, start = [], 0
    for number, line in enumerate(text.split("\n"), 1):
        out.append((number, start, start + len(line)))
        start += len(line) + 1
    return out


def _shown(line: str) -> str:
    return line.strip()[:60]


def _export(text: str, start: int, end: int, number: int) -> list[Word]:
    """The ``NAME=value`` words of an export line, as written."""
    begin = _EXPORT_RE.match(text, start, end).end()  # type: ignore[union-attr]
    words = Lexer(text, begin, end).run()
    bad = [w.raw for w in words if not ASSIGN_RE.match(w.raw)]
    if not words or bad:
        shown = _shown(text[start:end])
        raise TaskSpecError(
            f"command[{shown}]",
            f"line {number}: {shown!r} is not export NAME=value; write each variable as "
            "export NAME=value (it goes to the job's environment)",
        )
    return words


def _prelude_line(text: str, start: int, end: int, number: int, script: _State) -> bool:
    """Take one line before the command; False when the command starts here."""
    line = text[start:end].strip()
    if not line or line.startswith("#"):
        return True
    if _SET_RE.match(line):
        script.notes.append(f"command: line {number}: {line!r} is ignored (Argus runs the "
                            "command itself and reports its exit status)")
        return True
    if _EXPORT_RE.match(line):
        with script.problems.catch():
            script.exports.extend(_export(text, start, end, number))
        return True
    if ASSIGN_RE.match(line) and not text[start:end].endswith("\\") and text[end:].strip():
        words = _safe_words(text, start, end)
        if words and all(ASSIGN_RE.match(w) for w in words):
            script.problems.add(
                f"command[{_shown(line)}]",
                f"line {number}: {_shown(line)!r} sets a shell variable that the command "
                "does not see; write export NAME=value to put it in the job's environment",
            )
            return True
    return False


def _safe_words(text: str, start: int, end: int) -> list[str]:
    try:
        return [w.raw for w in Lexer(text, start, end).run()]
    except TaskSpecError:
        return []


class _State:
    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        self.notes: list[str] = []
        self.exports: list[Word] = []


def read_script(text: str) -> Script:
    """The one command of ``text`` (a one-line command comes back unchanged), or a
    TaskSpecError with every problem found."""
    problems = Problems()
    script = reduce_script(text, problems)
    problems.raise_if_any()
    return script


def _command_lines(text: str, lines: list[tuple[int, int, int]], state: _State) -> tuple[int, int] | None:
    """Where the command stands in ``text`` (after the prelude, over its continued lines,
    without a trailing ``$@``); every line after it is a problem. None: there is none."""
    k = 0
    while k < len(lines) and _prelude_line(text, lines[k][1], lines[k][2], lines[k][0], state):
        k += 1
    if k == len(lines):
        state.problems.add("command", f"has no python3 -m <module> command; {_ONLY_ONE}")
        return None
    first = k
    while k + 1 < len(lines) and text[lines[k][1]:lines[k][2]].endswith("\\"):
        k += 1
    start, end = lines[first][1], lines[k][2]
    trailing = _TRAILING_ARGS.search(text, start, end)
    if trailing is not None:
        end = trailing.start()
        state.notes.append(f"command: line {lines[k][0]}: the trailing {trailing.group().strip()} "
                           "was dropped; an Argus task has no arguments to pass, remove it")
    for number, a, b in lines[k + 1:]:
        line = text[a:b].strip()
        if line and not line.startswith("#"):
            state.problems.add(
                f"command[{_shown(line)}]",
                f"line {number}: {_shown(line)!r} is a second statement after the command "
                f"(a line break without a trailing backslash ends the command); {_ONLY_ONE}",
            )
    return start, end


def reduce_script(text: str, problems: Problems) -> Script:
    """The one command of ``text`` (a one-line command comes back unchanged) and its
    words; every problem found is added to ``problems``."""
    if not text.strip():
        return Script(command=text, notes=[])
    state = _State(problems)
    where = _command_lines(text, _lines(text), state)
    if where is None:
        return Script(command=text, notes=state.notes)
    start, end = where
    lexer = Lexer(text, start, end, problems=problems)
    words = [*state.exports, *lexer.run()]
    command = text
    if state.exports or text[:start].strip() or text[end:].strip():
        command = " ".join([*(w.raw for w in state.exports), text[start:end]])
    return Script(command=command, notes=state.notes, words=words, refused_at=lexer.refused_at)
