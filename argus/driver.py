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

Checkpoints belong to the task, not to one attempt: a later attempt (a retry, or a task
back from preemption) starts with the ``checkpoints/`` of the latest earlier attempt that
has one, moved (a rename: no copy) into its own job dir, so verl's ``resume_mode=auto``
(its default) resumes from them. The old job dir keeps a note saying where they went.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

from argus.confine import LandlockError, Ruleset, decide, job_ruleset
from argus.confine.envpolicy import command_env_problem
from argus.confine.claims import CLAIM_SECRET_KEY, ClaimWatcher, first_job_judge
from argus.confine.desk import ClaimRequest, desk_is_open, request_claim, withdraw_request
from argus.confine.registry import Claim, registry_dir
from argus.rayjobs.output import BoundedOutput, OutputLimits
from argus.rayjobs.reports import ProgressTracker
from argus.nodepool.process import die_with_parent
from argus.procs import signal_group
from argus.proctable import CLEAR_WAIT_S, command_line, still_here
from argus.rayjobs.sandbox import bwrap_argv
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


def _sandbox_prefix(ctx: DriverContext, path: Path, env: dict[str, str]) -> list[str]:
    """``bwrap … --`` when the context asks for bubblewrap (else nothing): the command sees
    the user's home, the shared read-only folders, and this interpreter and PYTHONPATH."""
    if ctx.sandbox is None or ctx.sandbox.mode != "bwrap":
        return []
    needed = [sys.prefix, sys.base_prefix, *env.get("PYTHONPATH", "").split(":")]
    return bwrap_argv(ctx.sandbox, shared_root=ctx.shared_root, user=ctx.user,
                      workdir=str(path), needed=needed)


def _landlock(ctx: DriverContext, path: Path, env: dict[str, str]) -> tuple[Ruleset | None, str]:
    """The Landlock ruleset for the command when the context asks for it and this node's
    kernel has it, and the line that says so ("" when not asked). Raises LandlockError
    when Landlock is required and missing."""
    box = ctx.sandbox
    if box is None or box.mode not in ("auto", "landlock"):
        return None, ""
    decision = decide(box.mode)
    if not decision.confined:
        return None, decision.line
    tmp = path / "tmp"  # the private temporary folder: /tmp is out of reach
    tmp.mkdir(exist_ok=True)
    home = str(Path(ctx.shared_root) / "users" / ctx.user)
    env.update(TMPDIR=str(tmp), HOME=home)  # caches (~/.cache, ~/.triton) land in the home
    ruleset = job_ruleset(decision, shared_root=ctx.shared_root, user=ctx.user,
                          pythonpath=[p for p in env.get("PYTHONPATH", "").split(":") if p],
                          extra_read=box.read_only, extra_write=box.writable, hidden=box.hidden)
    return ruleset, decision.line


# Ray's supervisor hands the entrypoint its job config in this variable, and ``ray.init``
# copies the config's metadata into the GCS's job table (ray._private.worker).
RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def with_claim_secret(env: dict[str, str], secret: str) -> None:
    """Put ``secret`` in the job config the command's ``ray.init`` records (nothing to do
    outside a Ray job). The GCS's job table names each job's driver process as the driver
    itself says it, so a job that spoke Ray's protocol itself could register a driver
    naming this attempt and one of its process ids; it cannot name this secret before this
    command's own Ray job has shown it in the table (Landlock keeps the command's
    environment from other users' processes), and only the first job showing it is claimed."""
    raw = env.get(RAY_JOB_CONFIG)
    if not raw:
        return
    try:
        config = json.loads(raw)
    except ValueError:
        return
    if isinstance(config, dict):
        metadata = config.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata[CLAIM_SECRET_KEY] = secret
            env[RAY_JOB_CONFIG] = json.dumps(config)


def claim_judge(ctx: DriverContext, command_pid: int, secret: str,
                say: Callable[[str], None]) -> Callable[[str, Any], Claim | None]:
    """Who gets this user's claim (``argus.confine.claims.first_job_judge``)."""
    return first_job_judge(submission_id=ctx.submission_id, user=ctx.user, command_pid=command_pid,
                           secret=secret, say=say)


class _DeskRequest:
    """A claim handed to this host's claim desk (``argus.confine.desk``): withdrawn when
    the command ends."""

    def __init__(self, registry: str, submission_id: str) -> None:
        self.registry, self.submission_id = registry, submission_id

    def stop(self) -> None:
        withdraw_request(self.registry, self.submission_id)


def _watch_claims(ctx: DriverContext, command_pid: int, secret: str, log: Any) -> ClaimWatcher | _DeskRequest | None:
    """Claim for this user the Ray job the command starts (``claim_judge``), so that the
    node's launcher confines that job's Ray workers the same way (argus.confine.worker):
    through this host's claim desk when it is open (the node's watchdog keeps Ray's client
    for every job), else with a watcher of its own, which imports Ray. Started after the
    command: a thread importing Ray while ``Popen`` forks could leave the child's
    ``preexec_fn`` waiting on a lock. None outside Ray (no ``RAY_ADDRESS``)."""
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or address == "auto":
        return None

    def say(line: str) -> None:  # one write: the log is O_APPEND, shared with the tee
        log.write(f"[argus.driver] {line}\n".encode())

    registry = registry_dir(ctx.shared_root)
    if desk_is_open(registry):
        try:
            request_claim(registry, ClaimRequest(submission_id=ctx.submission_id, user=ctx.user, secret=secret,
                                                 command_pid=command_pid, made_at=time.time()))
            say("the Ray workers this job starts are confined to your files by this node's "
                "watchdog (the node's log says when)")
            return _DeskRequest(registry, ctx.submission_id)
        except OSError as exc:  # the desk's folder is not writable: watch for ourselves
            say(f"this node's watchdog cannot take this job ({exc}); the driver confines the "
                "Ray workers it starts itself")
    watcher = ClaimWatcher(registry=registry, gcs_address=address,
                           judge=claim_judge(ctx, command_pid, secret, say),
                           submission_id=ctx.submission_id, on_error=say)
    watcher.start()
    return watcher


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
    forwarded: list[int] = []
    argv = [*_sandbox_prefix(ctx, path, env), "bash", "-c", ctx.command]
    log, out = output.log, output.out
    refused = command_env_problem(ctx.command)
    if refused is not None:  # recorded under older rules: only the allowed module runs
        return _failed_to_start(ctx, started, f"[argus.driver] the command is not run: {refused}; "
                                "submit it again without that assignment\n", log, out)
    try:
        ruleset, confined = _landlock(ctx, path, env)
    except LandlockError as exc:  # required and missing: fail closed, saying why
        return _failed_to_start(ctx, started, f"[argus.driver] {exc.strerror}\n", log, out)
    boxed = " (in a bwrap sandbox)" if argv[0] != "bash" else ""
    header = (f"[argus.driver] {ctx.submission_id} on {socket.gethostname()}{boxed}: "
              f"bash -c {shlex.quote(ctx.command)}\n")  # as run, one override per line
    if confined:
        header += f"[argus.driver] {confined}\n"
    log.write(header.encode())
    out.write(header.encode())
    if argv[0] != "bash" and shutil.which(argv[0]) is None:  # fail closed, saying why
        return _failed_to_start(ctx, started, (
            f"[argus.driver] the sandbox needs bubblewrap, and {argv[0]!r} is not on this "
            "worker: install it (Debian: apt-get install bubblewrap), or set "
            "v2.sandbox.mode: auto\n"), log, out)
    driver_pid = os.getpid()  # read here: the preexec function runs in the child

    def in_child() -> None:  # after fork, before exec: die with the driver, confined
        die_with_parent(driver_pid)
        if ruleset is not None:
            ruleset.restrict_self()

    try:
        child = subprocess.Popen(
            argv, cwd=path, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            # Die with the driver even if it is SIGKILLed.
            start_new_session=True, preexec_fn=in_child,
        )
    finally:
        if ruleset is not None:
            ruleset.close()
    watcher = _watch_claims(ctx, child.pid, secret, log) if ruleset is not None else None

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        signal_group(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    assert child.stdout is not None
    code = _pump(ctx, path, child, output)
    sig = -code if code < 0 else None
    if watcher is not None:
        watcher.stop()
    return DriverResult(
        submission_id=ctx.submission_id, exit_code=128 + sig if sig else code, signal=sig,
        forwarded_signal=forwarded[0] if forwarded else None, started_at=started,
        ended_at=time.time(), hostname=socket.gethostname(), ray_node_id=_ray_node_id(),
    )


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
    progress.exited(128 + sig if sig else code, host_clean=not left)
    if left:
        pid = next(iter(left))
        output.note(f"{len(left)} process(es) of {ctx.submission_id} still run on this host {CLEAR_WAIT_S:g} s "
                    f"after its command exited (pid {pid}: {command_line(pid)[:120]}); its node admits again "
                    "once they end, or is quarantined")
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
