"""``python -m argus.confine.raystart [launcher options] -- <ray start arguments>``: ``ray
start``, with every Python worker of this node's raylet started through the confining
launcher (``argus.confine.worker``).

Why this way (docs/security.md): a Ray worker is the raylet's child, not the job's, so a
job's confinement cannot reach it by inheritance; and whatever a job puts in a worker's
``runtime_env`` (a plugin key, ``py_executable``, environment variables) the job can also
leave out or forge. The one thing a job cannot change is the command the raylet was given
at start (``--python_worker_command``). ``ray start`` has no option for it, so this wraps
``ray start`` in-process and prefixes that one argument of the raylet's command line.
No file of Ray is changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["launcher_prefix", "main", "prefix_worker_command"]

_FLAG = "--python_worker_command="


def launcher_prefix(options: Sequence[str]) -> list[str]:
    """The launcher's own argv, to go before the raylet's worker command: this interpreter,
    isolated (no environment, no site: ``argus.confine.worker``'s docstring), on its file.
    What the workers' interpreter reads is worked out here, where ``site`` has run (without
    it, Python knows nothing of a virtualenv: its ``pyvenv.cfg``, its site-packages)."""
    from argus.confine import interpreter_paths, worker

    reads = [arg for path in interpreter_paths() for arg in ("--read", path)]
    return [sys.executable, "-I", "-S", worker.__file__ or "", *options, *reads, "--"]


def prefix_worker_command(command: list[str], prefix: Sequence[str]) -> list[str]:
    """The raylet's command line with ``prefix`` before its Python worker command."""
    return [f"{_FLAG}{subprocess.list2cmdline(list(prefix))} {arg[len(_FLAG):]}"
            if arg.startswith(_FLAG) else arg for arg in command]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m argus.confine.raystart [launcher options] -- <ray start arguments>",
              file=sys.stderr)
        return 2
    split = args.index("--")
    options, ray_args = args[:split], args[split + 1:]
    # Every worker must start for a job, so that its launcher knows whose it is: no workers
    # started ahead of any job (Ray's prestart) to be handed to whichever job comes first.
    os.environ.update(RAY_enable_worker_prestart="0", RAY_prestart_worker_first_driver="0")
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    original = services.start_ray_process
    prefix = launcher_prefix(options)

    def start_ray_process(command: list[str], process_type: str, *a: Any, **kw: Any) -> Any:
        if process_type == "raylet":
            command = prefix_worker_command(command, prefix)
        return original(command, process_type, *a, **kw)

    services.start_ray_process = start_ray_process  # looked up at call time by start_raylet
    sys.argv = ["ray", *ray_args]
    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
