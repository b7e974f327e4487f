"""Ray's start-up on a busy host: time limits scaled to the load, and a failed start's cause
in one line.

Ray's start-up limits are sized for a quiet machine: the raylet waits 30 s for its dashboard
agent to register, the dashboard has 60 s to answer, the raylet 10 s to start. On a 2-core
host with a load of 20-50 (a shared login node, a busy CI runner) each is missed now and
then, the node exits, and a restart with the same limits misses them again. Every place that
starts Ray (the node-pool watchdogs, hence ``argus up``, and the tests' clusters) takes its
environment from :func:`ray_startup_env`, read at each start, so a restart on a host that
got busier gets longer limits. Values the operator set in the environment are kept.

One limit cannot be raised: ``ray start`` gives a node 30 s (fixed in Ray's Python code) to
appear in the GCS. What is left for that one is a retry with backoff, which the watchdogs do.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

__all__ = ["LOG_ROTATION", "HostLoad", "describe_limits", "diagnose_ray_exit", "explain_ray_exit", "ray_child_env",
           "ray_log_env", "ray_session_logs", "ray_startup_env", "tail_text"]

# Ray's own defaults for the limits raised here (Ray 2.x): (variable, default in its unit).
_LIMITS: tuple[tuple[str, int], ...] = (
    ("RAY_DASHBOARD_STARTUP_TIMEOUT_S", 60),
    ("RAY_agent_register_timeout_ms", 30_000),
    ("RAY_raylet_start_wait_time_s", 10),
)
# The least and the most the limits are multiplied by. The least is 2 even on a quiet host:
# a host's load changes faster than a start takes, and a longer limit costs nothing unless
# a start really hangs. The most keeps a hung start from going unnoticed for long.
_MIN_SCALE, _MAX_SCALE = 2, 10
# Load per core from which a failed start is put down to the host being overloaded.
OVERLOADED_PER_CORE = 2.0


class HostLoad(msgspec.Struct, frozen=True):
    """The 1-minute load average and the cores this process may run on."""

    load1: float
    cores: int

    @classmethod
    def read(cls) -> "HostLoad":
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        try:
            load1 = os.getloadavg()[0]
        except OSError:  # not on every platform
            load1 = 0.0
        return cls(load1=load1, cores=max(1, cores))

    @property
    def per_core(self) -> float:
        return self.load1 / self.cores

    def overloaded(self) -> bool:
        return self.per_core >= OVERLOADED_PER_CORE

    def scale(self) -> int:
        """How many times Ray's start-up limits are multiplied."""
        return max(_MIN_SCALE, min(_MAX_SCALE, math.ceil(self.per_core)))

    def describe(self) -> str:
        return f"load {self.load1:.0f} on {self.cores} core{'s' if self.cores != 1 else ''}"


def ray_startup_env(load: HostLoad, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The start-up limits to add to a Ray node's environment; a variable already set in
    ``env`` (default: this process's) is left as the operator set it."""
    env = os.environ if env is None else env
    scale = load.scale()
    return {name: str(default * scale) for name, default in _LIMITS if name not in env}


def tail_text(path: Path, limit: int = 64 * 1024) -> str:
    """The last ``limit`` bytes of a file as text ('' if it cannot be read). Bounded: a Ray
    log can be large, and only its end says why the process stopped."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def ray_session_logs(argv: Iterable[str]) -> list[Path]:
    """The logs of the newest Ray session under the ``--temp-dir`` of a ``ray start``
    command line (Ray's default temp dir if none): where a raylet says why it stopped."""
    temp = "/tmp/ray"
    for arg in argv:
        if arg.startswith("--temp-dir="):
            temp = arg.split("=", 1)[1]
    logs = Path(temp) / "session_latest" / "logs"
    return [logs / name for name in ("raylet.out", "raylet.err", "gcs_server.out",
                                     "dashboard_agent.log", "dashboard.log")]


# What a failed start printed, and what to tell the operator: first match wins.
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, re.I), text) for p, text in (
    (r"Timed out waiting for file .*dashboard_agent",
     "Ray's raylet timed out waiting for its dashboard agent"),
    (r"Timed out waiting for file .*runtime_env_agent",
     "Ray's raylet timed out waiting for its runtime-env agent"),
    (r"node timed out during startup",
     "Ray's node did not register with the GCS within Ray's 30 s start-up limit"),
    (r"agent.*(failed to register|register.*timed? ?out)|agent_register",
     "Ray's dashboard agent did not register with the raylet in time"),
    (r"Failed to start the dashboard|dashboard.*(timed out|did not start)",
     "Ray's dashboard did not start in time"),
    (r"(Failed to connect to|Unable to connect to|could not connect to) (the )?GCS",
     "Ray could not reach the GCS"),
    (r"Address already in use|port \d+ is already in use|is already in use",
     "a port Ray needs is already in use"),
    (r"No space left on device", "the disk is full"),
    (r"Cannot allocate memory|out of memory|MemoryError", "the host ran out of memory"),
))


def diagnose_ray_exit(texts: Iterable[str], load: HostLoad, rc: int | None, ran_s: float) -> str:
    """One line saying why a Ray node stopped, from what it printed and the host's load:
    "Ray's raylet timed out waiting for its dashboard agent: the host is overloaded (load 34
    on 2 cores)"."""
    said = "\n".join(texts)
    cause = next((text for pattern, text in _CAUSES if pattern.search(said)), None)
    if cause is None:
        cause = f"Ray exited (rc={rc}) after {ran_s:.0f} s"
        last = _last_error_line(said)
        if last:
            cause += f"; it last said: {last}"
    if load.overloaded():
        return f"{cause}: the host is overloaded ({load.describe()})"
    return f"{cause} ({load.describe()})"


def _last_error_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if re.search(r"error|exception|failed|fatal", line, re.I):
            return line.strip()[:200]
    return ""


def explain_ray_exit(argv: Iterable[str], printed: Iterable[str], rc: int | None,
                     ran_s: float, load: HostLoad | None = None) -> str:
    """:func:`diagnose_ray_exit` over what ``ray start`` printed and the ends of its
    session's logs (each read bounded)."""
    texts = ["".join(printed), *(tail_text(p, 16 * 1024) for p in ray_session_logs(argv))]
    return diagnose_ray_exit(texts, load or HostLoad.read(), rc, ran_s)


# Ray's log rotation for a node's own logs (raylet.out, gcs_server.out, …) and for every
# worker it starts that its job does not set otherwise (Argus sets a job's from its output
# budget, argus.rayjobs.submission): each file is rotated at 64 MiB, and 4 older ones kept.
# Without them Ray never rotates a process's stdout and stderr (Ray 2.60's C++ logger and
# its workers' stream redirection read these two variables; unset: no rotation).
LOG_ROTATION: tuple[tuple[str, str], ...] = (("RAY_ROTATION_MAX_BYTES", str(64 << 20)),
                                             ("RAY_ROTATION_BACKUP_COUNT", "4"))


def ray_log_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ray's log rotation to add to a node's environment; a variable already set in ``env``
    (default: this process's) is left as the operator set it."""
    env = os.environ if env is None else env
    return {name: value for name, value in LOG_ROTATION if name not in env}


def ray_child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus start-up limits scaled to the host's load now, and
    Ray's log rotation."""
    env = dict(os.environ)
    env.update(extra or {})
    env.update(ray_startup_env(HostLoad.read(), env))
    env.update(ray_log_env(env))
    return env


def describe_limits(env: Mapping[str, str]) -> str:
    """The start-up limits in ``env``, for a node's start line."""
    return " ".join(f"{name}={env[name]}" for name, _ in _LIMITS if name in env)
