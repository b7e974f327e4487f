"""Security headers on every answer: the WebUI may not be framed (clickjacking) and runs only
its own scripts and styles (a value injected into a page cannot run)."""

from __future__ import annotations

from litestar.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "ERROR_HEADERS", "security_headers"]

# The WebUI loads its modules, styles and data from this origin only, sets no inline script
# or style attribute, and is never framed. The API's JSON and event streams are not
# documents, so the policy costs them nothing.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_COMMON = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
_WITH_CSP = [*_COMMON, (b"content-security-policy", CONTENT_SECURITY_POLICY.encode())]
# The API's documentation pages (/schema) are Litestar's, which load their renderer from a
# CDN with inline scripts: they get the frame headers, not this policy.
_DOCS_PREFIX = "/schema"


# For the error answers Litestar makes outside the middleware (a path no route serves).
ERROR_HEADERS = {name.decode(): value.decode() for name, value in _WITH_CSP}


def security_headers(app: ASGIApp) -> ASGIApp:
    """ASGI middleware adding the headers above to each HTTP answer."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        extra = _COMMON if scope["path"].startswith(_DOCS_PREFIX) else _WITH_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                have = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in extra if name not in have]
                message["headers"] = headers  # type: ignore[typeddict-unknown-key]
            await send(message)

        await app(scope, receive, send_with_headers)

    return middleware
