"""The Ray job entrypoint: ``python -m argus.driver --context <blob>``.

Runs inside the Ray job, on a worker node (``entrypoint_resources={"worker_node": 1}``).
It prepares ``<shared>/users/<user>/jobs/<submission_id>/`` (spec raw + expanded, command,
submission), runs the command with ``bash -c`` in that directory (not a login shell: a
login shell's profile resets PATH, and the command must run in the environment Argus chose), writes the merged
stdout/stderr to ``driver.log`` and a part of it to its own stdout (Ray's job log), then
records ``exit_code`` and ``result.json`` and exits with the command's code. Output past
the attempt's budget is not kept whole (``argus.rayjobs.output``): the head and a rolling
tail, and Ray's job log only a small copy of both.

Stopping: Ray's ``stop_job`` sends SIGTERM to the driver (and its descendants, then SIGKILL
after a grace period). The command runs in its own process group; SIGTERM/SIGINT are
forwarded to that whole group so grandchildren (verl's Ray workers' parents, shells) stop
too, and the child gets PDEATHSIG=SIGKILL so it cannot outlive a SIGKILLed driver.

Confinement (which mechanism, the ruleset or the bubblewrap prefix, the claim that has the
node's launcher confine the command's Ray workers too) is ``argus.confine.command``'s: the
driver asks it how to start the command, and starts it so.

Checkpoints belong to the task, not to one attempt: a later attempt (a retry, or a task
back from preemption) starts with the ``checkpoints/`` of the latest earlier attempt that
has one, moved (a rename: no copy) into its own job dir, so verl's ``resume_mode=auto``
(its default) resumes from them. The old job dir keeps a note saying where they went.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import select
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from argus.confine import LandlockError
from argus.confine.command import Confined, bwrap_missing, confine_command, watch_claims, with_claim_secret
from argus.confine.envpolicy import command_env_problem
from argus.rayjobs.output import BoundedOutput, OutputLimits
from argus.rayjobs.reports import ProgressTracker
from argus.nodepool.process import die_with_parent
from argus.procs import signal_group
from argus.proctable import CLEAR_WAIT_S, command_line, still_here
from argus.nodepool.stacks import StackDesk
from argus.rayjobs.submission import DriverContext, decode_context, job_dir, submission_id_for

__all__ = ["DriverResult", "main", "prepare_job_dir", "run_command"]


class DriverResult(msgspec.Struct, kw_only=True):
    """``result.json``: how the command ended, and where the driver ran."""

    submission_id: str
    exit_code: int
    signal: int | None  # set when the command died of a signal
    forwarded_signal: int | None  # set when the driver was asked to stop
    started_at: float
    ended_at: float
    hostname: str
    ray_node_id: str | None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _ray_node_id() -> str | None:
    """The node this driver runs on, without joining the cluster: Ray exports the raylet's
    node id to processes it starts on some versions; fall back to None."""
    for key in ("RAY_NODE_ID", "RAY_RAYLET_NODE_ID"):
        if os.environ.get(key):
            return os.environ[key]
    return None


def prepare_job_dir(ctx: DriverContext) -> Path:
    """Create the job dir and write what this attempt is (idempotent: a restarted driver
    of the same submission rewrites the same files)."""
    path = Path(job_dir(ctx.shared_root, ctx.user, ctx.submission_id))
    path.mkdir(parents=True, exist_ok=True)
    _write_atomic(path / "spec_raw.txt", ctx.spec_raw.encode())
    _write_atomic(path / "spec.json", msgspec.json.format(msgspec.json.encode(ctx.spec)))
    _write_atomic(path / "command.sh", (ctx.command + "\n").encode())
    ray_job_config: Any = None
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        try:  # runtime_env + metadata exactly as Ray passed them to this job
            ray_job_config = json.loads(os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"])
        except ValueError:
            ray_job_config = os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"]
    submission = {"context": msgspec.to_builtins(ctx), "argv": sys.argv,
                  "ray_job_config": ray_job_config,
                  "driver": {"hostname": socket.gethostname(), "pid": os.getpid(),
                             "ray_node_id": _ray_node_id()}}
    _write_atomic(path / "submission.json", json.dumps(submission, indent=2).encode())
    carry_checkpoints(ctx, path)
    return path


CHECKPOINTS = "checkpoints"


def carry_checkpoints(ctx: DriverContext, path: Path) -> Path | None:
    """Move the latest earlier attempt's ``checkpoints/`` into ``path`` (see the module
    docstring); the folder it came from, or None. A link is never followed or moved."""
    target = path / CHECKPOINTS
    if target.exists() or target.is_symlink():
        return None
    for attempt_no in range(ctx.attempt_no - 1, 0, -1):
        earlier = Path(job_dir(ctx.shared_root, ctx.user, submission_id_for(ctx.task_id, attempt_no)))
        source = earlier / CHECKPOINTS
        if source.is_symlink() or not source.is_dir():
            continue
        os.rename(source, target)
        _write_atomic(earlier / f"{CHECKPOINTS}.moved", f"moved to ../{ctx.submission_id}/{CHECKPOINTS}\n".encode())
        print(f"[argus.driver] resuming: checkpoints of attempt {attempt_no} moved here", flush=True)
        return earlier
    return None


def _failed_to_start(ctx: DriverContext, started: float, why: str, log: Any, out: Any) -> DriverResult:
    """Say why the command did not run, and end as a command that was not found."""
    log.write(why.encode())
    out.write(why.encode())
    return DriverResult(
        submission_id=ctx.submission_id, exit_code=127, signal=None,
        forwarded_signal=None, started_at=started, ended_at=time.time(),
        hostname=socket.gethostname(), ray_node_id=_ray_node_id())


def job_env(ctx: DriverContext, path: Path, base: dict[str, str]) -> dict[str, str]:
    """The command's environment: ``base`` (the driver's own), what says which attempt of
    which task it is, and, unless set already, a W&B run that every attempt of the task
    logs to (a resumed run continues its curves instead of starting a new run)."""
    env = dict(base)
    env.update(ARGUS_JOB_DIR=str(path), ARGUS_SUBMISSION_ID=ctx.submission_id,
               ARGUS_TASK_ID=ctx.task_id, ARGUS_USER=ctx.user, ARGUS_ATTEMPT=str(ctx.attempt_no),
               ARGUS_ATTEMPT_NO=str(ctx.attempt_no), PYTHONUNBUFFERED="1")
    env.setdefault("WANDB_RUN_ID", wandb_run_id(ctx.task_id))
    env.setdefault("WANDB_RESUME", "allow")
    for name in ("BASH_ENV", "ENV"):  # files a non-interactive bash would source first
        env.pop(name, None)
    return env


def wandb_run_id(task_id: str) -> str:
    """A W&B run id for the task: W&B allows letters, digits, ``-`` and ``_``, 64 at most.
    A task id is made of those already (``argus.service.ids``); a longer one keeps its
    start and a hash of the whole (its unique part is at the end)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in task_id)
    if len(safe) <= 64:
        return safe
    return f"{safe[:55]}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"


def run_command(ctx: DriverContext, path: Path, out: Any = None) -> DriverResult:
    """Run the command in ``path``, keep its output within its budget (``driver.log``, and
    a small copy on stdout for Ray's job log: ``argus.rayjobs.output``), and return how it
    ended."""
    out = out if out is not None else sys.stdout.buffer
    output = BoundedOutput(path, ctx.output or OutputLimits(), out)
    try:
        return _run(ctx, path, output)
    finally:  # the stop said last, where the reactor's classifier reads
        output.close(last=STOPPED_FOR_OUTPUT if output.stopped_at is not None else "")


STOPPED_FOR_OUTPUT = ("stopping the command: its output passed its budget "
                      "(v2.output.on_exceed: stop; a spec may raise its output_budget)")


def _run(ctx: DriverContext, path: Path, output: BoundedOutput) -> DriverResult:
    env = job_env(ctx, path, dict(os.environ))
    secret = secrets.token_hex(16)
    with_claim_secret(env, secret)
    started = time.time()
    confined = _confine(ctx, path, env, output)
    if isinstance(confined, str):  # fail closed, saying why
        return _failed_to_start(ctx, started, f"[argus.driver] {confined}\n", output.log, output.out)
    child = _spawn(ctx, path, env, confined)
    watcher = None
    if confined.ruleset is not None:  # its Ray workers are confined as the command is

        def say(line: str) -> None:  # one write: the log is O_APPEND, shared with the tee
            with contextlib.suppress(ValueError):  # closed: the command has ended, its log is whole
                output.log.write(f"[argus.driver] {line}\n".encode())

        watcher = watch_claims(shared_root=ctx.shared_root, user=ctx.user, submission_id=ctx.submission_id,
                               command_pid=child.pid, secret=secret, say=say)
    forwarded = _forward_signals(child)
    code = _pump(ctx, path, child, output)
    if watcher is not None:
        watcher.stop()
    sig = -code if code < 0 else None
    return DriverResult(
        submission_id=ctx.submission_id, exit_code=128 + sig if sig else code, signal=sig,
        forwarded_signal=forwarded[0] if forwarded else None, started_at=started,
        ended_at=time.time(), hostname=socket.gethostname(), ray_node_id=_ray_node_id(),
    )


def _confine(ctx: DriverContext, path: Path, env: dict[str, str], output: BoundedOutput) -> Confined | str:
    """How the command is confined (``argus.confine.command``), its header written; or why
    it may not run."""
    refused = command_env_problem(ctx.command)
    if refused is not None:  # recorded under older rules: only the allowed module runs
        return f"the command is not run: {refused}; submit it again without that assignment"
    try:
        confined = confine_command(ctx.sandbox, shared_root=ctx.shared_root, user=ctx.user, workdir=path, env=env)
    except LandlockError as exc:  # required and missing
        return str(exc.strerror)
    boxed = " (in a bwrap sandbox)" if confined.boxed else ""
    header = (f"[argus.driver] {ctx.submission_id} on {socket.gethostname()}{boxed}: "
              f"bash -c {shlex.quote(ctx.command)}\n")  # as run, one override per line
    if confined.line:
        header += f"[argus.driver] {confined.line}\n"
    output.log.write(header.encode())
    output.out.write(header.encode())
    missing = bwrap_missing(confined)
    return missing if missing is not None else confined


def _spawn(ctx: DriverContext, path: Path, env: dict[str, str], confined: Confined) -> subprocess.Popen[bytes]:
    """Start ``bash -c <command>`` in its own process group, dying with the driver even if
    it is SIGKILLed, confined before it execs."""
    driver_pid = os.getpid()  # read here: the preexec function runs in the child
    ruleset = confined.ruleset

    def in_child() -> None:  # after fork, before exec: die with the driver, confined
        die_with_parent(driver_pid)
        if ruleset is not None:
            ruleset.restrict_self()

    try:
        return subprocess.Popen(
            [*confined.prefix, "bash", "-c", ctx.command], cwd=path, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=in_child,
        )
    finally:
        if ruleset is not None:
            ruleset.close()


def _forward_signals(child: subprocess.Popen[bytes]) -> list[int]:
    """Forward SIGTERM and SIGINT to the command's whole group; the signals forwarded."""
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        signal_group(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return forwarded


def _pump(ctx: DriverContext, path: Path, child: subprocess.Popen[bytes], output: BoundedOutput) -> int:
    """Read the command's output until it ends (feeding the reports and the stacks desk
    meanwhile); its exit status, once its exit report is written."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    reaped = False
    progress = ProgressTracker(ctx.shared_root, ctx.submission_id)
    stacks = StackDesk(ctx.shared_root, ctx.submission_id, path)
    while True:
        progress.output = output.summary()
        progress.tick()
        stacks.tick()
        # select with a timeout: a background grandchild holding the pipe open must
        # not keep the driver alive after the command itself has exited.
        try:
            ready, _, _ = select.select([fd], [], [], 0.5)
        except InterruptedError:  # a forwarded signal arrived
            continue
        if not ready:
            if child.poll() is not None and not reaped:
                signal_group(child, signal.SIGKILL)
                reaped = True
            continue
        chunk = os.read(fd, 65_536)
        if not chunk:
            break
        progress.feed(chunk)
        output.feed(chunk)
        if output.over and output.limits.stop_over and output.stopped_at is None:
            output.stopped_at = time.time()
            output.note(STOPPED_FOR_OUTPUT)
            signal_group(child, signal.SIGTERM)
    code = child.wait()
    sig = -code if code < 0 else None
    progress.output = output.summary()
    signal_group(child, signal.SIGKILL)  # nothing of the command may outlive it
    # First after that: the reactor ends the attempt on it, and lets this node admit again
    # at once when nothing of the attempt is left here.
    left = still_here(ctx.submission_id)
    if left:
        pid = next(iter(left))
        output.note(f"{len(left)} process(es) of {ctx.submission_id} still run on this host {CLEAR_WAIT_S:g} s "
                    f"after its command exited (pid {pid}: {command_line(pid)[:120]}); its node admits again "
                    "once they end, or is quarantined")
    # driver.log whole before the exit report: the attempt ends on the report, and what
    # reads the log then (the user, the classifier) must find all of it.
    output.close(last=STOPPED_FOR_OUTPUT if output.stopped_at is not None else "")
    progress.exited(128 + sig if sig else code, host_clean=not left)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m argus.driver", description=__doc__.split("\n")[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--context", help="DriverContext as built by argus.rayjobs.build_submission")
    src.add_argument("--context-file", help="the same, read from a file (for debugging)")
    args = parser.parse_args(argv)
    blob = args.context if args.context else Path(args.context_file).read_text().strip()
    ctx = decode_context(blob)
    path = prepare_job_dir(ctx)
    result = run_command(ctx, path)
    _write_atomic(path / "result.json", msgspec.json.format(msgspec.json.encode(result)))
    _write_atomic(path / "exit_code", f"{result.exit_code}\n".encode())
    print(f"[argus.driver] exit code {result.exit_code}", flush=True)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
