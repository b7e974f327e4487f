"""The command lexer: splits a command into shell words the way bash would, or names the
first construct that would make bash do more than run one simple command (see
``argus.taskspec.command`` for the accepted shape). We lex ourselves rather than with
``shlex`` because ``shlex`` does not know bash's ``$``/backtick rules inside double quotes,
and the check must agree with bash exactly where it matters."""

from __future__ import annotations

import re

import msgspec

from argus.taskspec.errors import Problems, TaskSpecError
from argus.taskspec.paths import RUNTIME_VARIABLES

__all__ = ["ASSIGN_RE", "ONE_COMMAND", "Lexer", "Word", "split_command"]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A run of characters with no meaning to bash here (not quotes, '$', '\\', blanks,
# operators, braces, globs, '[', '~', '#', control characters).
_PLAIN_RUN = re.compile(r"[^\\ \t\n'\"$&|;<>()`{}*?\[~#\x00-\x1f\x7f]+")
ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")

ONE_COMMAND = (
    "Argus runs exactly one command: optional NAME=value assignments, then "
    "python3 -m <module> with arguments. If the character is part of a value, "
    "put the value in single quotes"
)
# Refusals after which the rest cannot be read as the user meant it: lexing stops there.
_FINAL = frozenset({"command[']", 'command["]', "command[newline]"})
_OPERATORS: dict[str, str] = {
    "&&": "'&&' chains a second command",
    "||": "'||' chains a second command",
    ";": "';' ends the command and starts another one",
    "&": "'&' runs the command in the background and starts another one",
    "|": "'|' pipes the output into a second program",
    "<(": "'<(' is process substitution; it runs another program",
    ">(": "'>(' is process substitution; it runs another program",
    ">>": "'>>' redirects output; Argus keeps the logs itself",
    ">": "'>' redirects output; Argus keeps the logs itself",
    "<": "'<' redirects input",
    "(": "'(' starts a subshell",
    ")": "')' ends a subshell",
    "`": "a backtick starts command substitution; it runs another program",
}


class Word(msgspec.Struct, frozen=True, kw_only=True):
    """One shell word: ``value`` with quotes removed (runtime variables kept as
    ``${NAME}``), ``raw`` as written, and where it starts."""

    value: str
    raw: str
    line: int
    col: int
    offset: int = 0  # where ``raw`` starts in the command text


def _where(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _line_text(text: str, pos: int) -> str:
    """The line holding ``pos``, as written (shortened)."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:] if end == -1 else text[start:end]
    line = line.rstrip("\\").strip()
    return line if len(line) <= 80 else line[:77] + "..."


def _error(text: str, pos: int, token: str, why: str) -> TaskSpecError:
    line, col = _where(text, pos)
    written = f" in {_line_text(text, pos)!r}" if "\n" in text else ""
    return TaskSpecError(f"command[{token}]", f"{why} (line {line}, column {col}){written}; {ONE_COMMAND}")


class Lexer:
    """Splits ``text[start:end]`` into words; positions are counted in all of ``text`` so
    that a message names the line the user sees in a pasted script."""

    def __init__(self, text: str, start: int = 0, end: int | None = None,
                 problems: Problems | None = None) -> None:
        self.text = text
        self.lo = start
        self.hi = len(text) if end is None else end
        self.words: list[Word] = []
        self.buf: list[str] = []
        self.start: int | None = None
        # Given: a refused construct is recorded there and lexing goes on after its word,
        # so one validation names every one (an unclosed quote still ends it).
        self.problems = problems
        self.refused_at: int | None = None  # where the first refused construct stands

    def _begin(self, pos: int) -> None:
        if self.start is None:
            self.start = pos

    def _finish(self, end: int) -> None:
        if self.start is not None:
            line, col = _where(self.text, self.start)
            raw = self.text[self.start:end]
            self.words.append(Word(value="".join(self.buf), raw=raw, line=line, col=col,
                                   offset=self.start))
        self.buf, self.start = [], None

    def _dollar(self, i: int) -> int:
        """Handle a '$' at ``i`` (unquoted or in double quotes); return the next index."""
        text = self.text
        nxt = text[i + 1] if i + 1 < self.hi else ""
        if nxt == "(":
            raise _error(text, i, "$(", "'$(' is command substitution; it runs another program")
        if nxt == "{":
            end = text.find("}", i + 2, self.hi)
            name = text[i + 2:end] if end != -1 else text[i + 2:i + 20]
            if end != -1 and name in RUNTIME_VARIABLES:
                self.buf.append("${" + name + "}")
                return end + 1
            token = "${" + name + ("}" if end != -1 else "")
            raise _error(text, i, token, self._var_why("${" + name + "}"))
        match = _NAME_RE.match(text, i + 1)
        if match:
            name = match.group(0)
            if name in RUNTIME_VARIABLES:
                self.buf.append("${" + name + "}")
                return match.end()
            raise _error(text, i, "$" + name, self._var_why("$" + name))
        if nxt == "'":
            raise _error(text, i, "$'", "$'...' is ANSI-C quoting; use plain single quotes")
        if nxt == "@":
            raise _error(text, i, "$@", "'$@' passes a script's arguments on; an Argus task "
                         "has none to pass: remove it")
        shown = "$" + nxt if nxt.strip() else "$"
        raise _error(
            text, i, shown, f"'{shown}' is a shell expansion; write a literal $ in single quotes"
        )

    @staticmethod
    def _var_why(var: str) -> str:
        return (
            f"{var} is a shell variable Argus does not set; $HOME is expanded by Argus "
            "(write $HOME/...), and at run time only "
            + ", ".join("$" + v for v in RUNTIME_VARIABLES)
            + " exist"
        )

    def _double_quoted(self, i: int) -> int:
        text, j = self.text, i + 1
        while j < self.hi:
            ch = text[j]
            if ch == '"':
                return j + 1
            if ch == "\\":
                nxt = text[j + 1] if j + 1 < self.hi else ""
                if nxt == "\n":
                    j += 2
                    continue
                if nxt in ('"', "\\", "$", "`"):
                    self.buf.append(nxt)
                    j += 2
                    continue
                self.buf.append("\\")
                j += 1
                continue
            if ch == "`":
                raise _error(text, j, "`", _OPERATORS["`"])
            if ch == "$":
                j = self._dollar(j)
                continue
            self.buf.append(ch)
            j += 1
        raise _error(text, i, '"', "this double quote is never closed")

    def run(self) -> list[Word]:
        """The words of the range; raises TaskSpecError at the first refused construct,
        or records each in ``problems`` and goes on (see ``__init__``)."""
        i, n = self.lo, self.hi
        while i < n:
            try:
                i = self._step(i)
            except TaskSpecError as exc:
                if self.problems is None:
                    raise
                self.problems.items.extend(exc.problems)
                if self.refused_at is None:
                    self.refused_at = i if self.start is None else self.start
                if exc.field in _FINAL:
                    break
                i = self._skip_word(i)
        self._finish(n)
        return self.words

    def _skip_word(self, i: int) -> int:
        """After a refused construct at ``i``: the next blank outside quotes, with the
        word dropped."""
        text, j = self.text, i
        while j < self.hi and text[j] not in " \t\n":
            if text[j] in "'\"":
                close = text.find(text[j], j + 1, self.hi)
                while close != -1 and text[j] == '"' and text[close - 1] == "\\":
                    close = text.find('"', close + 1, self.hi)
                j = self.hi if close == -1 else close
            j += 1
        self.buf, self.start = [], None
        return max(j, i + 1)

    def _step(self, i: int) -> int:
        """Lex what starts at ``i``; return where the next step starts (``hi``: done)."""
        text, n = self.text, self.hi
        plain = _PLAIN_RUN.match(text, i, n)
        if plain is not None:  # characters the branches below would append one by one
            self._begin(i)
            self.buf.append(plain.group())
            return plain.end()
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                return i + 2  # line continuation: bash removes both characters
            raise _error(text, i, "\\", "a backslash is allowed only at the end of a line (line continuation)")
        if c in " \t":
            self._finish(i)
            return i + 1
        if c == "\n":
            self._finish(i)
            if text[i + 1:n].strip():
                raise _error(text, i + 1, "newline",
                             "a line break without a trailing backslash starts a second command; "
                             "end the previous line with \\ to continue it")
            return n
        if c == "'":
            end = text.find("'", i + 1, n)
            if end == -1:
                raise _error(text, i, "'", "this single quote is never closed")
            self._begin(i)
            self.buf.append(text[i + 1:end])
            return end + 1
        if c in "\"$":
            self._begin(i)
            return self._double_quoted(i) if c == '"' else self._dollar(i)
        self._refuse(i)
        self._begin(i)
        self.buf.append(c)
        return i + 1

    def _refuse(self, i: int) -> None:
        """Raise for a character bash would give a meaning at ``i`` (other characters pass)."""
        text, c = self.text, self.text[i]
        two = text[i:i + 2]
        if two in _OPERATORS:
            raise _error(text, i, two, _OPERATORS[two])
        if c in _OPERATORS:
            raise _error(text, i, c, _OPERATORS[c])
        if c in "{}":
            raise _error(text, i, c, f"an unquoted '{c}' can be brace expansion; quote "
                         "values that contain braces, e.g. 'key={a: 1}'")
        if c in "*?":
            raise _error(text, i, c, f"an unquoted '{c}' is a filename pattern (glob); "
                         "name files explicitly or quote the value")
        if c == "[" and i > 0 and text[i - 1] not in "=[, \t\n" and self.start is not None:
            # Hydra lists ("key=[a,b]") open a list; "/p/u[s]ers" would be a glob that
            # bash may expand to another path than the one we checked.
            raise _error(text, i, c, "an unquoted '[' inside a word is a filename pattern "
                         "(glob); quote the value")
        if c == "~":
            raise _error(text, i, c, "an unquoted '~' is tilde expansion to the driver's "
                         "home, not yours; write $HOME/... instead")
        if c == "#" and self.start is None:
            raise _error(text, i, "#", "'#' starts a comment; comments are not allowed "
                         "inside the command")
        if ord(c) < 32 or ord(c) == 127:
            raise _error(text, i, repr(c), "control characters are not allowed")


def split_command(command: str) -> list[Word]:
    """Split ``command`` into words the way bash would, or raise TaskSpecError naming the
    first construct that is not part of one simple command."""
    return Lexer(command).run()
