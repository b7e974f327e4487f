"""``argus serve`` (the API against an existing cluster) and ``argus up`` (everything on
this machine: a Ray head and one worker under the node-pool watchdogs, the API and the
reactor in one process, the WebUI)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
import msgspec
import yaml

from argus import layout
from argus.cli.stack import Stack
from argus.sftp import SftpDoor, sftp_background
from argus.confine import confinement_line

if TYPE_CHECKING:
    from argus.config import ArgusConfig

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
    from argus.store import LogDamaged
    from projections import open_store

    url, path = config.v2.postgres.url, config.v2.sqlite.db_path

    async def open_and_close() -> None:
        store = await open_store(path, synchronous=config.v2.sqlite.synchronous, shared_url=url,
                                 on_damage=config.v2.sqlite.on_damage)
        if store.damage is not None:  # the admin chose to serve a damaged log's reads
            click.echo(f"WARNING: serving reads only, no writes and no reactor: {LogDamaged(path, store.damage)}",
                       err=True)
        await store.close()

    try:
        asyncio.run(open_and_close())
    except Exception as exc:  # noqa: BLE001 - a full disk first: whatever SQLite called it
        from argus.store.space import full_disk_note

        note = full_disk_note(path)
        if note:
            raise click.ClickException(f"cannot open the event log {path}: {note}") from None
        _say_open_failure(exc, path, url)
    return f"PostgreSQL at {redact_url(url)} (this host's copy: {path})" if url else f"SQLite {path}"


def _say_open_failure(exc: Exception, path: str, url: str) -> None:
    """Raise the one line that says why the event log at ``path`` (``url``) did not open."""
    from argus.store import StoreError

    if isinstance(exc, StoreError):
        raise click.ClickException(str(exc)) from None
    if isinstance(exc, sqlite3.Error):  # the local file (the log, or this host's copy of the shared one)
        raise click.ClickException(f"cannot open the event log's file {path}: {exc}: does its folder exist, "
                                   "and may this user write there?") from None
    if not url:  # the driver's own errors: one line, the password hidden
        raise click.ClickException(f"cannot open the event log {path}: {type(exc).__name__}: {exc}") from None
    from argus.store.postgres import describe_open_failure

    raise click.ClickException(describe_open_failure(url, exc)) from None


def say_what_stops(config: Any, echo: Callable[[str], None]) -> None:
    """Before the Ray nodes go: record the running tasks as interrupted by the operator
    (they resume first, from their checkpoints, at the next start) and say which."""
    from argus.service.interrupt import interrupt_running
    from projections import open_store

    async def interrupt() -> list[Any]:
        store = await open_store(config.v2.sqlite.db_path, synchronous=config.v2.sqlite.synchronous,
                                 shared_url=config.v2.postgres.url)
        try:
            return await interrupt_running(store, "operator", "argus up was stopped")
        finally:
            await store.close()

    try:
        stopped = asyncio.run(interrupt())
    except Exception as exc:  # noqa: BLE001 - the log is away: stopping still goes on
        echo(f"could not record which tasks this stop interrupts ({type(exc).__name__}: {exc}); "
             "they will be found lost, and retried, at the next start")
        return
    if not stopped:
        return
    echo(f"stopping {len(stopped)} running task(s); they resume first, from their last checkpoints, "
         "at the next `argus up`:")
    for task in stopped:
        attempt = task.attempts[-1]
        where = f"checkpoint of step {attempt.checkpoint_step}" if attempt.checkpoint_step is not None \
            else "no checkpoint yet: it starts over"
        at = f" at step {attempt.step}" if attempt.step is not None else ""
        echo(f"  {task.task_id} ({task.user}){at}: {where}")


def reactor_background(config: Any) -> Any:
    """A background job for create_app: the reactor, until shutdown. Ray is followed, never
    waited for (argus.rayjobs.target.following_gateway)."""

    async def run(state: Any) -> None:
        from argus.rayjobs import AsyncRayGateway
        from argus.rayjobs.target import following_gateway
        from argus.reactor import Reactor

        if getattr(state.store, "damage", None) is not None:
            log.error("the reactor does not run: the event log is damaged and served for reads only")
            return
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


def _announce_sftp(host: str) -> Callable[[SftpDoor], None]:
    """Say on the console where the SFTP door listens (or that it did not start)."""

    def say(door: SftpDoor) -> None:
        if not door.port:
            click.echo("SFTP: did not start (see the log line above)", err=True)
            return
        click.echo(f"SFTP: sftp -P {door.port} <user>@{host}   (host key {door.host_key_fingerprint}; "
                   "add your key first: argus keys add ~/.ssh/id_ed25519.pub)", err=True)

    return say


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
    if config.v2.sftp.port:
        background.append(sftp_background(config, announce=_announce_sftp(config.v2.sftp.host or host
                                                                           or config.v2.api.host)))
    app = create_app(config, background=background, freeze_gc=True)
    _run_uvicorn(app, host or config.v2.api.host, port or config.v2.api.port, access_log)


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
            models = sorted({n.gpu_type for n in nodes if n.gpu_type})
            labelled = f" ({', '.join(models)})" if models else ""
            say("ready", f"worker joined: {len(nodes)} node(s), {gpus:g} GPUs{labelled}, {cpus:g} CPUs "
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
@click.option("--gpu-type", default="", metavar="MODEL",
              help="Label the worker's logical GPUs with a GPU model (Ray's accelerator_type:MODEL), "
                   "for specs that name one (gpu_type).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=None, help="API port (default: v2.api.port).")
@click.option("--sftp-port", type=int, default=None,
              help="SFTP port (default: v2.sftp.port, else 2222; 0: any free port; -1: no SFTP).")
def up(config_path: str | None, data_dir: Path, gpus: int, cpus: int | None, gpu_type: str, host: str,
       port: int | None, sftp_port: int | None) -> None:
    """Run the whole stack on this machine until Ctrl-C: Ray head + one worker, the API,
    the reactor and the WebUI."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    config = _up_config(config_path, data_dir, host, port)
    port = config.v2.api.port
    token, token_file = admin_token_for(data_dir, config.v2.auth.token_env)
    for folder in layout.COMMON_AREAS.values():
        (data_dir / "shared" / folder).mkdir(parents=True, exist_ok=True)
    log_at = open_event_log_once(config)
    if gpu_type and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}", gpu_type):
        raise click.BadParameter(f"{gpu_type!r}: letters, digits, '.', '_' and '-' (e.g. H100)",
                                 param_hint="--gpu-type")
    stack = Stack(data_dir, config, gpus, cpus if cpus is not None else local_worker_cpus(gpus),
                  echo=lambda text: click.echo(text, err=True), gpu_type=gpu_type)
    sched = config.v2.scheduler
    if sched.assumed_nodes == 0:  # judge gangs at submit before the worker has joined
        sched.assumed_nodes, sched.assumed_node_gpus, sched.assumed_node_cpus = 1, gpus, stack.cpus
        sched.assumed_node_gpu_type = gpu_type
    _write_effective_config(data_dir, config)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    # uvicorn shuts down on SIGTERM, then re-raises it with the handler it found: this one,
    # so that the finally below still stops the Ray nodes.
    signal.signal(signal.SIGTERM, on_term)
    started = time.time()  # the console reports only what this start brings
    stack.start()
    try:
        sftp_port = sftp_port if sftp_port is not None else (config.v2.sftp.port or 2222)
        _serve_up(config, stack, started, host, sftp_port, token,
                  f"saved in {token_file}" if token_file else f"from ${config.v2.auth.token_env}",
                  f"data: {data_dir}   logs: {data_dir / 'logs'}   Ctrl-C stops everything.\n"
                  f"event log: {log_at}\n")
    finally:
        say_what_stops(config, lambda text: click.echo(text, err=True))
        click.echo("stopping the Ray nodes (Ray takes up to 20 s) ...", err=True)
        stopping_since = time.monotonic()
        stack.stop()
        click.echo(f"stopped: this stack's Ray nodes and their processes are gone "
                   f"({time.monotonic() - stopping_since:.0f} s)", err=True)


def _up_config(config_path: str | None, data_dir: Path, host: str, port: int | None) -> ArgusConfig:
    """The configuration ``argus up`` runs with: the file's (or the defaults), with its data
    under ``data_dir``, jobs on Argus's own Python, the API on ``host:port``."""
    config = _load(config_path)
    config = msgspec.structs.replace(config, shared_root=str(data_dir / "shared"), address="auto")
    config.v2.sqlite.db_path = str(data_dir / "argus.sqlite3")
    if config.v2.taskspec.python == "python3":  # the default: jobs use Argus's own Python
        config.v2.taskspec.python = sys.executable
    config.v2.taskspec.allow_examples = True  # the walkthrough and the WebUI's tour run the example trainer
    config.v2.api.host, config.v2.api.port = host, port or config.v2.api.port
    return config


def _write_effective_config(data_dir: Path, config: ArgusConfig) -> None:
    """What this stack runs with, for `argus config show` and for `argus serve|reactor
    --config` pointed at the same data (rewritten each start: it is an output, not input).
    0600: it holds the event log's URL, password included (an older file may be 0644)."""
    fd = os.open(data_dir / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as effective:
        effective.write("# written by `argus up` at start: the configuration it runs with\n"
                        + yaml.safe_dump(msgspec.to_builtins(config), sort_keys=False))


def _serve_up(config: ArgusConfig, stack: Stack, started: float, host: str, sftp_port: int, token: str,
              where: str, data_lines: str) -> None:
    """The API (with the reactor and the SFTP door in its background) until it stops, after
    saying where everything is."""
    from argus.api.app import create_app

    port = config.v2.api.port
    background = [reactor_background(config)]
    if sftp_port >= 0:
        background.append(sftp_background(config, port=sftp_port,
                                          announce=_announce_sftp(config.v2.sftp.host or host)))
    app = create_app(config, admin_token=token, background=background, freeze_gc=True)
    click.echo(f"\nArgus is up: http://{host}:{port}/  (API http://{host}:{port}/api/v2)\n"
               f"admin token ({where}):\n  {token}\n"
               f"  export ARGUS_URL=http://{host}:{port} ARGUS_TOKEN={token}\n"
               + data_lines +
               f"confinement: {confinement_line(config.v2.sandbox.mode)}\n",
               err=True)
    progress = threading.Thread(target=report_progress, name="argus-up-progress", daemon=True,
                                args=(config, stack.stopping, lambda t: click.echo(t, err=True), started))
    progress.start()
    _run_uvicorn(app, host, port)
