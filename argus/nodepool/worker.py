"""``argus node worker``: join the head named by head.json and stay joined.

Decisions, each logged on one line:
- no usable record (missing, garbage, expired, other cluster) → wait and poll;
- fresh record and no Ray child → ``ray start --address=… --block``;
- Ray child exits → restart, after a capped exponential backoff when runs keep failing;
- record names another head (address or ``head_id``) → stop the child, start again now;
- our head withdrew its record (its Ray died or it was stopped) → stop the child and wait.
A record that merely goes stale while Ray runs does not stop Ray: the head may only be slow
to refresh, and a dead head makes the raylet exit by itself (after Ray's GCS reconnect
timeout), which the watchdog then sees. Stopping at once on a withdrawal frees the worker
for the next head sooner, and on a single host it also clears the raylet whose
``--gcs-address`` would make the new head's ``ray start`` refuse ("already running").
"""

from __future__ import annotations

import json
import time

from argus.confine.desk import ClaimDesk
from argus.confine.registry import registry_dir
from argus.nodepool.config import RAY_AGENT_LISTEN_PORT, RAY_CLIENT_PORT, NodePoolConfig
from argus.nodepool.discovery import HeadRecord, read_head_record
from argus.nodepool.keeper import CHECK_S, NodeKeeper, raylet_node_id
from argus.nodepool.logline import DecisionLog
from argus.nodepool.process import RayChild, StopFlag, detect_node_ip
from argus.nodepool.startup import describe_limits, explain_ray_exit, ray_child_env

__all__ = ["WorkerWatchdog", "worker_argv"]

# How often a running child is checked for exit (the record is read every poll_s).
_TICK_S = 0.5
# Grace when the head is gone or replaced: `ray start`'s SIGTERM handler first asks the
# GCS to drain the node, which can only time out against a dead GCS (up to 30 s).
_HEAD_GONE_GRACE_S = 2.0


def worker_argv(cfg: NodePoolConfig, record: HeadRecord, node_ip: str) -> list[str]:
    """The ``ray start --address`` command line; extra args last so they can override."""
    # Jobs here must not reach Ray's doors to unconfined code: the head's, and this node's
    # own dashboard agent (argus.confine.raystart).
    doors = [record.dashboard_port, record.agent_listen_port or RAY_AGENT_LISTEN_PORT,
             record.client_port or RAY_CLIENT_PORT, cfg.agent_listen_port()]
    argv = [
        *cfg.ray_start(deny=doors),
        f"--address={record.gcs_address}",
        f"--node-ip-address={node_ip}",
        f"--resources={json.dumps(cfg.ray_resources(), separators=(',', ':'))}",
    ]
    if cfg.num_gpus is not None:
        argv.append(f"--num-gpus={cfg.num_gpus}")
    if cfg.num_cpus is not None:
        argv.append(f"--num-cpus={cfg.num_cpus}")
    argv.append("--block")
    argv.extend(cfg.ray_extra_args)
    return argv


class WorkerWatchdog:
    """The worker's control loop; ``run`` returns only on a stop request."""

    def __init__(self, cfg: NodePoolConfig, log: DecisionLog | None = None,
                 stop: StopFlag | None = None) -> None:
        self.cfg = cfg
        self.log = log or DecisionLog("worker", cfg.node_log_dir)
        self.stop = stop or StopFlag()
        self.child: RayChild | None = None
        self.attached: HeadRecord | None = None  # the record the child was started for
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which no start is attempted
        self._wait_reason = ""
        self._ray_log = self.log.open_aux("ray.log")
        # This host's claim desk (argus.confine.desk), while Ray runs here for a head, on a
        # node that confines its workers: one GCS client claims every job's Ray job, so
        # that no job driver imports Ray to do it.
        self.desk: ClaimDesk | None = None
        # This node's hygiene (argus.nodepool.keeper), once its raylet says its node id.
        self.keeper: NodeKeeper | None = None
        self._kept_at = 0.0

    def run(self) -> int:
        cfg = self.cfg
        self.log.info("worker_start", record=cfg.head_file, poll_s=cfg.poll_s,
                      confinement=cfg.confinement_line(),
                      resources=json.dumps(cfg.ray_resources(), separators=(",", ":")),
                      num_gpus=cfg.num_gpus, num_cpus=cfg.num_cpus)
        next_read = 0.0
        result = None
        while not self.stop.is_set():
            if self.child is not None and self.child.poll() is not None:
                self._child_exited()
                next_read = 0.0  # decide on the current record, not a 5 s old one
            now = time.monotonic()
            if now >= next_read:
                result = read_head_record(cfg.head_file, cluster_name=cfg.cluster_name)
                next_read = now + cfg.poll_s
                if self.child is not None:
                    self._check_head(result.record, result.usable)
            if self.child is not None and (self.keeper.due() if self.keeper is not None
                                           else now - self._kept_at >= CHECK_S):
                self._keep(now)
            if self.child is None and result is not None and now >= self.not_before:
                if result.usable and result.record is not None:
                    self._start(result.record)
                    # Read again after a full poll; a fresh start needs no re-check sooner.
                else:
                    self._waiting(result.reason, result.detail)
            self.stop.sleep(_TICK_S)
        return self._shutdown()

    def _keep(self, now: float) -> None:
        """Report what of ended attempts still runs here (the reactor quarantines on it)."""
        assert self.child is not None
        self._kept_at = now
        if self.keeper is None:
            node_id = raylet_node_id(self.child.pid)
            if node_id is None:
                return  # the raylet is not up yet
            self.keeper = NodeKeeper(self.cfg.shared_root, node_id)
            self.log.info("keeper_start", node_id=node_id)
        try:
            report = self.keeper.check()
        except OSError as exc:
            self.log.warning("keeper_error", error=str(exc))
            return
        if report is not None and report.leftovers:
            self.log.warning("leftovers", node_id=report.node_id,
                             pids=",".join(str(p.pid) for p in report.leftovers))

    def _waiting(self, reason: str, detail: str) -> None:
        # One line per change of reason, not one per poll: the decision is the same.
        if reason != self._wait_reason:
            self._wait_reason = reason
            self.log.info("wait_for_head", reason=reason, detail=detail or None,
                          path=self.cfg.head_file)

    def _start(self, record: HeadRecord) -> None:
        node_ip = detect_node_ip(self.cfg.node_ip, towards=record.head_ip)
        argv = worker_argv(self.cfg, record, node_ip)
        self._wait_reason = ""
        env = ray_child_env()
        try:
            self.child = RayChild(argv, tee=self._ray_log, env=env)
        except OSError as exc:
            self._failed(f"spawn_error: {exc}")
            return
        self.attached = record
        self.log.info("ray_start", pid=self.child.pid, head=record.gcs_address,
                      head_id=record.head_id, node_ip=node_ip, attempt=self.failures + 1,
                      argv=" ".join(argv), limits=describe_limits(env))
        self._open_desk(record)

    def _open_desk(self, record: HeadRecord) -> None:
        self._close_desk()
        if not self.cfg.confines_workers():
            return
        self.desk = ClaimDesk(registry=registry_dir(self.cfg.shared_root), gcs_address=record.gcs_address,
                              on_line=lambda line: self.log.info("claims", said=line))
        self.desk.start()

    def _close_desk(self) -> None:
        if self.desk is not None:
            self.desk.stop()
            self.desk = None

    def _child_exited(self) -> None:
        assert self.child is not None
        child = self.child
        rc = child.poll()
        ran_s = child.runtime_s
        self._close_desk()
        # Reap stragglers of the group (an agent that outlived the raylet holds ports).
        child.stop(0)
        self.child = None
        self.keeper = None  # a new raylet is a new node
        if ran_s >= self.cfg.stable_s:
            self.failures = 0  # it ran fine for a while: this is a fresh failure
        cause = explain_ray_exit(child.argv, child.last_lines, rc, ran_s)
        self.log.warning("ray_exited", rc=rc, ran_s=round(ran_s, 1), cause=cause)
        self._failed(f"rc={rc}")

    def _failed(self, why: str) -> None:
        self.failures += 1
        delay = self.cfg.backoff_s(self.failures)
        self.not_before = time.monotonic() + delay
        self.log.info("restart_scheduled", after_s=round(delay, 1), failures=self.failures,
                      cause=why)

    def _check_head(self, record: HeadRecord | None, usable: bool) -> None:
        assert self.child is not None and self.attached is not None
        if record is None:
            return
        same = record.identity() == self.attached.identity()
        if same and record.withdrawn:
            self.log.info("head_withdrawn", head=record.gcs_address, head_id=record.head_id,
                          action="stop_ray_and_wait")
            self._close_desk()
            rc = self.child.stop(min(_HEAD_GONE_GRACE_S, self.cfg.stop_grace_s))
            self.log.info("ray_stopped", rc=rc, reason="head_withdrawn")
            self.child = None
            self.keeper = None  # a new raylet is a new node
            self.failures = 0
            self.not_before = 0.0
            return
        if same or not usable:
            return
        fresh = record
        self.log.info("head_changed", old=self.attached.gcs_address,
                      old_head_id=self.attached.head_id, new=fresh.gcs_address,
                      new_head_id=fresh.head_id, action="restart_ray")
        rc = self.child.stop(min(_HEAD_GONE_GRACE_S, self.cfg.stop_grace_s))
        self.log.info("ray_stopped", rc=rc, reason="head_changed")
        self.child = None
        self.keeper = None  # a new raylet is a new node
        # A move of the head is not a failure of this node: reconnect without backoff.
        self.failures = 0
        self.not_before = 0.0
        self._start(fresh)

    def _shutdown(self) -> int:
        self.log.info("stop_requested", signal=self.stop.signum,
                      pid=self.child.pid if self.child else None)
        self._close_desk()
        if self.child is not None:
            rc = self.child.stop(self.cfg.stop_grace_s)
            self.log.info("ray_stopped", rc=rc, reason="stop_requested")
            self.child = None
            self.keeper = None  # a new raylet is a new node
        return 0
