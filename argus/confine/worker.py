"""``python -I -m argus.confine.worker [options] -- <the raylet's worker command>``: the
first program of every Python worker a confining node's raylet starts
(``argus.confine.raystart`` puts it there).

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

import argparse
import os
import posixpath
import sys
from collections.abc import Sequence

from argus.confine.job import Decision, decide, interpreter_paths
from argus.confine.landlock import Ruleset
from argus.confine.registry import SYSTEM, read_claim, registry_dir
from argus.confine.rules import job_confinement, rules_for

__all__ = ["NIL_JOB", "main", "raylet_command", "worker_ruleset"]

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
    """The ruleset of a worker of ``user``'s job ("": no user's files at all)."""
    conf = job_confinement(
        shared_root=shared_root, user=user or "", needed=interpreter_paths(),
        ray_logs=[posixpath.join(session_dir, "logs")],
        # working_dir and py_modules that Ray unpacked for jobs
        extra_read=[posixpath.join(session_dir, "runtime_resources"), *extra_read], hidden=hidden)
    ruleset = Ruleset(decision.abi)
    ruleset.allow_all(rules_for(conf))
    return ruleset


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m argus.confine.worker")
    parser.add_argument("--shared-root", required=True)
    parser.add_argument("--mode", default="auto", help="v2.sandbox.mode: auto or landlock")
    parser.add_argument("--read", action="append", default=[], help="more paths workers may read")
    parser.add_argument("--hide", action="append", default=[], help="paths workers never reach")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = raylet_command(args.command[1:] if args.command[:1] == ["--"] else args.command)
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
            home = posixpath.join(args.shared_root, "users", user)
            os.makedirs(posixpath.join(home, "tmp"), exist_ok=True)
            os.environ.update(TMPDIR=posixpath.join(home, "tmp"), HOME=home)
        ruleset.restrict_self()
    os.execv(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
