"""The Litestar application: ``create_app(config)`` wires the store, the command
handlers, the event broadcaster and the routes; it owns their lifetimes."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Coroutine, NamedTuple, Sequence

from litestar import Litestar, Request, Response, Router, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import (
    Components, SecurityScheme,
)
from litestar.static_files import create_static_files_router

from argus.api.auth import AuthController, SessionStore, principal
from argus.api.damage import DamageBoard, damage_handlers
from argus.api.cluster import cluster_view, drain_node, queue_view, goodput_view, shares_view, undrain_node
from argus.api.events_sse import Broadcaster, events_stream
from argus.api.fileops import FileOpsController
from argus.api.files import FilesController
from argus.api.tus import TusController, running as uploads_running
from argus.api.headers import ERROR_HEADERS, security_headers
from argus.api.metrics import ApiMetrics, healthz, metrics, readyz
from argus.api.ratelimit import SubmitRateLimit
from argus.api.streamcap import StreamSlots
from argus.api.sshkeys import SshKeysController, sftp_door
from argus.api.deps import DEPENDENCIES
from argus.api.reads import Reads
from argus.api.openapi import document_api, fix_options_allow, strict_body
from argus.api.tasks import TasksController
from argus.api.teams import TeamsController, usage_view
from argus.api.users import UsersController
from argus.api.vocabulary import vocabulary
from argus.store import LogUnreachable, StorageFull
from argus.config import ArgusConfig
from argus.service import AuthCache, CommandError, Commands
from argus.service.teams import TeamCommands
from argus.views.eta import EtaBoard

__all__ = ["API_PREFIX", "STATIC_DIR", "create_app"]

log = logging.getLogger("argus.api")
API_PREFIX = "/api/v2"
STATIC_DIR = Path(__file__).resolve().parent.parent / "ui" / "static"
Background = Callable[[Any], Coroutine[Any, Any, None]]


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return Response({"status_code": 500, "detail": "internal error; see the server log"},
                    status_code=500, headers=ERROR_HEADERS)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    body: dict[str, Any] = {"status_code": exc.status_code, "detail": exc.detail}
    if exc.extra:
        body["extra"] = exc.extra
    return Response(body, status_code=exc.status_code, headers={**ERROR_HEADERS, **(exc.headers or {})})


def _command_error(request: Request[Any, Any, Any], exc: CommandError) -> Response[dict[str, Any]]:
    """A refused command, for every handler: answered as the HTTPException it stands for,
    so it gets the same body as any other error (``extra`` only when there is some)."""
    return _http_error(request, HTTPException(status_code=exc.status, detail=exc.detail,
                                              extra=exc.extra or None))


def _log_unreachable(request: Request[Any, Any, Any], exc: LogUnreachable) -> Response[dict[str, Any]]:
    """The shared log (PostgreSQL) did not answer: a 503 the client may retry, saying
    whether the write may have been made."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    return _http_error(request, HTTPException(status_code=503, detail=str(exc), headers={"Retry-After": "5"}))


def _storage_full(request: Request[Any, Any, Any], exc: StorageFull) -> Response[dict[str, Any]]:
    """A write refused for lack of space: 507, saying that nothing was written and why
    (the log has the path and the free space); reads go on, and the same request succeeds
    once an operator frees space."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)  # the store logged the file and space
    return _http_error(request, HTTPException(status_code=507, detail=(
        f"the server's disk is full ({exc.cause}): nothing was written. Retry once an operator has freed space "
        "(reads still work)"), headers={"Retry-After": "60"}))


def _freeze_heap(app: Litestar) -> None:
    """Move everything alive after startup (modules, the app, the store) out of the
    collector's sight: each full collection would otherwise walk it again, a pause of
    tens of milliseconds on a small host that lands in the latency tail under load."""
    gc.collect()
    gc.freeze()


@get("/", include_in_schema=False, media_type="text/html")
async def _placeholder() -> str:
    return ("<!doctype html><title>Argus</title><p>Argus API is running. "
            "The WebUI is not built; see <a href='/schema'>/schema</a>.</p>")


class _Wiring(NamedTuple):
    """What ``create_app`` was given for the app's lifetime (its parameters)."""

    config: ArgusConfig
    store: Any
    admin_token: str | None
    background: Sequence[Background]
    group_commit: bool
    heartbeat_s: float


def _lifespan(w: _Wiring) -> Callable[[Litestar], contextlib.AbstractAsyncContextManager[None]]:
    """Open (or take) the store, wire the app's parts into its state, run the background
    jobs while the app runs; then stop them and close what was opened here."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        from projections import open_store

        config = w.config
        own = w.store is None
        st = w.store or await open_store(
            config.v2.sqlite.db_path, synchronous=config.v2.sqlite.synchronous, shared_url=config.v2.postgres.url,
            on_damage=config.v2.sqlite.on_damage)
        commands, broadcaster, found = _wire(app.state, w, st)
        token = w.admin_token or os.environ.get(config.v2.auth.token_env)
        if token and found is None:  # a damaged log takes no writes
            await commands.bootstrap_admin(token)
        if config.v2.scheduler.fairshare.teams and found is None:  # recorded once (docs/teams.md)
            await app.state.teams.seed(config.v2.scheduler.fairshare.teams)
        await broadcaster.start()
        import asyncio

        tasks = [asyncio.get_running_loop().create_task(fn(app.state)) for fn in w.background]
        try:
            async with uploads_running(app.state):
                yield
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            await broadcaster.stop()
            await commands.close()
            if own:
                await st.close()

    return lifespan


def _wire(state: State, w: _Wiring, st: Any) -> tuple[Commands, Broadcaster, Any]:
    """Make the app's parts over the open store ``st`` and put them in ``state``; returns
    the command side, the broadcaster and the damage found at open (None: none)."""
    config = w.config
    state.damage = DamageBoard()
    found = getattr(st, "damage", None)
    if found is not None:  # found at start: this server serves reads only
        state.damage.report(f"serving reads only: the event log is damaged: {found.detail}")
    auth = AuthCache(st)
    m = ApiMetrics()
    commands = Commands(st, config, auth, group_commit=w.group_commit, observe=m.observe_append)
    broadcaster = Broadcaster(
        st, heartbeat_s=w.heartbeat_s,
        on_event=lambda rec: auth.invalidate() if rec.stream.startswith("user-") else None)
    state.config, state.store, state.auth, state.metrics = config, st, auth, m
    state.etas = EtaBoard(st, config)
    state.reads = Reads(st, config)
    state.commands, state.broadcaster = commands, broadcaster
    state.teams = TeamCommands(commands)
    state.sessions = SessionStore(config.v2.auth.session_ttl_s)
    state.sftp = None  # argus.sftp's door, when a background job runs it
    state.submit_limit = SubmitRateLimit(config.v2.api.submit_burst, config.v2.api.submit_rate_per_s)
    state.stream_slots = StreamSlots(config.v2.api.max_streams_per_token, config.v2.api.max_streams_per_user)
    return commands, broadcaster, found


def _openapi() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Argus API", version="2.0.0",
        description="Event-sourced control plane for RL post-training. See docs/api.md.",
        components=Components(security_schemes={
            "bearer": SecurityScheme(type="http", scheme="bearer",
                                     description="Authorization: Bearer <token>"),
            "session": SecurityScheme(type="apiKey", name="argus_session",
                                      security_scheme_in="cookie"),
        }),
        security=[{"bearer": []}, {"session": []}],
        path="/schema",
    )


def create_app(
    config: ArgusConfig,
    *,
    store: Any = None,
    admin_token: str | None = None,
    background: Sequence[Background] = (),
    group_commit: bool = True,
    heartbeat_s: float = 15.0,
    static_dir: Path | None = None,
    freeze_gc: bool = False,
) -> Litestar:
    """The API app. ``store``: an open EventStore (else opened from the config and closed
    on shutdown). ``admin_token``: bootstrap admin token (else ``$<v2.auth.token_env>``).
    ``background``: coroutines ``f(app_state)`` run while the app runs (the reactor).
    ``freeze_gc``: ``gc.freeze()`` once started; for a server process that runs one app
    (not for tests that build many apps in one process: a frozen app is never freed)."""

    lifespan = _lifespan(_Wiring(config, store, admin_token, background, group_commit, heartbeat_s))
    api = Router(
        path=API_PREFIX,
        route_handlers=[AuthController, TasksController, UsersController, TeamsController, usage_view, FilesController, SshKeysController, sftp_door,
                        FileOpsController, TusController,
                        events_stream, queue_view, cluster_view, drain_node, undrain_node, shares_view, goodput_view, vocabulary],
        dependencies={"who": Provide(principal)},
        guards=[strict_body],
    )
    ui_dir = static_dir or STATIC_DIR
    ui: list[Any] = (
        [create_static_files_router(path="/", directories=[ui_dir], html_mode=True,
                                    include_in_schema=False)]
        if (ui_dir / "index.html").is_file() else [_placeholder]
    )
    app = Litestar(
        on_startup=[document_api, *([_freeze_heap] if freeze_gc else [])],
        route_handlers=[api, healthz, readyz, metrics, *ui],
        lifespan=[lifespan],
        dependencies=DEPENDENCIES,
        openapi_config=_openapi(),
        exception_handlers={HTTPException: _http_error, CommandError: _command_error,
                            LogUnreachable: _log_unreachable, StorageFull: _storage_full,
                            **damage_handlers(_http_error, _internal_error), Exception: _internal_error},
        request_max_body_size=config.v2.api.max_body_bytes,
        middleware=[security_headers],
        debug=False,
    )
    fix_options_allow(app)
    return app
