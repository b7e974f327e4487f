"""TaskSpecs: what a user submits, checked and turned into the command verl runs.

- ``spec``: the two kinds (basic, ``kind: advanced``) as msgspec Structs, one parser.
- ``expand``: the ``$HOME`` macros. ``paths``: the path allow-lists.
- ``command``: the bash-level shape of a command. ``checks``: the hard and soft checks.
- ``builders``: verl command lines for basic specs, and the demand rule.
- ``prepare``: all of the above for one submission (what the API calls).

Reference: docs/taskspec.md.
"""

from argus.taskspec.builders import build_basic_command, cpus_per_node, demand_for
from argus.taskspec.errors import TaskSpecError
from argus.taskspec.expand import expand_home
from argus.taskspec.prepare import PreparedTask, prepare_task
from argus.taskspec.spec import (
    AdvancedTaskSpec,
    BasicTaskSpec,
    TaskSpec,
    encode_taskspec,
    parse_taskspec,
    parse_taskspec_with_warnings,
)

__all__ = [
    "AdvancedTaskSpec",
    "BasicTaskSpec",
    "PreparedTask",
    "TaskSpec",
    "TaskSpecError",
    "build_basic_command",
    "cpus_per_node",
    "demand_for",
    "encode_taskspec",
    "expand_home",
    "parse_taskspec",
    "parse_taskspec_with_warnings",
    "prepare_task",
]
