"""Who is calling: bearer tokens (programs) and the session cookie (browser).

``principal`` is the dependency every protected handler takes. It answers 401 for a
missing or unknown token, and 403 for a disabled user (checked on every request, so a
disabled user is refused at once).

Cross-site requests: a browser attaches the session cookie to any request to this host,
whoever made the page (``SameSite=Strict`` does not cover another port of the same host).
So a cookie-authenticated request that changes something must come from this origin: its
``Origin`` (else ``Referer``) must name the host it was sent to; anything else is a 403.
Bearer tokens are never sent by a browser on its own: they are not checked.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import urlsplit

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException

from argus import layout
from argus.api.openapi import errors
from argus.api.schemas import LoginIn, MeOut
from argus.service import Principal

__all__ = [
    "AuthController", "SESSION_COOKIE", "SessionStore", "principal", "request_id", "require_admin",
]

SESSION_COOKIE = "argus_session"


class SessionStore:
    """Browser sessions: random id → (token, expiry). In memory: a restart logs out."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._sessions: dict[str, tuple[str, float]] = {}

    def create(self, token: str) -> str:
        now = time.time()
        if len(self._sessions) > 10_000:
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = (token, now + self.ttl_s)
        return sid

    def token(self, sid: str) -> str | None:
        entry = self._sessions.get(sid)
        if entry is None or entry[1] < time.time():
            self._sessions.pop(sid, None)
            return None
        return entry[0]

    def drop(self, sid: str) -> None:
        self._sessions.pop(sid, None)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _token_of(request: Request[Any, Any, Any], state: State) -> str | None:
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise NotAuthorizedException("Authorization must be 'Bearer <token>'")
        return value.strip()
    sid = request.cookies.get(SESSION_COOKIE)
    if sid:
        if request.method not in _SAFE_METHODS:
            refuse_cross_site(request)
        return state.sessions.token(sid)  # type: ignore[no-any-return]
    return None


def _origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased ("" when it has none)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def refuse_cross_site(request: Request[Any, Any, Any]) -> None:
    """403 unless the request's Origin (else Referer) is the host it was sent to."""
    claimed = request.headers.get("origin") or _origin_of(request.headers.get("referer", ""))
    host = request.headers.get("x-forwarded-host") or request.headers.get("host") or ""
    if not claimed or claimed == "null" or urlsplit(claimed.lower()).netloc != host.lower():
        raise PermissionDeniedException(
            "cross-site request refused: a request made with the session cookie must come from "
            "this site's own pages (its Origin header must name this host); programs should "
            "send 'Authorization: Bearer <token>' instead")


async def _resolve(state: State, token: str) -> Principal:
    """The user a token stands for: 401 when unknown or revoked, 403 when disabled.
    The one lookup behind both ``principal`` and the login."""
    who = await state.auth.lookup(token)
    if who is None:
        raise NotAuthorizedException("unknown or revoked token")
    if who.disabled:
        raise PermissionDeniedException(f"user {who.user_id} is disabled; ask an admin")
    return who  # type: ignore[no-any-return]


async def principal(request: Request[Any, Any, Any]) -> Principal:
    """The authenticated caller (dependency). Takes the app state from the request, not
    as a parameter: every protected request resolves this, and each injected parameter
    costs a conversion."""
    state = request.app.state
    token = _token_of(request, state)
    if token is None:
        raise NotAuthorizedException("authentication required: send 'Authorization: Bearer "
                                     "<token>' or log in at POST /api/v2/auth/login")
    who = await _resolve(state, token)
    state.commands.note_token_use(who)
    return who


def request_id(request: Request[Any, Any, Any]) -> str:
    """The caller's ``X-Request-Id`` (bounded: it is stored with every event it causes)."""
    return request.headers.get("x-request-id", "")[:100]


def me_out(state: State, who: Principal) -> MeOut:
    """The caller, with this deployment's shared root and their home (for path hints)."""
    shared = state.config.shared_root
    return MeOut(user_id=who.user_id, is_admin=who.is_admin, display_name=who.display_name,
                 shared_root=shared, home=layout.home(shared, who.user_id))


def _over_tls(request: Request[Any, Any, Any]) -> bool:
    """Served over TLS (directly, or behind a proxy that says so): the cookie is Secure."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def require_admin(who: Principal) -> None:
    if not who.is_admin:
        raise PermissionDeniedException("this needs an admin")


class AuthController(Controller):
    path = "/"
    tags = ["auth"]

    @post("/auth/login", security=[], status_code=200, responses=errors(401, 403))
    async def login(self, request: Request[Any, Any, Any], data: LoginIn, state: State) -> Response[MeOut]:
        """Exchange a token for an HttpOnly session cookie (for the WebUI)."""
        if request.headers.get("origin"):  # a browser: only from this site's own login page
            refuse_cross_site(request)
        who = await _resolve(state, data.token)
        sid = state.sessions.create(data.token)
        cookie = Cookie(key=SESSION_COOKIE, value=sid, httponly=True, samesite="strict",
                        path="/", max_age=int(state.sessions.ttl_s), secure=_over_tls(request))
        return Response(me_out(state, who), cookies=[cookie])

    @post("/auth/logout", security=[], status_code=200)
    async def logout(self, request: Request[Any, Any, Any], state: State) -> Response[dict[str, bool]]:
        """Forget the session and clear the cookie."""
        sid = request.cookies.get(SESSION_COOKIE)
        if sid:
            state.sessions.drop(sid)
        cookie = Cookie(key=SESSION_COOKIE, value="", httponly=True, samesite="strict",
                        path="/", max_age=0, secure=_over_tls(request))
        return Response({"ok": True}, cookies=[cookie])

    @get("/me")
    async def me(self, state: State, who: Principal) -> MeOut:
        """The caller, and where their files are in this deployment."""
        return me_out(state, who)
