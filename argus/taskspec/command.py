"""Shell-level checks of a command (seed 000 §2.4, made precise).

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
from argus.taskspec.errors import TaskSpecError
from argus.taskspec.lexer import ASSIGN_RE, ONE_COMMAND, Word, split_command
from argus.taskspec.script import read_script

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


def parse_command(command: str, *, allowed_modules: list[str]) -> ParsedCommand:
    """Check the shape of ``command`` (one command, or a pasted script reduced to one by
    ``argus.taskspec.script``) and return its parts."""
    script = read_script(command)
    command = script.command
    words = split_command(command)
    if not words:
        raise TaskSpecError("command", f"is empty; {ONE_COMMAND}")
    assignments: list[tuple[str, str]] = []
    i = 0
    while i < len(words) and ASSIGN_RE.match(words[i].raw):
        name = ASSIGN_RE.match(words[i].raw).group(1)  # type: ignore[union-attr]
        if name.startswith("ARGUS_"):
            raise TaskSpecError(
                f"command[{name}]",
                f"{name} is set by Argus for every attempt (the job directory, ids, user) "
                "and cannot be assigned; remove the assignment",
            )
        value = words[i].value[len(name) + 1:]
        problem = env_problem(name, value)
        if problem is not None:  # it would change which program runs or what it loads first
            raise TaskSpecError(
                f"command[{name}]",
                f"{problem}; remove the assignment (only the allowed module may run; other "
                "variables, e.g. PYTHONUNBUFFERED=1, VLLM_USE_V1=1, are fine)",
            )
        assignments.append((name, value))
        i += 1
    if i == len(words):
        raise TaskSpecError(
            "command", f"has only variable assignments and no program; {ONE_COMMAND}"
        )
    program = words[i]
    if program.value != "python3":
        hint = " (write python3)" if "python" in program.value else ""
        raise TaskSpecError(
            f"command[{program.value[:60]}]",
            f"the program must be python3, found {program.value[:60]!r}{hint}; {ONE_COMMAND}",
        )
    i += 1
    flags: list[str] = []
    while i < len(words) and words[i].value != "-m":
        flag = words[i].value
        if flag not in INTERPRETER_FLAGS:
            raise TaskSpecError(
                f"command[{flag[:60]}]",
                f"python3 must be followed by -m <module>, found {flag[:60]!r}; allowed "
                f"interpreter flags before -m: {' '.join(sorted(INTERPRETER_FLAGS))}",
            )
        flags.append(flag)
        i += 1
    if i + 1 >= len(words):
        raise TaskSpecError(
            "command[-m]", f"python3 must be followed by -m <module>; {ONE_COMMAND}"
        )
    module = words[i + 1].value
    allowed = ", ".join(f"{p}*" if p.endswith(".") else p for p in allowed_modules)
    if not _MODULE_RE.match(module):
        raise TaskSpecError(
            f"command[{module[:60]}]",
            f"{module[:60]!r} is not a module name; allowed modules: {allowed}",
        )
    if not _module_allowed(module, allowed_modules):
        raise TaskSpecError(
            f"command[{module}]", f"module {module} is not on the allowed list; allowed: {allowed}"
        )
    return ParsedCommand(
        assignments=assignments,
        program=program,
        interpreter_flags=flags,
        module=module,
        args=[w.value for w in words[i + 2:]],
        text=command,
        notes=script.notes,
    )
