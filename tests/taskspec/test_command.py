"""The bash-level shape of a command: our lexer against a table, and against bash itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from argus.taskspec import TaskSpecError
from argus.taskspec.command import parse_command, split_command

ALLOWED = ["verl.trainer.", "argus.examples."]


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("python3 -m verl.trainer.main_ppo a=1", ["a=1"]),
        ("python3 -m verl.trainer.main_ppo \\\n  a=1 \\\n  b=2\n", ["a=1", "b=2"]),
        ("python3 -m verl.trainer.main_ppo 'a=x y' \"b=$ARGUS_JOB_DIR/c\"", ["a=x y", "b=${ARGUS_JOB_DIR}/c"]),
        ("python3 -m verl.trainer.main_ppo a=${ARGUS_JOB_DIR}/x", ["a=${ARGUS_JOB_DIR}/x"]),
        ("python3 -m verl.trainer.main_ppo 'l=[\"a\",\"b\"]' 'd={k: 1}'", ['l=["a","b"]', "d={k: 1}"]),
        ("python3 -m verl.trainer.main_ppo a='x;y' b=\"p|q\"", ["a=x;y", "b=p|q"]),
        ("python3 -m verl.trainer.main_ppo l=[a,b] k=v#notacomment", ["l=[a,b]", "k=v#notacomment"]),
        ("python3 -m verl.trainer.main_ppo n=[[a,b],[c]] [x]", ["n=[[a,b],[c]]", "[x]"]),
        ("python3 -u -m argus.examples.toy --flag", ["--flag"]),
        ("python3 -m verl.trainer.main_ppo \"q=\\\"x\\\"\"", ['q="x"']),
        ("python3 -m verl.trainer.main_ppo\t+a.b=1  '~c'", ["+a.b=1", "~c"]),
        # Issue 57: verl's example scripts as published.
        ("#!/usr/bin/env bash\nset -x\n\npython3 -m verl.trainer.main_ppo \\\n  a=1 \\\n  b=2 $@\n", ["a=1", "b=2"]),
        ("set -euxo pipefail\n# c\nexport A=1\npython3 -m verl.trainer.main_ppo a=1 \"$@\"\n# end\n\n", ["a=1"]),
        ("set -e\nset +x\nset -o pipefail\npython3 -m verl.trainer.main_ppo \\\n    a='x y'", ["a=x y"]),
        ("  # indented comment\n\texport B=\"v w\"\npython3 -m verl.trainer.main_ppo a=1 ${@}", ["a=1"]),
    ],
)
def test_accepted_shapes(command: str, args: list[str]) -> None:
    parsed = parse_command(command, allowed_modules=ALLOWED)
    assert parsed.args == args


def test_assignments_and_flags() -> None:
    parsed = parse_command(
        "A=1 B='x y' python3 -u -B -m verl.trainer.main_ppo a=1", allowed_modules=ALLOWED
    )
    assert parsed.assignments == [("A", "1"), ("B", "x y")]
    assert parsed.interpreter_flags == ["-u", "-B"]
    assert parsed.module == "verl.trainer.main_ppo"


@pytest.mark.parametrize(
    ("command", "field", "fragment"),
    [
        ("python3 -m verl.trainer.main_ppo a=1; rm -rf /", "command[;]", "starts another one"),
        ("python3 -m verl.trainer.main_ppo a=1 && rm -rf /", "command[&&]", "chains a second command"),
        ("python3 -m verl.trainer.main_ppo a=1 || true", "command[||]", "chains a second command"),
        ("python3 -m verl.trainer.main_ppo a=1 | tee x", "command[|]", "pipes"),
        ("python3 -m verl.trainer.main_ppo a=1 &", "command[&]", "background"),
        ("python3 -m verl.trainer.main_ppo a=`id`", "command[`]", "command substitution"),
        ("python3 -m verl.trainer.main_ppo \"a=`id`\"", "command[`]", "command substitution"),
        ("python3 -m verl.trainer.main_ppo a=$(id)", "command[$(]", "command substitution"),
        ("python3 -m verl.trainer.main_ppo \"a=$(id)\"", "command[$(]", "command substitution"),
        ("python3 -m verl.trainer.main_ppo a=$((1+1))", "command[$(]", "command substitution"),
        ("python3 -m verl.trainer.main_ppo a=<(cat /etc/passwd)", "command[<(]", "process substitution"),
        ("python3 -m verl.trainer.main_ppo a=1 > /tmp/out", "command[>]", "redirects output"),
        ("python3 -m verl.trainer.main_ppo a=1 >> /tmp/out", "command[>>]", "redirects output"),
        ("python3 -m verl.trainer.main_ppo a=1 2>/tmp/err", "command[>]", "redirects output"),
        ("python3 -m verl.trainer.main_ppo < /etc/passwd", "command[<]", "redirects input"),
        ("(python3 -m verl.trainer.main_ppo)", "command[(]", "subshell"),
        ("python3 -m verl.trainer.main_ppo a=1\nrm -rf /", "command[rm -rf /]", "line 2: 'rm -rf /' is a second statement"),
        ("python3 -m verl.trainer.main_ppo a=$HOMEX/x", "command[$HOMEX]", "Argus does not set"),
        ("python3 -m verl.trainer.main_ppo a=${USER}", "command[${USER}]", "Argus does not set"),
        ("python3 -m verl.trainer.main_ppo a=${ARGUS_JOB_DIR:-/x}", "command[${ARGUS_JOB_DIR:-/x}]", "Argus does not set"),
        ("python3 -m verl.trainer.main_ppo a=$1", "command[$1]", "shell expansion"),
        ("python3 -m verl.trainer.main_ppo a=$'x'", "command[$']", "ANSI-C"),
        ("python3 -m verl.trainer.main_ppo a={x,y}", "command[{]", "brace expansion"),
        ("python3 -m verl.trainer.main_ppo a=/p/*.parquet", "command[*]", "glob"),
        ("python3 -m verl.trainer.main_ppo a=~/x", "command[~]", "tilde expansion"),
        ("python3 -m verl.trainer.main_ppo a=/private/u[s]ers/bob", "command[[]", "glob"),
        ("python3 -m verl.trainer.main_ppo ~bob/x", "command[~]", "tilde expansion"),
        ("python3 -m verl.trainer.main_ppo # comment", "command[#]", "comment"),
        ("python3 -m verl.trainer.main_ppo a=\\;b", "command[\\]", "backslash"),
        ("python3 -m verl.trainer.main_ppo 'a=1", "command[']", "never closed"),
        ("python3 -m verl.trainer.main_ppo \"a=1", 'command["]', "never closed"),
        ("python3 -m verl.trainer.main_ppo a=\x07", "command['\\x07']", "control characters"),
        ("bash -c 'python3 -m verl.trainer.main_ppo'", "command[bash]", "must be python3"),
        ("python -m verl.trainer.main_ppo", "command[python]", "write python3"),
        ("/usr/bin/python3 -m verl.trainer.main_ppo", "command[/usr/bin/python3]", "write python3"),
        ("python3 -c 'import os'", "command[-c]", "followed by -m"),
        ("python3 verl/trainer/main_ppo.py", "command[verl/trainer/main_ppo.py]", "followed by -m"),
        ("python3 -m", "command[-m]", "followed by -m <module>"),
        ("python3 -m os.system", "command[os.system]", "not on the allowed list"),
        ("python3 -m verl.trainerx.main", "command[verl.trainerx.main]", "allowed: verl.trainer.*, argus.examples.*"),
        ("python3 -m 'verl.trainer.main_ppo;x'", "command[verl.trainer.main_ppo;x]", "not a module name"),
        ("A=1 B=2", "command", "no program"),
        ("", "command", "is empty"),
        ("PATH=/tmp/evil python3 -m verl.trainer.main_ppo", "command[PATH]", "which program runs"),
        ("LD_PRELOAD=/x.so python3 -m verl.trainer.main_ppo", "command[LD_PRELOAD]", "loads that library"),
        # Issue 54: every variable that makes other code run before the allowed module.
        ("PYTHONPATH=/private/users/alice/code python3 -m verl.trainer.main_ppo", "command[PYTHONPATH]",
         "sitecustomize.py"),
        ("PYTHONSTARTUP=/private/users/alice/code/s.py python3 -m verl.trainer.main_ppo",
         "command[PYTHONSTARTUP]", "names a file Python runs first"),
        ("PYTHONHOME=/private/users/alice/py python3 -m verl.trainer.main_ppo", "command[PYTHONHOME]",
         "standard library"),
        ("PYTHONUSERBASE=/private/users/alice/code python3 -m verl.trainer.main_ppo", "command[PYTHONUSERBASE]",
         "usercustomize"),
        ("PYTHONINSPECT=1 python3 -m verl.trainer.main_ppo", "command[PYTHONINSPECT]", "interactive"),
        ("PYTHONBREAKPOINT=evil.run python3 -m verl.trainer.main_ppo", "command[PYTHONBREAKPOINT]",
         "breakpoint() imports"),
        ("PYTHONPYCACHEPREFIX=/private/users/alice/c python3 -m verl.trainer.main_ppo",
         "command[PYTHONPYCACHEPREFIX]", "compiled modules"),
        ("PYTHONPLATLIBDIR=x python3 -m verl.trainer.main_ppo", "command[PYTHONPLATLIBDIR]", "extension modules"),
        ("PYTHONEXECUTABLE=/bin/sh python3 -m verl.trainer.main_ppo", "command[PYTHONEXECUTABLE]",
         "sys.executable"),
        ("PYTHONSOMETHINGNEW=1 python3 -m verl.trainer.main_ppo", "command[PYTHONSOMETHINGNEW]",
         "only these PYTHON* variables may"),
        ("PYTHONWARNINGS=error::evil.Category python3 -m verl.trainer.main_ppo", "command[PYTHONWARNINGS]",
         "Python imports that module"),
        ("LD_LIBRARY_PATH=/private/users/alice/lib python3 -m verl.trainer.main_ppo", "command[LD_LIBRARY_PATH]",
         "libraries from there first"),
        ("LD_AUDIT=/x.so python3 -m verl.trainer.main_ppo", "command[LD_AUDIT]", "loads that library"),
        ("LD_DEBUG_OUTPUT=/x python3 -m verl.trainer.main_ppo", "command[LD_DEBUG_OUTPUT]", "dynamic loader"),
        ("GCONV_PATH=/private/users/alice python3 -m verl.trainer.main_ppo", "command[GCONV_PATH]",
         "character-set modules"),
        ("HOME=/private/users/alice/code python3 -m verl.trainer.main_ppo", "command[HOME]", "usercustomize"),
        ("BASH_ENV=/x python3 -m verl.trainer.main_ppo", "command[BASH_ENV]", "bash runs that file"),
        ("ENV=/x python3 -m verl.trainer.main_ppo", "command[ENV]", "runs that file first"),
        ("IFS=x python3 -m verl.trainer.main_ppo", "command[IFS]", "splits the command"),
        ("SHELLOPTS=xtrace python3 -m verl.trainer.main_ppo", "command[SHELLOPTS]", "how bash runs"),
        ("BASHOPTS=x python3 -m verl.trainer.main_ppo", "command[BASHOPTS]", "how bash runs"),
        ("PS4=x python3 -m verl.trainer.main_ppo", "command[PS4]", "tracing"),
        ("PROMPT_COMMAND=x python3 -m verl.trainer.main_ppo", "command[PROMPT_COMMAND]", "bash runs it"),
        ("BASH_FUNC_x=y python3 -m verl.trainer.main_ppo", "command[BASH_FUNC_x]", "define a function"),
        ("RAY_RUNTIME_ENV_HOOK=evil.hook python3 -m verl.trainer.main_ppo", "command[RAY_RUNTIME_ENV_HOOK]",
         "Ray imports and runs"),
        ("RAY_JOB_CONFIG_JSON_ENV_VAR=x python3 -m verl.trainer.main_ppo", "command[RAY_JOB_CONFIG_JSON_ENV_VAR]",
         "Argus sets it"),
        ("A=1 PYTHONPATH=/x python3 -m verl.trainer.main_ppo", "command[PYTHONPATH]", "remove the assignment"),
        ("ARGUS_JOB_DIR=/private/users/bob python3 -m verl.trainer.main_ppo", "command[ARGUS_JOB_DIR]", "set by Argus"),
        # Issue 57: a pasted script's exports follow the same rules; its other lines are refused.
        ("set -x\nexport LD_PRELOAD=/x.so\npython3 -m verl.trainer.main_ppo", "command[LD_PRELOAD]", "loads that library"),
        ("export ARGUS_USER=bob\npython3 -m verl.trainer.main_ppo", "command[ARGUS_USER]", "set by Argus"),
        ("export -n A\npython3 -m verl.trainer.main_ppo", "command[export -n A]", "line 1: 'export -n A' is not export NAME=value"),
        ("set -x\nsource $HOME/env.sh\npython3 -m verl.trainer.main_ppo", "command[python3 -m verl.trainer.main_ppo]", "line 3: "),
        ("set -- a b\npython3 -m verl.trainer.main_ppo", "command[python3 -m verl.trainer.main_ppo]", "second statement"),
        ("set -x\npython3 -m verl.trainer.main_ppo a=1 \\\n  b=2\necho done", "command[echo done]", "line 4: 'echo done' is a second statement"),
        ("set -x\npython3 -m verl.trainer.main_ppo a=1 \\\n  b=2; echo done", "command[;]", "(line 3, column 6)"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 && echo ok", "command[&&]", "(line 3, column 7)"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 | tee log", "command[|]", "(line 3, column 7)"),
        ("set -x\npython3 -m verl.trainer.main_ppo \\\n  a=1 2> err", "command[>]", "(line 3, column 8)"),
        ("python3 -m verl.trainer.main_ppo $@ \\\n  a=1", "command[$@]", "remove it"),
        ("set -x\n# nothing else\n", "command", "has no python3 -m <module> command"),
    ],
)
def test_rejected(command: str, field: str, fragment: str) -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_command(command, allowed_modules=ALLOWED)
    assert err.value.field == field, err.value
    assert fragment in err.value.message, err.value.message


def test_harmless_variables_stay_allowed() -> None:
    """Issue 54 refused what makes other code run first, not variables that tune a run."""
    parsed = parse_command(
        "PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 PYTHONWARNINGS=ignore::DeprecationWarning PYTHONFAULTHANDLER=1 "
        "VLLM_USE_V1=1 NCCL_DEBUG=INFO HYDRA_FULL_ERROR=1 RAY_DEDUP_LOGS=0 python3 -m verl.trainer.main_ppo a=1",
        allowed_modules=ALLOWED)
    assert [name for name, _ in parsed.assignments] == [
        "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "VLLM_USE_V1",
        "NCCL_DEBUG", "HYDRA_FULL_ERROR", "RAY_DEDUP_LOGS"]


def test_error_names_line_and_column() -> None:
    with pytest.raises(TaskSpecError) as err:
        parse_command("python3 -m verl.trainer.main_ppo \\\n  a=1 \\\n  b=2; id", allowed_modules=ALLOWED)
    assert "(line 3, column 6)" in err.value.message
    assert "python3 -m <module>" in err.value.message


def test_allowed_modules_come_from_config() -> None:
    parse_command("python3 -m my.mod", allowed_modules=["my.mod"])
    parse_command("python3 -m my.mod.sub", allowed_modules=["my.mod"])
    with pytest.raises(TaskSpecError):
        parse_command("python3 -m my.module", allowed_modules=["my.mod"])


def test_export_lines_become_assignments() -> None:
    parsed = parse_command(
        "#!/bin/bash\nexport A=1 B='x y'\nexport C=\"z\"\n\npython3 -m verl.trainer.main_ppo a=1 \"$@\"\n",
        allowed_modules=ALLOWED)
    assert parsed.assignments == [("A", "1"), ("B", "x y"), ("C", "z")]
    assert parsed.text == "A=1 B='x y' C=\"z\" python3 -m verl.trainer.main_ppo a=1"
    assert parsed.notes == ["command: line 5: the trailing \"$@\" was dropped; an Argus task has no "
                            "arguments to pass, remove it"]


def test_one_line_command_is_run_as_written() -> None:
    command = "A=1 python3 -m verl.trainer.main_ppo \\\n  a=1\n"
    assert parse_command(command, allowed_modules=ALLOWED).text == command


# --- differential check against bash ------------------------------------------------------

ACCEPTED_FOR_BASH = [
    "python3 -m verl.trainer.main_ppo a=1 \\\n  'b=x y' \\\n  \"c=$ARGUS_JOB_DIR/z\"",
    "A=1 python3 -m verl.trainer.main_ppo 'l=[\"a\",\"b\"]' k=v#x d='{k: 1}'",
    "python3 -m verl.trainer.main_ppo \"q=\\\"x\\\" \\\\ \\$ \\`\" 'r=\\n' s=${ARGUS_USER}-x",
    "python3 -m verl.trainer.main_ppo l=[a,b] \\\n  +x.y=${ARGUS_JOB_DIR}/m.jsonl '~z'",
    "python3 -m verl.trainer.main_ppo \"dq\\\nx\" 'sq;|&<>()`$(x)'",
]


SCRIPTS_FOR_BASH = [
    "#!/usr/bin/env bash\nset -x\n# c\nexport VLLM_USE_V1=1\nexport W=\"a b\"\n\n"
    "python3 -m verl.trainer.main_ppo \\\n    a=1 \\\n    'b=x y' \\\n    c=[d,e] $@\n",
    "set -euxo pipefail\nexport VLLM_USE_V1='v' W=w\npython3 -u -m verl.trainer.main_ppo a=1 \"$@\"\n# end\n",
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", SCRIPTS_FOR_BASH)
def test_reduced_script_runs_like_the_script(script: str, tmp_path: Path) -> None:
    """bash running the pasted script (no arguments) and bash running the one command Argus
    reduces it to start the same program with the same argv and exported variables."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps([sys.argv[1:], os.environ.get('VLLM_USE_V1'), os.environ.get('W')]))\n")
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:{os.environ.get('PATH', '')}", "LC_ALL": "C"}
    runs = [subprocess.run(["bash", "-c", text], env=env, cwd=tmp_path, capture_output=True,
                           text=True, check=True).stdout
            for text in (script, parse_command(script, allowed_modules=ALLOWED).text)]
    assert runs[0] == runs[1] and runs[0].strip()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("command", ACCEPTED_FOR_BASH)
def test_lexer_agrees_with_bash(command: str, tmp_path: Path) -> None:
    """For every accepted command, our words are bash's argv (runtime vars substituted)."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:{os.environ.get('PATH', '')}",
           "ARGUS_JOB_DIR": "/JOB", "ARGUS_USER": "alice", "LC_ALL": "C"}
    out = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    words = split_command(command)
    ours = [w.value.replace("${ARGUS_JOB_DIR}", "/JOB").replace("${ARGUS_USER}", "alice")
            for w in words]
    assert ours[0] == "python3" or ours[ours.index("python3")] == "python3"
    assert json.loads(out) == ours[ours.index("python3") + 1:]
