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

``--deny-connect PORT`` (repeated; read here, not passed on): the raylet itself starts
unable to open a TCP connection to those ports (Landlock ABI >= 4), and so does every
process it starts: every worker, job supervisor, job command and agent of this node. The
ports are Ray's own doors to running code outside any job's confinement: the dashboard's
job API (its supervisors run an entrypoint as Ray's dashboard job, unconfined), the
dashboard agents' job API, and the Ray client server (it unpickles what a client sends).
Argus's control plane, not a raylet's child, still reaches them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["launcher_prefix", "main", "prefix_worker_command", "split_denied"]

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


def split_denied(options: Sequence[str]) -> tuple[list[str], list[int]]:
    """``options`` without the ``--deny-connect PORT`` pairs, and those ports."""
    rest, ports = [], []
    items = iter(options)
    for item in items:
        if item == "--deny-connect":
            ports.append(int(next(items)))
        else:
            rest.append(item)
    return rest, ports


def _denying_popen(base: type, denial: Any) -> type:
    """``base`` (Ray's Popen) whose children restrict themselves with ``denial`` before exec."""

    class DenyingPopen(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, preexec_fn: Any = None, **kwargs: Any) -> None:
            def preexec() -> None:
                if preexec_fn is not None:
                    preexec_fn()
                denial.restrict_self()

            super().__init__(*args, preexec_fn=preexec, **kwargs)

    return DenyingPopen


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m argus.confine.raystart [launcher options] -- <ray start arguments>",
              file=sys.stderr)
        return 2
    split = args.index("--")
    options, denied = split_denied(args[:split])
    ray_args = args[split + 1:]
    # Every worker must start for a job, so that its launcher knows whose it is: no workers
    # started ahead of any job (Ray's prestart) to be handed to whichever job comes first.
    os.environ.update(RAY_enable_worker_prestart="0", RAY_prestart_worker_first_driver="0")
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    original, popen = services.start_ray_process, services.ConsolePopen
    prefix = launcher_prefix(options)
    denial = _connect_denial(denied)

    def start_ray_process(command: list[str], process_type: str, *a: Any, **kw: Any) -> Any:
        if process_type != "raylet":
            return original(command, process_type, *a, **kw)
        command = prefix_worker_command(command, prefix)
        if denial is None:
            return original(command, process_type, *a, **kw)
        # Ray's Popen, looked up when start_ray_process runs: for the raylet alone.
        setattr(services, "ConsolePopen", _denying_popen(popen, denial))
        try:
            return original(command, process_type, *a, **kw)
        finally:
            setattr(services, "ConsolePopen", popen)

    services.start_ray_process = start_ray_process  # looked up at call time by start_raylet
    sys.argv = ["ray", *ray_args]
    return int(ray_main() or 0)


def _connect_denial(ports: Sequence[int]) -> Any:
    """The raylet's TCP denial (None: no port to deny, or a kernel without TCP rules: then
    the node's start line says Ray's job API stays open to jobs)."""
    from argus.confine.landlock import NET_ABI, ConnectDenial, abi_version

    if not ports:
        return None
    abi = abi_version()
    if abi < NET_ABI:
        print(f"argus: Landlock ABI {abi} has no TCP rules: this node's jobs can reach Ray's job API "
              f"(ports {', '.join(map(str, ports))}) and run commands outside their confinement",
              file=sys.stderr, flush=True)
        return None
    return ConnectDenial(abi, ports)


if __name__ == "__main__":
    sys.exit(main())
