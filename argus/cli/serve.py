"""``argus serve`` (the API against an existing cluster) and ``argus up`` (everything on
this machine: a Ray head and one worker under the node-pool watchdogs, the API and the
reactor in one process, the WebUI)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import click
import msgspec
import yaml

from argus.guardian import MARKER_ENV, kill_marked
from argus.procs import PortBook, reap_group, signal_group, spawn_group

__all__ = ["serve", "up"]

log = logging.getLogger("argus.up")


def _load(config_path: str | None) -> Any:
    from argus.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def open_event_log_once(config: Any) -> str:
    """Open the event log as the API will, and close it, before anything starts: a log
    that cannot be opened (a copy of a shared log given no URL, a database that does not
    answer, a newer schema) is one line on the console, not a traceback after the banner.
    Returns where the log is, for the banner."""
    from argus.config import redact_url
    from argus.store import StoreError
    from projections import open_store

    url, path = config.v2.postgres.url, config.v2.sqlite.db_path

    async def open_and_close() -> None:
        store = await open_store(path, synchronous=config.v2.sqlite.synchronous, shared_url=url)
        await store.close()

    try:
        asyncio.run(open_and_close())
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except sqlite3.Error as exc:  # the local file (the log, or this host's copy of the shared one)
        raise click.ClickException(f"cannot open the event log's file {path}: {exc}: does its folder exist, "
                                   "and may this user write there?") from None
    except Exception as exc:  # noqa: BLE001 - the driver's own errors: one line, the password hidden
        if not url:
            raise click.ClickException(f"cannot open the event log {path}: {type(exc).__name__}: {exc}") from None
        from argus.store.postgres import describe_open_failure

        raise click.ClickException(describe_open_failure(url, exc)) from None
    return f"PostgreSQL at {redact_url(url)} (this host's copy: {path})" if url else f"SQLite {path}"


def reactor_background(config: Any) -> Any:
    """A background job for create_app: the reactor, until shutdown. Ray is followed, never
    waited for (argus.rayjobs.target.following_gateway)."""

    async def run(state: Any) -> None:
        from argus.rayjobs import AsyncRayGateway
        from argus.rayjobs.target import following_gateway
        from argus.reactor import Reactor

        gateway = AsyncRayGateway(following_gateway(config))
        engine = Reactor(state.store, gateway, config)
        task = asyncio.ensure_future(engine.run())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await engine.stop()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)
            raise
        finally:
            gateway.close()

    return run


# How long an idle client connection is kept open. Longer than a client's own idle limit
# (httpx: 5 s), so that the client, not the server, closes an idle connection: at uvicorn's
# default (5 s too) the server could close one just as the client sent its next request on
# it, and on a busy server, whose timers fire late, that client got "Server disconnected
# without sending a response".
KEEP_ALIVE_S = 30


def _run_uvicorn(app: Any, host: str, port: int, access_log: bool = False) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Ctrl-C: end the open event and log streams first, so that uvicorn does not
            # have to cancel them mid-response (a traceback on every browser left open).
            broadcaster = getattr(app.state, "broadcaster", None)
            if broadcaster is not None:
                broadcaster.close_streams()
            super().handle_exit(sig, frame)

    # No access log by default: a formatted log line per request is a sizeable share of
    # a submission's CPU; the event log already records who did what.
    server = Server(uvicorn.Config(app, host=host, port=port, log_level="info",
                                   timeout_graceful_shutdown=3, lifespan="on", access_log=access_log,
                                   timeout_keep_alive=KEEP_ALIVE_S))
    # uvicorn re-raises Ctrl-C once it has shut down; it is how the user asked to stop, not
    # an error (click would print "Aborted!" and exit 1).
    with contextlib.suppress(KeyboardInterrupt):
        server.run()


@click.command()
@click.option("--config", "config_path", envvar="ARGUS_CONFIG", help="Argus YAML config file.")
@click.option("--host", default=None, help="Listen address (default: v2.api.host).")
@click.option("--port", type=int, default=None, help="Port (default: v2.api.port).")
@click.option("--with-reactor", is_flag=True, help="Also run the reactor in this process.")
@click.option("--access-log", is_flag=True, help="Log every HTTP request (costs CPU per request).")
def serve(config_path: str | None, host: str | None, port: int | None, with_reactor: bool,
          access_log: bool) -> None:
    """Run the API (and WebUI) against an existing Ray cluster and database.

    The bootstrap admin's token is read from the variable named by v2.auth.token_env."""
    from argus.api.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = _load(config_path)
    click.echo(f"event log: {open_event_log_once(config)}", err=True)
    background = [reactor_background(config)] if with_reactor else []
    app = create_app(config, background=background, freeze_gc=True)
    _run_uvicorn(app, host or config.v2.api.host, port or config.v2.api.port, access_log)


def _node_port_args(book: PortBook) -> str:
    """Every port one Ray node listens on, none given to the stack's other node."""
    p = book.ports(6)
    base = book.port_range(100)
    return (f"--node-manager-port={p[0]} --object-manager-port={p[1]} "
            f"--dashboard-agent-grpc-port={p[2]} --dashboard-agent-listen-port={p[3]} "
            f"--metrics-export-port={p[4]} --runtime-env-agent-port={p[5]} "
            f"--min-worker-port={base} --max-worker-port={base + 99}")


_LOG_CHUNK = 1 << 20  # the most of a node's log read per look (every 2 s)
# A watchdog that ran this long was healthy: its exit starts the backoff afresh.
_STABLE_S = 60.0
_BACKOFF_MAX_S = 60.0


def _decision(line: str) -> tuple[str, dict[str, str]]:
    """A watchdog's ``ts level event key=value …`` line as (event, fields); ("", {}) for
    any other line (Ray's own output is in the same log)."""
    try:
        fields = shlex.split(line)
    except ValueError:  # an unbalanced quote: Ray's output, not a decision line
        return "", {}
    if len(fields) < 3:
        return "", {}
    said = dict(kv.split("=", 1) for kv in fields[3:] if "=" in kv)
    return fields[2], {k: v.replace("\\n", " ") for k, v in said.items()}


class Stack:
    """The node-pool watchdog subprocesses of ``argus up``, each in its own process group."""

    def __init__(self, data_dir: Path, config: Any, gpus: int, cpus: int,
                 echo: Callable[[str], None] = log.warning) -> None:
        self.data_dir, self.config, self.gpus, self.cpus = data_dir, config, gpus, cpus
        self.echo = echo  # the console
        self.procs: list[subprocess.Popen[bytes]] = []
        self._log_read: dict[str, int] = {}  # how far _report_node_exits has read each log
        # Unix socket paths are limited to ~107 bytes: keep Ray's temp dir short.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="argus-ray-", dir="/tmp"))
        # Every process of this stack carries it in its environment (see argus.guardian).
        self.marker = secrets.token_hex(8)
        self.guardian: subprocess.Popen[bytes] | None = None

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update({MARKER_ENV: self.marker})
        env.update(ARGUS_SHARED_ROOT=self.config.shared_root, ARGUS_CLUSTER_NAME=self.config.cluster_name,
                   ARGUS_NODE_IP="127.0.0.1", ARGUS_LOG_DIR=str(self.data_dir / "logs"),
                   RAY_USAGE_STATS_ENABLED="0", **extra)
        return env

    def _spawn(self, role: str, env: dict[str, str]) -> "subprocess.Popen[bytes]":
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # die_with_parent: a kill -9 of `argus up` must not leave its Ray nodes behind (the
        # watchdog's own Ray child dies with the watchdog the same way).
        proc = spawn_group([sys.executable, "-m", "argus", "node", role], logs / f"{role}.log",
                           env=env, die_with_parent=True)
        if len(self.procs) < 2:
            self.procs.append(proc)
        return proc

    def start(self) -> None:
        """Start both watchdogs and a supervisor thread that restarts one that exits (the
        watchdogs exit non-zero when their Ray node dies: supervisord's job in the image)."""
        book = PortBook()  # a watchdog restarted by _supervise gets new ports from it too
        ray_port, dash_port, client_port = book.ports(3)
        common = "--disable-usage-stats --object-store-memory=100000000"
        # Each node its own temp dir, as on separate hosts: a node's log monitor tails every
        # log under its temp dir, so two nodes sharing one forwarded each actor line twice.
        head_tmp, worker_tmp = self.temp_dir / "h", self.temp_dir / "w"
        self.roles = {
            "head": lambda: self._env(
                ARGUS_RAY_PORT=str(ray_port), ARGUS_DASHBOARD_PORT=str(dash_port),
                ARGUS_DASHBOARD_HOST="127.0.0.1",
                ARGUS_RAY_EXTRA_ARGS=f"{common} --temp-dir={head_tmp} --ray-client-server-port={client_port} "
                                     f"{_node_port_args(book)}"),
            "worker": lambda: self._env(
                ARGUS_NUM_GPUS=str(self.gpus), ARGUS_NUM_CPUS=str(self.cpus), ARGUS_POLL_S="1",
                ARGUS_WORKER_RESOURCES_KV="worker_node=100",
                ARGUS_RAY_EXTRA_ARGS=f"{common} --temp-dir={worker_tmp} {_node_port_args(book)}"),
        }
        self.guardian = subprocess.Popen(
            [sys.executable, "-m", "argus.guardian", "--parent", str(os.getpid()), "--marker", self.marker,
             "--temp-dir", str(self.temp_dir)],
            start_new_session=True, stdin=subprocess.DEVNULL, env=self._env())
        for role, env in self.roles.items():
            with contextlib.suppress(OSError):  # appended to across runs: only this run's lines
                self._log_read[role] = (self.data_dir / "logs" / f"{role}.log").stat().st_size
            self._spawn(role, env())
        self.stopping = threading.Event()
        threading.Thread(target=self._supervise, name="argus-up-supervisor", daemon=True).start()

    def _supervise(self) -> None:
        # A watchdog that keeps dying soon after its start is started again after a growing
        # pause (as supervisord does in the image), not every 2 s against a busy host.
        started = [time.monotonic()] * len(self.procs)
        quick_exits = [0] * len(self.procs)
        not_before = [0.0] * len(self.procs)
        while not self.stopping.wait(2.0):
            self._report_node_exits()
            for i, (role, env) in enumerate(self.roles.items()):
                proc = self.procs[i]
                now = time.monotonic()
                if proc.poll() is None or self.stopping.is_set():
                    continue
                if not_before[i] == 0.0:
                    quick_exits[i] = quick_exits[i] + 1 if now - started[i] < _STABLE_S else 1
                    not_before[i] = now + min(_BACKOFF_MAX_S, 2.0 ** (quick_exits[i] - 1))
                    log.warning("%s watchdog exited (rc=%s); restarting it in %.0f s", role,
                                proc.returncode, not_before[i] - now)
                if now >= not_before[i]:
                    signal_group(proc, signal.SIGKILL)  # leftovers of its group
                    self.procs[i] = self._spawn(role, env())
                    started[i], not_before[i] = now, 0.0

    def _report_node_exits(self) -> None:
        """Say on the console when a Ray node exited. Each watchdog restarts its node by
        itself, so nothing else would: a worker once crashed in a loop (a port clash)
        behind a console that still said "cluster ready"."""
        for role in self.roles:
            path = self.data_dir / "logs" / f"{role}.log"
            try:
                with open(path, "rb") as f:
                    f.seek(self._log_read.get(role, 0))
                    chunk = f.read(_LOG_CHUNK)  # bounded: a Ray node can print a lot at once
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            self._log_read[role] = self._log_read.get(role, 0) + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                event, said = _decision(line)
                if event == "ray_exited":
                    cause = f": {said['cause']}" if said.get("cause") else ""
                    self.echo(f"{role}: its Ray node exited (rc={said.get('rc', '?')} after "
                              f"{said.get('ran_s', '?')} s){cause}; it is being restarted. "
                              f"Details: {path}")
                elif event == "head_start_timeout":
                    self.echo(f"{role}: its Ray node did not come up in {said.get('waited_s', '?')} s"
                              f": {said.get('cause', '?')}; it is being restarted. Details: {path}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM each watchdog's group (they stop their Ray child), then SIGKILL."""
        self.stopping.set()
        # All are signalled first and share one deadline: they stop in parallel.
        for proc in reversed(self.procs):  # worker first, then head
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            reap_group(proc, max(0.1, deadline - time.monotonic()))
        kill_marked(self.marker, str(self.temp_dir))  # Ray's agents outlive their raylet
        if self.guardian is not None:
            self.guardian.terminate()
            self.guardian.wait(5)
        import shutil

        shutil.rmtree(self.temp_dir, ignore_errors=True)


def report_progress(config: Any, stopping: "threading.Event", echo: Callable[[str], None],
                    since: float | None = None) -> None:
    """Tell the console what a newcomer waits for: the head up, the worker joined (seen by
    the reactor in the cluster projection), the cluster ready. Polls; says each once.

    Only what happened since this start (``since``, default now) counts: a restarted
    stack finds the last run's discovery file and the last run's nodes in its log, and
    saying "cluster ready" from them, before this run's head is even up, would be a lie."""
    import sqlite3

    from argus.nodepool.discovery import read_head_record

    since = time.time() if since is None else since
    said: set[str] = set()

    def say(key: str, text: str) -> None:
        if key not in said:
            said.add(key)
            echo(text)

    say("start", "starting the Ray head and worker (the worker joins in 10-30 s) ...")
    while not stopping.wait(1.0):
        head = read_head_record(config.discovery_file(), cluster_name=config.cluster_name)
        record = head.record
        # The record's times are whole seconds: a start in this second counts.
        if (head.reason == "ok" and record is not None
                and (record.started_at or record.updated_at).timestamp() > since - 1):
            say("head", f"Ray head up at {record.gcs_address} "
                        f"(dashboard http://{record.head_ip}:{record.dashboard_port})")
        if "head" not in said:
            continue
        from argus.store import open_read_only
        from projections.cluster import read_cluster

        try:
            if not Path(config.v2.sqlite.db_path).is_file():
                continue
            # Polled each second while the server writes it: no copy, a short lock wait.
            with open_read_only(Path(config.v2.sqlite.db_path), copy_fallback=False, timeout=1.0) as (db, _):
                seen = read_cluster(db)
        except (sqlite3.Error, OSError):
            continue
        nodes = list(seen.nodes) if seen is not None and seen.reachable and seen.observed_at >= since else []
        if nodes:
            gpus, cpus = sum(n.total_gpus for n in nodes), sum(n.total_cpus for n in nodes)
            # Say plainly how much can run at once: CPUs, not GPUs, may be the limit.
            at_once = int(min(gpus, cpus // (CPUS_PER_LOCAL_GPU + TRANSFER_QUEUE_CPUS)))
            say("ready", f"worker joined: {len(nodes)} node(s), {gpus:g} GPUs, {cpus:g} CPUs "
                         f"(up to {at_once} one-GPU PPO/GRPO tasks at once); "
                         "cluster ready: submitted tasks will run")
            return


# Where `argus up` keeps its database, shared files, logs, token and effective config by
# default; `argus replay` and `argus config show` look there when run beside it.
UP_DATA_DIR = Path(".argus")

# A 1-GPU PPO/GRPO task takes verl's bundle (1 GPU + 3 CPUs), its TaskRunner (1 CPU) and
# the job's driver (entrypoint_num_cpus, 1): 5 logical CPUs per GPU keep every GPU usable.
CPUS_PER_LOCAL_GPU = 5
# verl >= 0.9 also starts, for each PPO/GRPO run, a TransferQueue: 8 storage actors and a
# controller, 1 CPU each, outside its placement groups (tests/verl saw them). Without room
# for them the run waits for ever, so the local worker has it for one run per GPU.
TRANSFER_QUEUE_CPUS = 9


def local_worker_cpus(gpus: int) -> int:
    """The logical CPUs of ``argus up``'s worker: every GPU usable by a verl run."""
    return max(8, (CPUS_PER_LOCAL_GPU + TRANSFER_QUEUE_CPUS) * gpus)


def admin_token_for(data_dir: Path, env_name: str) -> tuple[str, Path | None]:
    """The bootstrap admin token: ``$<env_name>``, else ``<data-dir>/admin.token`` (created
    with mode 0600 on first use)."""
    if os.environ.get(env_name):
        return os.environ[env_name], None
    path = data_dir / "admin.token"
    if path.exists():
        return path.read_text().strip(), path
    from argus.service import new_token

    token = new_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, path


@click.command()
@click.option("--config", "config_path", envvar="ARGUS_CONFIG", help="Argus YAML config file.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=UP_DATA_DIR,
              show_default=True, help="Database, shared files, logs and the admin token.")
@click.option("--gpus", type=int, default=2, show_default=True, help="Logical GPUs of the worker.")
@click.option("--cpus", type=int, default=None,
              help="Logical CPUs of the worker (default: 14 per GPU, at least 8, so that every "
                   "GPU can run a 1-GPU PPO/GRPO task at once: verl puts 3 CPUs in each GPU "
                   "bundle, plus 1 for its TaskRunner, 1 for the job's driver and 9 for "
                   "verl >= 0.9's TransferQueue).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=None, help="API port (default: v2.api.port).")
def up(config_path: str | None, data_dir: Path, gpus: int, cpus: int | None, host: str,
       port: int | None) -> None:
    """Run the whole stack on this machine until Ctrl-C: Ray head + one worker, the API,
    the reactor and the WebUI."""
    from argus.api.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    config = _load(config_path)
    config = msgspec.structs.replace(config, shared_root=str(data_dir / "shared"), address="auto")
    config.v2.sqlite.db_path = str(data_dir / "argus.sqlite3")
    if config.v2.taskspec.python == "python3":  # the default: jobs use Argus's own Python
        config.v2.taskspec.python = sys.executable
    port = port or config.v2.api.port
    config.v2.api.host, config.v2.api.port = host, port
    token, token_file = admin_token_for(data_dir, config.v2.auth.token_env)
    (data_dir / "shared" / "datasets").mkdir(parents=True, exist_ok=True)
    (data_dir / "shared" / "hf").mkdir(parents=True, exist_ok=True)
    log_at = open_event_log_once(config)
    stack = Stack(data_dir, config, gpus, cpus if cpus is not None else local_worker_cpus(gpus),
                  echo=lambda text: click.echo(text, err=True))
    sched = config.v2.scheduler
    if sched.assumed_nodes == 0:  # judge gangs at submit before the worker has joined
        sched.assumed_nodes, sched.assumed_node_gpus, sched.assumed_node_cpus = 1, gpus, stack.cpus
    # What this stack runs with, for `argus config show` and for `argus serve|reactor
    # --config` pointed at the same data (rewritten each start: it is an output, not input).
    # 0600: it holds the event log's URL, password included (an older file may be 0644).
    fd = os.open(data_dir / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as effective:
        effective.write("# written by `argus up` at start: the configuration it runs with\n"
                        + yaml.safe_dump(msgspec.to_builtins(config), sort_keys=False))

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    # uvicorn shuts down on SIGTERM, then re-raises it with the handler it found: this one,
    # so that the finally below still stops the Ray nodes.
    signal.signal(signal.SIGTERM, on_term)
    started = time.time()  # the console reports only what this start brings
    stack.start()
    try:
        app = create_app(config, admin_token=token, background=[reactor_background(config)],
                         freeze_gc=True)
        where = f"saved in {token_file}" if token_file else f"from ${config.v2.auth.token_env}"
        click.echo(f"\nArgus is up: http://{host}:{port}/  (API http://{host}:{port}/api/v2)\n"
                   f"admin token ({where}):\n  {token}\n"
                   f"  export ARGUS_URL=http://{host}:{port} ARGUS_TOKEN={token}\n"
                   f"data: {data_dir}   logs: {data_dir / 'logs'}   Ctrl-C stops everything.\n"
                   f"event log: {log_at}\n",
                   err=True)
        progress = threading.Thread(target=report_progress, name="argus-up-progress", daemon=True,
                                    args=(config, stack.stopping, lambda t: click.echo(t, err=True), started))
        progress.start()
        _run_uvicorn(app, host, port)
    finally:
        click.echo("stopping the Ray nodes (Ray takes up to 20 s) ...", err=True)
        stopping_since = time.monotonic()
        stack.stop()
        click.echo(f"stopped: this stack's Ray nodes and their processes are gone "
                   f"({time.monotonic() - stopping_since:.0f} s)", err=True)
