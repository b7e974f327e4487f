"""``argus node head``: Ray head under a watchdog, plus the head.json publisher.

One process does both (seed 003 §3.2 allows it): the record is published only while this
process sees its own Ray head alive, so a stale head can never keep refreshing it. When
Ray exits, the record is expired (if still ours) and the command exits non-zero, for
supervisord to start it again; the new start publishes a new ``head_id``, which is what
tells the workers to reconnect.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone

from argus.confine.claims import ClaimWatcher, claim_dashboard_job
from argus.confine.registry import registry_dir
from argus.nodepool.config import NodePoolConfig
from argus.nodepool.discovery import expire_head_record, make_head_record, write_head_record
from argus.nodepool.logline import DecisionLog
from argus.nodepool.process import RayChild, StopFlag, detect_node_ip, port_open
from argus.nodepool.startup import describe_limits, explain_ray_exit, ray_child_env

__all__ = ["HeadWatchdog", "head_argv"]

# Granularity of the main loop: how quickly a Ray exit or a stop request is noticed.
_TICK_S = 0.5


def head_doors(cfg: NodePoolConfig) -> list[int]:
    """The head's ports through which Ray runs code outside any job's confinement: the
    dashboard (its job API), its dashboard agent's job API, the Ray client server."""
    return [cfg.dashboard_port, cfg.agent_listen_port(), cfg.client_port()]


def head_argv(cfg: NodePoolConfig, node_ip: str) -> list[str]:
    """The ``ray start --head`` command line; extra args come last so they can override."""
    return [
        *cfg.ray_start(deny=head_doors(cfg)), "--head",
        f"--node-ip-address={node_ip}",
        f"--port={cfg.ray_port}",
        "--include-dashboard=true",
        f"--dashboard-host={cfg.dashboard_host}",
        f"--dashboard-port={cfg.dashboard_port}",
        # Training must never land on the head (seed 001 §5.4).
        "--num-gpus=0", "--num-cpus=0",
        "--block",
        *cfg.ray_extra_args,
    ]


class HeadWatchdog:
    """Runs the Ray head and publishes the discovery record while it is alive."""

    def __init__(self, cfg: NodePoolConfig, log: DecisionLog | None = None,
                 stop: StopFlag | None = None) -> None:
        self.cfg = cfg
        self.log = log or DecisionLog("head", cfg.node_log_dir)
        self.stop = stop or StopFlag()
        self.head_id = secrets.token_hex(8)
        # Claims Ray's own dashboard job, whose workers must stay unconfined (argus.confine).
        self.claims: ClaimWatcher | None = None
        self.started_at = datetime.now(timezone.utc).replace(microsecond=0)

    def run(self) -> int:
        """Block until a stop is requested (returns 0) or Ray exits after it was published
        (returns non-zero, for the supervisor to start this watchdog again: the new start
        publishes a new ``head_id``). A Ray that fails before it was ever published is
        started again here, after a backoff: nobody was told of it, so nothing moves."""
        node_ip = detect_node_ip(self.cfg.node_ip)
        failures = 0
        while True:
            rc = self._run_ray(node_ip, attempt=failures + 1)
            if rc is not None:
                return rc
            failures += 1
            delay = self.cfg.backoff_s(failures)
            self.log.info("restart_scheduled", after_s=round(delay, 1), failures=failures)
            if self.stop.sleep(delay):
                self.log.info("stop_requested", signal=self.stop.signum, pid=None)
                return 0

    def _run_ray(self, node_ip: str, attempt: int) -> int | None:
        """One ``ray start --head``: the watchdog's exit code, or None if it failed to
        start (exited, or no GCS within head_start_timeout_s, before being published)."""
        cfg = self.cfg
        argv = head_argv(cfg, node_ip)
        env = ray_child_env()
        self.log.info("head_start", head_id=self.head_id, node_ip=node_ip,
                      gcs_port=cfg.ray_port, dashboard_port=cfg.dashboard_port,
                      record=cfg.head_file, attempt=attempt, argv=" ".join(argv),
                      limits=describe_limits(env))
        child = RayChild(argv, tee=self.log.open_aux("ray.log"), env=env)
        self.log.info("ray_spawned", pid=child.pid, confinement=cfg.confinement_line())
        try:
            return self._watch_ray(child, node_ip, argv)
        finally:
            if self.claims is not None:
                self.claims.stop()
                self.claims = None

    def _watch_ray(self, child: RayChild, node_ip: str, argv: list[str]) -> int | None:
        cfg = self.cfg
        started = time.monotonic()
        next_publish = 0.0
        published = False
        unreachable = False
        while True:
            rc = child.poll()
            if rc is not None:
                ran_s = child.runtime_s
                # Sweep what is left of the group so the restarted head finds its ports free.
                child.stop(0)
                return self._ray_exited(child, rc, ran_s, published)
            if self.stop.is_set():
                return self._shutdown(child, published)
            now = time.monotonic()
            if now >= next_publish:
                if self._head_up(child, node_ip):
                    if unreachable:
                        self.log.info("head_reachable", action="resume_publishing")
                    unreachable = False
                    if not published and self.claims is None and cfg.confines_workers():
                        self.claims = self._claim_system_jobs(child, node_ip)
                    published = self._publish(node_ip, first=not published) or published
                    next_publish = now + cfg.refresh_s
                elif not published and now - started > cfg.head_start_timeout_s:
                    self.log.error("head_start_timeout", waited_s=round(now - started, 1),
                                   cause=explain_ray_exit(argv, child.last_lines, None,
                                                          now - started))
                    child.stop(cfg.stop_grace_s)
                    return None
                else:
                    # Not up yet (or a hiccup): check again soon, not after refresh_s.
                    next_publish = now + 1.0
                    if published and not unreachable:
                        self.log.warning("head_unreachable", gcs_port=cfg.ray_port,
                                         action="pause_publishing")
                    unreachable = published
            self.stop.sleep(_TICK_S)

    def _claim_system_jobs(self, child: RayChild, node_ip: str) -> ClaimWatcher:
        """Claim the dashboard's job as Ray's own (argus.confine.claims.claim_dashboard_job)."""
        return claim_dashboard_job(registry_dir(self.cfg.shared_root), f"{node_ip}:{self.cfg.ray_port}",
                                   ray_pid=child.pid,
                                   on_error=lambda line: self.log.warning("claims", error=line))

    def _head_up(self, child: RayChild, node_ip: str) -> bool:
        """Ready to be announced: ``ray start`` said so (its head raylet is registered, so
        joining workers find the head's node info), and the GCS port answers. Publishing
        on the open GCS port alone sends workers into Ray's start-up timeout."""
        if not child.ready.is_set():
            # Fallback if a Ray version rewords its banner: both ports listening.
            if not port_open("127.0.0.1", self.cfg.dashboard_port):
                return False
        # Ray binds the GCS on all interfaces; loopback covers an advertised NAT address.
        return port_open(node_ip, self.cfg.ray_port) or port_open("127.0.0.1", self.cfg.ray_port)

    def _publish(self, node_ip: str, first: bool) -> bool:
        cfg = self.cfg
        record = make_head_record(
            cluster_name=cfg.cluster_name, head_ip=node_ip, gcs_port=cfg.ray_port,
            dashboard_port=cfg.dashboard_port, ttl_s=cfg.ttl_s, head_id=self.head_id,
            started_at=self.started_at, node_name=cfg.node_name,
            agent_listen_port=cfg.agent_listen_port(), client_port=cfg.client_port(),
        )
        try:
            write_head_record(cfg.head_file, record)
        except OSError as exc:
            # Keep the head running: a shared-storage hiccup must not take the cluster down.
            self.log.error("publish_failed", path=cfg.head_file, error=exc)
            return False
        if first:
            self.log.info("head_published", head_id=self.head_id, gcs=record.gcs_address,
                          job_server_url=record.job_server_url, ttl_s=cfg.ttl_s,
                          refresh_s=cfg.refresh_s, path=cfg.head_file)
        return True

    def _expire(self) -> None:
        try:
            if expire_head_record(self.cfg.head_file, self.head_id):
                self.log.info("head_record_expired", head_id=self.head_id)
        except OSError as exc:
            self.log.error("expire_failed", path=self.cfg.head_file, error=exc)

    def _ray_exited(self, child: RayChild, rc: int, ran_s: float, published: bool) -> int | None:
        cause = explain_ray_exit(child.argv, child.last_lines, rc, ran_s)
        if not published:
            self.log.error("ray_exited", rc=rc, ran_s=round(ran_s, 1), cause=cause,
                           action="start_again")
            return None
        self.log.error("ray_exited", rc=rc, ran_s=round(ran_s, 1), cause=cause,
                       action="exit_for_restart")
        self._expire()
        # Exit non-zero even if Ray said 0: a head that stops by itself is a failure.
        return rc if rc > 0 else 1

    def _shutdown(self, child: RayChild, published: bool) -> int:
        self.log.info("stop_requested", signal=self.stop.signum, pid=child.pid)
        if published:
            self._expire()
        rc = child.stop(self.cfg.stop_grace_s)
        self.log.info("ray_stopped", rc=rc)
        return 0
