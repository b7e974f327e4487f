"""Shell-level checks of a command: no arbitrary system commands, made precise.

The driver runs the command with ``bash -c``. We accept exactly one *simple command*:

    [NAME=value ...] python3 [-u|-B|-O|-OO|-s|-E|-I ...] -m <module> [args ...]

with ``\\``-newline line continuations. A small lexer that follows bash's quoting rules
splits the words; anything that would make bash do more than run that one program — ``;``,
``&&``, ``||``, ``|``, ``&``, redirections, backticks, ``$(...)``, ``<(...)``, brace,
glob and tilde expansion, variables other than the ``ARGUS_*`` runtime ones, a second
line — is rejected with its line and column (``argus.taskspec.lexer``). A pasted script
(verl's examples) is first reduced to its one command (``argus.taskspec.script``).
"""

from __future__ import annotations

import re

import msgspec

from argus.confine.envpolicy import env_problem
from argus.taskspec.errors import Problems
from argus.taskspec.lexer import ASSIGN_RE, ONE_COMMAND, Word, split_command
from argus.taskspec.script import reduce_script

__all__ = ["INTERPRETER_FLAGS", "ParsedCommand", "Word", "parse_command", "split_command", "split_override"]

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_OVERRIDE_RE = re.compile(r"^(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_.@/-]*)(?:=(.*))?$", re.S)
INTERPRETER_FLAGS = frozenset({"-u", "-B", "-O", "-OO", "-s", "-E", "-I"})

class ParsedCommand(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of an accepted command."""

    assignments: list[tuple[str, str]]
    program: Word  # ``python3`` as written, and where (the deployment's interpreter replaces it)
    interpreter_flags: list[str]
    module: str
    args: list[str]
    text: str = ""  # the one command that runs (a pasted script reduced to it)
    notes: list[str] = []  # what was dropped from a pasted script, for the warnings

def split_override(arg: str) -> tuple[str, str, str | None] | None:
    """``(prefix, key, value)`` when ``arg`` is a Hydra override, else None."""
    match = _OVERRIDE_RE.match(arg)
    if match is None or (match.group(3) is None and match.group(1) != "~"):
        return None
    return match.group(1) or "", match.group(2), match.group(3)


def _module_allowed(module: str, allowed: list[str]) -> bool:
    for prefix in allowed:
        if prefix.endswith("."):
            if module.startswith(prefix):
                return True
        elif module == prefix or module.startswith(prefix + "."):
            return True
    return False


def _where(word: Word, pasted: bool) -> str:
    """``line N: `` before a message about ``word`` of a pasted script (its words may
    stand on any of its lines), else nothing."""
    return f"line {word.line}: " if pasted else ""


def _assignments(words: list[Word], problems: Problems, pasted: bool) -> list[tuple[str, str]]:
    """The leading ``NAME=value`` words; each one Argus refuses is a problem."""
    assignments: list[tuple[str, str]] = []
    for word in words:
        match = ASSIGN_RE.match(word.raw)
        if match is None:
            break
        name, value = match.group(1), word.value[len(match.group(1)) + 1:]
        assignments.append((name, value))
        problem = env_problem(name, value)
        if name.startswith("ARGUS_"):
            problems.add(f"command[{name}]", f"{_where(word, pasted)}{name} is set by Argus for every "
                         "attempt (the job directory, ids, user) and cannot be assigned; remove the assignment")
        elif problem is not None:  # it would change which program runs or what it loads first
            problems.add(f"command[{name}]", f"{_where(word, pasted)}{problem}; remove the assignment (only "
                         "the allowed module may run; other variables, e.g. PYTHONUNBUFFERED=1, "
                         "VLLM_USE_V1=1, are fine)")
    return assignments


def _program(words: list[Word], i: int, problems: Problems, pasted: bool, whole: bool) -> int | None:
    """Check ``python3 [flags] -m`` from ``words[i]``; the index of the module word, or
    None when there is none to read. ``whole`` False: the words stop at a refused
    construct, so a part not among them is not said to be missing."""
    if i == len(words):
        if whole:
            problems.add("command", f"has only variable assignments and no program; {ONE_COMMAND}")
        return None
    program = words[i]
    if program.value != "python3":
        hint = " (write python3)" if "python" in program.value else ""
        problems.add(f"command[{program.value[:60]}]", f"{_where(program, pasted)}the program must be "
                     f"python3, found {program.value[:60]!r}{hint}; {ONE_COMMAND}")
    i += 1
    while i < len(words) and words[i].value != "-m":
        flag = words[i]
        if flag.value not in INTERPRETER_FLAGS:
            problems.add(f"command[{flag.value[:60]}]", f"{_where(flag, pasted)}python3 must be followed by "
                         f"-m <module>, found {flag.value[:60]!r}; allowed interpreter flags before -m: "
                         f"{' '.join(sorted(INTERPRETER_FLAGS))}")
            return None
        i += 1
    if i + 1 >= len(words):
        if whole:
            problems.add("command[-m]", f"python3 must be followed by -m <module>; {ONE_COMMAND}")
        return None
    return i + 1


def _check_module(module: str, allowed_modules: list[str], problems: Problems) -> None:
    allowed = ", ".join(f"{p}*" if p.endswith(".") else p for p in allowed_modules)
    if not _MODULE_RE.match(module):
        problems.add(f"command[{module[:60]}]", f"{module[:60]!r} is not a module name; allowed modules: {allowed}")
    elif not _module_allowed(module, allowed_modules):
        problems.add(f"command[{module}]", f"module {module} is not on the allowed list; allowed: {allowed}")


def parse_command(command: str, *, allowed_modules: list[str]) -> ParsedCommand:
    """Check the shape of ``command`` (one command, or a pasted script reduced to one by
    ``argus.taskspec.script``) and return its parts; every problem found is raised at
    once."""
    problems = Problems()
    script = reduce_script(command, problems)
    pasted, cut = "\n" in command.strip(), script.refused_at
    # Only the words before a refused construct are read as bash would read them.
    words = [w for w in script.words if cut is None or w.offset < cut]
    if not command.strip() or (not script.words and not problems):
        problems.add("command", f"is empty; {ONE_COMMAND}")
    assignments = _assignments(words, problems, pasted)
    at = _program(words, len(assignments), problems, pasted, cut is None) if words else None
    if at is not None:
        _check_module(words[at].value, allowed_modules, problems)
    problems.raise_if_any()
    assert at is not None  # no problem: the words hold a module (and none was cut)
    # Positions in the one command that runs (the interpreter is replaced there).
    program = split_command(script.command)[len(assignments)]
    return ParsedCommand(
        assignments=assignments,
        program=program,
        interpreter_flags=[w.value for w in words[len(assignments) + 1:at - 1]],
        module=words[at].value,
        args=[w.value for w in words[at + 1:]],
        text=script.command,
        notes=script.notes,
    )
