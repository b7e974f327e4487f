"""Confining one attempt's command, as the job driver (``argus.driver``) runs it.

``v2.sandbox.mode`` (carried in the driver's context as a ``Sandbox``) picks the mechanism:

- ``auto`` / ``landlock``: the command's process applies a Landlock ruleset to itself
  between fork and exec (``argus.confine.job.job_ruleset``: its user's home, the shared
  read-only folders, the system; ``auto`` runs unconfined where the kernel lacks Landlock,
  ``landlock`` then refuses to run). The command's ``TMPDIR`` is the attempt's own ``tmp/``
  and ``HOME`` the user's home. The Ray job the command starts is claimed for the user
  (``watch_claims``), so that the node's launcher (``argus.confine.worker``) confines that
  job's Ray workers the same way.
- ``bwrap``: the command runs under bubblewrap (``argus.confine.sandbox.bwrap_argv``); the
  Ray workers it starts are not confined by it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from argus import layout
from argus.confine.claims import CLAIM_SECRET_KEY, ClaimWatcher, first_job_judge
from argus.confine.desk import ClaimRequest, desk_is_open, request_claim, withdraw_request
from argus.confine.job import decide, job_ruleset
from argus.confine.landlock import Ruleset
from argus.confine.registry import registry_dir
from argus.confine.sandbox import Sandbox, bwrap_argv

__all__ = ["CLAIM_SECRET_KEY", "RAY_JOB_CONFIG", "Confined", "DeskRequest", "bwrap_missing", "confine_command",
           "watch_claims", "with_claim_secret"]

# Ray's supervisor hands the entrypoint its job config in this variable, and ``ray.init``
# copies the config's metadata into the GCS's job table (ray._private.worker).
RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"


class Confined:
    """How one command is confined: the ``bwrap … --`` prefix of its argv (or none), the
    Landlock ruleset its process applies to itself (or None), and the line that says so."""

    def __init__(self, prefix: list[str], ruleset: Ruleset | None, line: str) -> None:
        self.prefix, self.ruleset, self.line = prefix, ruleset, line

    @property
    def boxed(self) -> bool:
        """Whether the command runs under bubblewrap."""
        return bool(self.prefix)


def confine_command(sandbox: Sandbox | None, *, shared_root: str, user: str, workdir: Path,
                    env: dict[str, str]) -> Confined:
    """How to confine ``user``'s command in ``workdir`` (the attempt's folder); ``env``, the
    command's environment, is updated for it. Raises ``LandlockError`` when Landlock is
    required and this node's kernel lacks it."""
    prefix = _bwrap_prefix(sandbox, shared_root=shared_root, user=user, workdir=workdir, env=env)
    ruleset, line = _landlock(sandbox, shared_root=shared_root, user=user, workdir=workdir, env=env)
    return Confined(prefix, ruleset, line)


def _bwrap_prefix(sandbox: Sandbox | None, *, shared_root: str, user: str, workdir: Path,
                  env: dict[str, str]) -> list[str]:
    """``bwrap … --`` when the context asks for bubblewrap (else nothing): the command sees
    the user's home, the shared read-only folders, and this interpreter and PYTHONPATH."""
    if sandbox is None or sandbox.mode != "bwrap":
        return []
    needed = [sys.prefix, sys.base_prefix, *env.get("PYTHONPATH", "").split(":")]
    return bwrap_argv(sandbox, shared_root=shared_root, user=user, workdir=str(workdir), needed=needed)


def _landlock(sandbox: Sandbox | None, *, shared_root: str, user: str, workdir: Path,
              env: dict[str, str]) -> tuple[Ruleset | None, str]:
    """The Landlock ruleset for the command when the context asks for it and this node's
    kernel has it, and the line that says so ("" when not asked)."""
    if sandbox is None or sandbox.mode not in ("auto", "landlock"):
        return None, ""
    decision = decide(sandbox.mode)
    if not decision.confined:
        return None, decision.line
    tmp = workdir / "tmp"  # the private temporary folder: /tmp is out of reach
    tmp.mkdir(exist_ok=True)
    env.update(TMPDIR=str(tmp), HOME=layout.home(shared_root, user))  # caches (~/.cache, ~/.triton) land in the home
    ruleset = job_ruleset(decision, shared_root=shared_root, user=user,
                          pythonpath=[p for p in env.get("PYTHONPATH", "").split(":") if p],
                          extra_read=sandbox.read_only, extra_write=sandbox.writable, hidden=sandbox.hidden)
    return ruleset, decision.line


def bwrap_missing(confined: Confined) -> str | None:
    """Why the command cannot run (bubblewrap asked for and not on this worker), or None."""
    if not confined.boxed or shutil.which(confined.prefix[0]) is not None:
        return None
    return (f"the sandbox needs bubblewrap, and {confined.prefix[0]!r} is not on this "
            "worker: install it (Debian: apt-get install bubblewrap), or set v2.sandbox.mode: auto")


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


class DeskRequest:
    """A claim handed to this host's claim desk (``argus.confine.desk``): withdrawn when
    the command ends."""

    def __init__(self, registry: str, submission_id: str) -> None:
        self.registry, self.submission_id = registry, submission_id

    def stop(self) -> None:
        withdraw_request(self.registry, self.submission_id)


def watch_claims(*, shared_root: str, user: str, submission_id: str, command_pid: int, secret: str,
                 say: Callable[[str], None]) -> ClaimWatcher | DeskRequest | None:
    """Claim for ``user`` the Ray job the command starts (``first_job_judge``: the first one
    showing ``secret``), so that the node's launcher confines that job's Ray workers the same
    way (argus.confine.worker): through this host's claim desk when it is open (the node's
    watchdog keeps Ray's client for every job), else with a watcher of its own, which imports
    Ray. Call it after the command started: a thread importing Ray while ``Popen`` forks could
    leave the child's ``preexec_fn`` waiting on a lock. None outside Ray (no ``RAY_ADDRESS``)."""
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or address == "auto":
        return None
    registry = registry_dir(shared_root)
    if desk_is_open(registry):
        try:
            request_claim(registry, ClaimRequest(submission_id=submission_id, user=user, secret=secret,
                                                 command_pid=command_pid, made_at=time.time()))
            say("the Ray workers this job starts are confined to your files by this node's "
                "watchdog (the node's log says when)")
            return DeskRequest(registry, submission_id)
        except OSError as exc:  # the desk's folder is not writable: watch for ourselves
            say(f"this node's watchdog cannot take this job ({exc}); the driver confines the "
                "Ray workers it starts itself")
    judge = first_job_judge(submission_id=submission_id, user=user, command_pid=command_pid,
                            secret=secret, say=say)
    watcher = ClaimWatcher(registry=registry, gcs_address=address, judge=judge,
                           submission_id=submission_id, on_error=say)
    watcher.start()
    return watcher
