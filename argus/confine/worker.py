"""``python -I -S <this file> [options] -- <the raylet's worker command>``: the first
program of every Python worker a confining node's raylet starts (``argus.confine.raystart``
puts it there). Run as a file without ``site`` (and importing only the standard library):
it runs before every Ray worker, and Python's site set-up and msgspec's import were most of
its start-up. For the same reason it and the modules it imports leave out ``typing``,
``enum`` and ``json`` (``python -X importtime -I -S`` on this file lists what is left).

It runs before anything a job controls: the raylet sets ``RAY_JOB_ID`` in its environment,
and a job's own ``runtime_env`` (environment variables, ``py_executable``, pip) is applied
only later, by Ray's ``setup_worker`` that this launcher execs. So the job id it reads is
the raylet's, and the Landlock ruleset it applies holds for the worker and everything the
worker execs or forks, whatever the job asked Ray for.

- A job claimed for a user (``argus.confine.registry``): that user's confinement, the same
  as the job's command (``rules.job_confinement``).
- Ray's own dashboard job (it runs every job's entrypoint supervisor), Ray's spill and
  restore workers: not confined.
- Anything else (an unclaimed job, a worker started before it has a job): confined with no
  user's files at all.
"""

from __future__ import annotations

import os
import posixpath
import sys

# Not typing's TYPE_CHECKING, nor typing.NamedTuple below: typing's import (with ``re``)
# was over a quarter of this launcher's start-up. Every module it imports avoids it too.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

if __name__ == "__main__" and not __package__:  # run as a file: Argus's code is two levels up
    sys.path.insert(0, posixpath.dirname(posixpath.dirname(posixpath.dirname(posixpath.abspath(__file__)))))

from argus import layout
from argus.confine.job import Decision, decide
from argus.confine.landlock import Ruleset
from argus.confine.record import fields
from argus.confine.registry import SYSTEM, read_claim, registry_dir
from argus.confine.rules import job_confinement, rules_for

__all__ = ["NIL_JOB", "Options", "main", "parse", "raylet_command", "worker_ruleset"]

NIL_JOB = "ffffffff"
# How long a job's first worker waits for its driver's claim to be on disk.
CLAIM_WAIT_S = 30.0


def raylet_command(argv: Sequence[str]) -> list[str]:
    """The worker command as the raylet meant it: the raylet drops ``setup_worker.py``
    when a worker has no runtime_env, but it looks at ``argv[1]``, which is now ours."""
    argv = list(argv)
    if (len(argv) > 1 and argv[1].endswith("setup_worker.py")
            and not any(a.startswith("--serialized-runtime-env-context=") for a in argv)):
        del argv[1]
    return argv


def _option(argv: Sequence[str], name: str) -> str:
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in argv if a.startswith(prefix)), "")


def worker_ruleset(decision: Decision, *, user: str, shared_root: str, session_dir: str,
                   extra_read: Sequence[str] = (), hidden: Sequence[str] = ()) -> Ruleset:
    """The ruleset of a worker of ``user``'s job ("": no user's files at all). Not Ray's
    ``runtime_resources``: every job's unpacked ``working_dir``, ``py_modules`` and pip
    environments are there, so a job's code belongs in its home (``$HOME/code``)."""
    # The interpreter's paths come in ``extra_read``: raystart worked them out where ``site``
    # had run (this launcher runs without it, and would only find the base interpreter's).
    conf = job_confinement(shared_root=shared_root, user=user, ray_logs=[posixpath.join(session_dir, "logs")],
                           extra_read=extra_read, hidden=hidden)
    ruleset = Ruleset(decision.abi)
    ruleset.allow_all(rules_for(conf))
    return ruleset


@fields
class Options(tuple[str, str, list[str], list[str], list[str]]):
    """``--shared-root DIR [--mode auto|landlock] [--read PATH]… [--hide PATH]… -- COMMAND…``"""

    __slots__ = ()
    shared_root: str
    mode: str
    read: list[str]
    hide: list[str]
    command: list[str]

    def __new__(cls, shared_root: str, mode: str, read: list[str], hide: list[str], command: list[str]) -> Options:
        return super().__new__(cls, (shared_root, mode, read, hide, command))


def parse(argv: Sequence[str]) -> Options:
    """The launcher's arguments (by hand: argparse's import is a fifth of the start-up)."""
    if "--" not in argv:
        raise SystemExit(f"usage: {USAGE}")
    split = list(argv).index("--")
    given: dict[str, list[str]] = {"--shared-root": [], "--mode": [], "--read": [], "--hide": []}
    pairs = list(argv[:split])
    if len(pairs) % 2 or any(name not in given for name in pairs[::2]):
        raise SystemExit(f"usage: {USAGE}")
    for name, value in zip(pairs[::2], pairs[1::2]):
        given[name].append(value)
    if len(given["--shared-root"]) != 1:
        raise SystemExit(f"usage: {USAGE}")
    return Options(shared_root=given["--shared-root"][0], mode=(given["--mode"] or ["auto"])[-1],
                   read=given["--read"], hide=given["--hide"], command=list(argv[split + 1:]))


USAGE = "worker.py --shared-root DIR [--mode auto|landlock] [--read PATH]... [--hide PATH]... -- COMMAND..."


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    command = raylet_command(args.command)
    job = os.environ.get("RAY_JOB_ID", "")
    if _option(command, "worker-type") in ("SPILL_WORKER", "RESTORE_WORKER"):
        os.execv(command[0], command)  # Ray's own: they run no user code
    claim = None
    if job and job != NIL_JOB:
        claim = read_claim(registry_dir(args.shared_root), _option(command, "cluster-id"), job,
                           wait_s=CLAIM_WAIT_S)
    if claim is not None and claim.user == SYSTEM:
        os.execv(command[0], command)
    decision = decide(args.mode)
    if decision.confined:
        user = claim.user if claim is not None else ""
        session = posixpath.join(_option(command, "temp-dir") or "/tmp/ray", _option(command, "session-name"))
        ruleset = worker_ruleset(decision, user=user, shared_root=args.shared_root, session_dir=session,
                                 extra_read=args.read, hidden=args.hide)
        if user:  # /tmp is out of reach: the user's own temporary folder
            home = layout.home(args.shared_root, user)
            try:  # mkdir never follows a link the user left there; a failure only costs TMPDIR
                os.mkdir(posixpath.join(home, "tmp"), 0o700)
            except OSError:
                pass
            os.environ.update(TMPDIR=posixpath.join(home, "tmp"), HOME=home)
        ruleset.restrict_self()
    os.execv(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
