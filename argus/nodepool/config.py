"""Node pool settings, read from the seed 003 §3.3 environment variables.

The container entrypoint passes everything through the environment, so this module is the
one place that knows the variable names and their defaults. ``shared_root`` and
``cluster_name`` come from the project configuration (``argus.config``), so a YAML file
named by ``ARGUS_CONFIG`` and ``ARGUS_SHARED_ROOT``/``ARGUS_CLUSTER_NAME`` both apply.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Mapping, Sequence

import msgspec

from argus.config import load_config

__all__ = ["NodePoolConfig", "default_ray_bin", "parse_resources_kv"]


# Ray's defaults for two of its doors to code outside a job's confinement (argus.confine.raystart).
RAY_AGENT_LISTEN_PORT = 52365
RAY_CLIENT_PORT = 10001


class NodePoolConfig(msgspec.Struct, kw_only=True):
    """Everything ``argus node head`` and ``argus node worker`` need."""

    cluster_name: str = "argus-ray"
    head_file: str = "/private/ray/discovery/argus-ray/head.json"
    # Head: GCS and dashboard (Ray job server) ports published in head.json.
    ray_port: int = 6379
    dashboard_port: int = 8265
    dashboard_host: str = "0.0.0.0"
    ttl_s: float = 60.0
    refresh_s: float = 10.0
    # Worker: how often the discovery file is read while waiting or running.
    poll_s: float = 5.0
    # Empty: detect (route towards the head for workers, default route for the head).
    node_ip: str = ""
    node_name: str = ""
    worker_resources: dict[str, float] = msgspec.field(
        default_factory=lambda: {"worker_node": 100.0}
    )
    # The GPU model this worker's GPUs are labelled with (Ray's accelerator_type:<model>
    # resource, which Ray sets by itself on real GPUs): for logical GPUs ("": none).
    gpu_type: str = ""
    # None: let Ray detect them (GPUs come from the platform, seed 001 §5.4).
    num_gpus: int | None = None
    num_cpus: int | None = None
    # Extra `ray start` arguments for this node (ports, --temp-dir, --object-store-memory…).
    ray_extra_args: list[str] = msgspec.field(default_factory=list)
    ray_bin: str = "ray"
    # Worker restart backoff after repeated failures: initial * 2**(n-1), capped.
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    # A Ray child that ran at least this long was healthy: its exit resets the backoff.
    stable_s: float = 30.0
    # SIGTERM to the Ray process group, then SIGKILL after this many seconds.
    stop_grace_s: float = 15.0
    # Head: give up (exit non-zero) if the GCS port does not open in time.
    head_start_timeout_s: float = 180.0
    # Where watchdog.log and ray.log go ("" disables file logs; stdout always gets them).
    node_log_dir: str = ""
    # The shared root (users' homes, the control plane's ray/ folder).
    shared_root: str = "/private"
    # v2.sandbox.mode: auto or landlock confine every Ray worker of a job to its user's
    # files (argus.confine.raystart), where the kernel has Landlock; anything else: not.
    confine: str = "auto"

    def confines_workers(self) -> bool:
        """Whether this node's Ray workers start through the confining launcher."""
        from argus.confine import abi_version

        return self.confine in ("auto", "landlock") and (self.confine == "landlock" or abi_version() >= 1)

    def confinement_line(self) -> str:
        """One line for the node's log: whether the jobs' Ray workers here are confined."""
        from argus.confine import confinement_line

        return confinement_line(self.confine)

    def ray_start(self, deny: Sequence[int] = ()) -> list[str]:
        """``ray start`` as this node runs it: through ``argus.confine.raystart`` when its
        workers are confined (same arguments, same output; Ray's own ``ray start`` of this
        interpreter, in-process, not ``ray_bin``), its processes unable to connect to the
        ports ``deny`` (Ray's doors to running code outside a job: ``head_doors``, and the
        worker's in ``worker_argv``)."""
        if not self.confines_workers():
            return [self.ray_bin, "start"]
        denied = [arg for port in sorted(set(deny)) for arg in ("--deny-connect", str(port))]
        return [sys.executable, "-m", "argus.confine.raystart", "--shared-root", self.shared_root,
                "--mode", self.confine, *denied, "--", "start"]

    def agent_listen_port(self) -> int:
        """This node's dashboard agent's HTTP port (its job API), as its extra ``ray start``
        arguments set it, else Ray's default."""
        return self._port_arg("--dashboard-agent-listen-port", RAY_AGENT_LISTEN_PORT)

    def client_port(self) -> int:
        """The Ray client server's port (on the head), as set, else Ray's default."""
        return self._port_arg("--ray-client-server-port", RAY_CLIENT_PORT)

    def _port_arg(self, flag: str, default: int) -> int:
        args = self.ray_extra_args
        for i, arg in enumerate(args):
            if arg.startswith(f"{flag}="):
                return int(arg.split("=", 1)[1])
            if arg == flag and i + 1 < len(args):
                return int(args[i + 1])
        return default

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "NodePoolConfig":
        """Build the settings from ``ARGUS_*`` variables (defaults: seed 003 §3.3)."""
        env = os.environ if environ is None else environ
        base = load_config(environ=env)
        head_file = env.get("ARGUS_HEAD_IP_FILE") or str(base.discovery_file())
        node_name = env.get("ARGUS_NODE_NAME") or socket.gethostname()
        log_dir = env.get("ARGUS_LOG_DIR") or str(base.shared_path / "common" / "logs")
        node_log_dir = env.get(
            "ARGUS_NODE_LOG_DIR",
            str(Path(log_dir) / "nodes" / base.cluster_name / node_name),
        )

        def num(name: str, default: float) -> float:
            raw = env.get(name, "")
            try:
                return float(raw) if raw.strip() else default
            except ValueError as exc:
                raise ValueError(f"{name}={raw!r} is not a number") from exc

        def opt_int(name: str) -> int | None:
            raw = env.get(name, "").strip()
            if not raw:
                return None
            try:
                return int(raw)
            except ValueError as exc:
                raise ValueError(f"{name}={raw!r} is not an integer") from exc

        d = cls()  # the defaults, written once: in the fields above
        return cls(
            cluster_name=base.cluster_name,
            head_file=head_file,
            ray_port=int(num("ARGUS_RAY_PORT", d.ray_port)),
            dashboard_port=int(num("ARGUS_DASHBOARD_PORT", d.dashboard_port)),
            dashboard_host=env.get("ARGUS_DASHBOARD_HOST") or d.dashboard_host,
            ttl_s=num("ARGUS_TTL_S", d.ttl_s),
            refresh_s=num("ARGUS_REFRESH_S", d.refresh_s),
            poll_s=num("ARGUS_POLL_S", d.poll_s),
            node_ip=env.get("ARGUS_NODE_IP", "").strip(),
            node_name=node_name,
            worker_resources=parse_resources_kv(
                env.get("ARGUS_WORKER_RESOURCES_KV", "worker_node=100")
            ),
            gpu_type=env.get("ARGUS_GPU_TYPE", "").strip(),
            num_gpus=opt_int("ARGUS_NUM_GPUS"),
            num_cpus=opt_int("ARGUS_NUM_CPUS"),
            ray_extra_args=shlex.split(env.get("ARGUS_RAY_EXTRA_ARGS", "")),
            ray_bin=env.get("ARGUS_RAY_BIN") or default_ray_bin(),
            backoff_initial_s=num("ARGUS_BACKOFF_INITIAL_S", d.backoff_initial_s),
            backoff_max_s=num("ARGUS_BACKOFF_MAX_S", d.backoff_max_s),
            stable_s=num("ARGUS_STABLE_S", d.stable_s),
            stop_grace_s=num("ARGUS_STOP_GRACE_S", d.stop_grace_s),
            head_start_timeout_s=num("ARGUS_HEAD_START_TIMEOUT_S", d.head_start_timeout_s),
            node_log_dir=node_log_dir,
            shared_root=str(base.shared_path),
            confine=env.get("ARGUS_CONFINE") or base.v2.sandbox.mode,
        )

    def ray_resources(self) -> dict[str, float]:
        """The custom resources a worker starts with: ``worker_resources``, and its GPU model."""
        model = {f"accelerator_type:{self.gpu_type}": 1.0} if self.gpu_type else {}
        return {**self.worker_resources, **model}

    def backoff_s(self, failures: int) -> float:
        """Delay before the next start after ``failures`` consecutive failed runs."""
        if failures <= 0:
            return 0.0
        return min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(failures - 1, 30))


def parse_resources_kv(text: str) -> dict[str, float]:
    """``"worker_node=100,accel=1"`` → ``{"worker_node": 100.0, "accel": 1.0}``."""
    out: dict[str, float] = {}
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"ARGUS_WORKER_RESOURCES_KV item {item!r} is not key=value")
        try:
            out[key.strip()] = float(value)
        except ValueError as exc:
            raise ValueError(
                f"ARGUS_WORKER_RESOURCES_KV: {key.strip()!r} has a non-numeric value {value!r}"
            ) from exc
    return out


def default_ray_bin() -> str:
    """The ``ray`` script of this interpreter's environment, else ``ray`` from PATH.

    Using the script beside ``sys.executable`` keeps the Ray version the watchdog imports
    and the one it starts the same, and skips shims (pyenv) that add start-up latency.
    """
    candidate = Path(sys.executable).parent / "ray"
    return str(candidate) if candidate.is_file() else "ray"
