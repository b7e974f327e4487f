"""Which environment variables a TaskSpec may set: in the command's ``NAME=value``
assignments, and in any environment the command hands Ray (a Hydra override of
``…runtime_env.env_vars.NAME`` or ``…env_vars={NAME: …}``, which every Ray worker of the
job gets).

Only the allowed module may run. A variable that makes the interpreter, the dynamic
loader or bash load or run other code first is refused, naming it and why:
``PYTHONPATH=$HOME/code`` with a ``sitecustomize.py`` there ran the user's code before the
allowed module, in the driver and in every Ray worker. Every ``PYTHON*`` variable is
refused but the harmless ones listed here (new interpreter versions add more: an unknown
one is refused until it is known), and every ``LD_*`` one.

Checked when a TaskSpec is submitted or validated (``argus.taskspec``), and again by the
job's driver before it runs a command (``command_env_problem``): a task recorded before a
variable was refused must not run with it on a retry.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["HARMLESS_PYTHON", "command_env_problem", "env_problem", "override_env_problem"]

# PYTHON* variables that change how the interpreter runs, never what it loads.
HARMLESS_PYTHON = frozenset({
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
    "PYTHONUTF8", "PYTHONFAULTHANDLER", "PYTHONNOUSERSITE", "PYTHONOPTIMIZE", "PYTHONTRACEMALLOC",
    "PYTHONDEVMODE", "PYTHONWARNDEFAULTENCODING", "PYTHONSAFEPATH", "PYTHONCOERCECLOCALE",
    "PYTHONMALLOC", "PYTHONMALLOCSTATS", "PYTHONPROFILEIMPORTTIME", "PYTHONVERBOSE", "PYTHONDEBUG",
    "PYTHONNODEBUGRANGES", "PYTHONINTMAXSTRDIGITS", "PYTHON_CPU_COUNT", "PYTHONWARNINGS",
})

_WHY = {
    "PYTHONPATH": "it puts folders before the allowed module on the import path: a sitecustomize.py "
                  "or a module of the same name there would run first (Argus sets the job's PYTHONPATH: "
                  "the verl code and your $HOME/code)",
    "PYTHONHOME": "it replaces the interpreter's standard library",
    "PYTHONSTARTUP": "it names a file Python runs first",
    "PYTHONINSPECT": "it leaves an interactive interpreter running after the module",
    "PYTHONUSERBASE": "it moves the user site folder, whose .pth files and usercustomize run first",
    "PYTHONBREAKPOINT": "it names a function that breakpoint() imports and runs",
    "PYTHONPYCACHEPREFIX": "Python would load compiled modules from that folder",
    "PYTHONPLATLIBDIR": "it moves where the standard library's extension modules are loaded from",
    "PYTHONEXECUTABLE": "it changes which interpreter sys.executable names (workers start from it)",
    "HOME": "Argus sets HOME to the attempt's folder; another HOME moves Python's user site folder, "
            "whose .pth files and usercustomize run first",
    "PATH": "it changes which program runs",
    "LD_PRELOAD": "the dynamic loader loads that library into every program first",
    "LD_LIBRARY_PATH": "the dynamic loader would take libraries from there first",
    "LD_AUDIT": "the dynamic loader loads that library into every program first",
    "GCONV_PATH": "the C library loads character-set modules from there",
    "BASH_ENV": "bash runs that file first",
    "ENV": "a shell runs that file first",
    "IFS": "it changes how bash splits the command",
    "SHELLOPTS": "it changes how bash runs the command",
    "BASHOPTS": "it changes how bash runs the command",
    "PS4": "bash expands it (running commands in it) when tracing",
    "PROMPT_COMMAND": "bash runs it",
    "RAY_JOB_CONFIG_JSON_ENV_VAR": "Ray and Argus's claim of the job's files read it: Argus sets it",
}
_RAY_HOOK = re.compile(r"^RAY_[A-Z0-9_]*HOOK$")


def env_problem(name: str, value: str = "") -> str | None:
    """Why ``name`` may not be set (to ``value``) by a TaskSpec; None when it may."""
    if name in _WHY:
        return f"{name} may not be set: {_WHY[name]}"
    if name.startswith("LD_"):
        return f"{name} may not be set: it changes what the dynamic loader loads or how"
    if name.startswith("BASH_FUNC_"):
        return f"{name} may not be set: bash would define a function from it"
    if _RAY_HOOK.match(name):
        return f"{name} may not be set: Ray imports and runs the function it names"
    if name.startswith("PYTHON") and name not in HARMLESS_PYTHON:
        return (f"{name} may not be set: only these PYTHON* variables may "
                f"(they change how the interpreter runs, not what it loads): {', '.join(sorted(HARMLESS_PYTHON))}")
    if name == "PYTHONWARNINGS" and any("." in part for f in value.split(",") for part in f.split(":")[2:3]):
        return (f"{name} may not be set to a warning category inside a module: Python imports that module "
                "first; name a built-in category (DeprecationWarning) or none")
    return None


# Fields of a Ray runtime_env that run code other than the allowed module in every worker.
_RUNTIME_ENV_CODE = {
    "worker_process_setup_hook": "Ray imports and runs the function it names in every worker first",
    "py_executable": "Ray starts every worker with that program instead of the interpreter",
}
_DICT_KEY = re.compile(r"""['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?\s*:""")


def override_env_problem(key: str, value: str | None) -> str | None:
    """Why a Hydra override may not set ``key`` (to ``value``): an environment variable
    refused by ``env_problem`` set for Ray (``…env_vars.NAME=…``, ``…env_vars={NAME: …}``,
    ``…runtime_env={env_vars: {NAME: …}}``), or a runtime_env field that runs other code
    first; None when it may."""
    parts = key.split(".")
    if "env_vars" in parts:
        rest = parts[parts.index("env_vars") + 1:]
        names = rest[:1] if rest else _DICT_KEY.findall(value or "")
        for name in names:
            problem = env_problem(name, value or "" if rest else "")
            if problem is not None:
                return f"{problem} (Ray gives it to every worker of the job)"
    if "runtime_env" in parts:
        rest = parts[parts.index("runtime_env") + 1:]
        fields = rest[:1] if rest else _DICT_KEY.findall(value or "")
        for field in fields:
            if field in _RUNTIME_ENV_CODE:
                return f"runtime_env's {field} may not be set: {_RUNTIME_ENV_CODE[field]}"
        if not rest:  # a whole runtime_env: the env_vars inside it too
            for name in _DICT_KEY.findall(value or ""):
                problem = env_problem(name)
                if problem is not None:
                    return f"{problem} (Ray gives it to every worker of the job)"
    return None


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


def command_env_problem(command: str) -> str | None:
    """Why the leading ``NAME=value`` assignments of ``command`` may not run, or None.
    The driver's backstop, with the standard library's lexer: the command was checked with
    Argus's own when it was submitted, perhaps under older rules; one that does not split
    at all is left to that check."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        return None
    for word in words:
        match = _ASSIGNMENT.match(word)
        if match is None:
            return None
        problem = env_problem(match.group(1), word[match.end():])
        if problem is not None:
            return problem
    return None
