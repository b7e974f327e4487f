"""What the OpenAPI document promises, kept equal to what the routes do.

- ``errors(404, 409)``: the error answers a route gives beyond the ones every route of its
  kind gives, declared in its decorator (``responses=errors(...)``), all with one shape
  (``Error``).
- ``document_api`` (on startup) adds those every route of a kind gives: 401 and 403 to
  each route that authenticates its caller (``who``, the ``principal`` dependency), 400
  and 413 to each route that reads a body, 507 (a full disk) to each route that writes; marks the others public (``security: []``); and
  says ``additionalProperties: false`` for request bodies that refuse unknown fields.
- ``also_returns(...)`` (a route's ``opt``): more media types its success answer may have
  than Litestar documents (a file download beside a JSON listing, a log's SSE stream).
- ``sse_events(schema)`` (a route's ``opt``): what each event of its ``text/event-stream``
  answer is, as schemathesis and OpenAPI 3.2's ``itemSchema`` read an event: an object
  ``{event, data, id?, retry?}`` (OpenAPI 3.1's ``schema`` of an event stream describes
  one event). ``LOG_EVENTS`` (a followed task log) and ``EVENTS`` (``/events``).
- ``fix_options_allow`` (when the app is built): the ``Allow`` header of Litestar's
  automatic ``OPTIONS`` answer lists every method of the path (Litestar builds it from the
  first handlers registered on a path only, e.g. ``OPTIONS, POST`` for ``GET+POST /users``).
- ``strict_body`` (a guard on every API route): a JSON body must have the declared types.
  Guards run before dependencies: a body of the wrong shape is a 400 even without a token.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Litestar, Response
from litestar.exceptions import ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Reference, Schema
from litestar.routes import HTTPRoute
from litestar.status_codes import HTTP_204_NO_CONTENT

__all__ = ["EVENTS", "Error", "LOG_EVENTS", "also_returns", "document_api", "errors", "fix_options_allow",
           "sse_events", "strict_body"]


class Error(msgspec.Struct, kw_only=True):
    """Every error answer: ``detail`` says what to change; ``extra`` only when there is more
    (a refused TaskSpec's ``errors``, a validation failure's fields)."""

    status_code: int
    detail: str
    extra: Any = None


DESCRIPTIONS = {
    400: "Bad input: the detail says what to change",
    401: "No valid token or session",
    403: "Disabled user, cross-site request, read-only area, or admin only",
    404: "Not found (or not yours)",
    409: "Conflicts with the current state (or changed meanwhile): try again or change it",
    413: "Body too large",
    412: "Tus-Resumable missing or a version this server does not speak (it speaks 1.0.0)",
    415: "Content-Type not accepted: send one of the declared types",
    416: "Range not satisfiable: it starts past the end (Content-Range gives the size)",
    460: "Checksum mismatch (tus): the chunk or the file is not what the client declared; nothing kept",
    429: "Too many submissions, or too many open streams, by this user or token: try again after the "
         "Retry-After header's seconds",
    503: "Not ready",
    507: "The server's disk is full: nothing was written; retry after the Retry-After header's seconds",
}
_ERROR_REF = Reference(ref="#/components/schemas/Error")


def errors(*codes: int) -> dict[int, ResponseSpec]:
    """Litestar ``responses=`` for these error codes (the ``Error`` shape)."""
    return {code: ResponseSpec(data_container=Error, generate_examples=False,
                               description=DESCRIPTIONS[code]) for code in codes}


def _error_schema() -> Schema:
    return Schema(type=OpenAPIType.OBJECT, required=["detail", "status_code"], properties={
        "status_code": Schema(type=OpenAPIType.INTEGER),
        "detail": Schema(type=OpenAPIType.STRING),
        "extra": Schema(description="more about the error, when there is more"),
    })


def _handlers(app: Litestar) -> dict[tuple[str, str], Any]:
    """Each route handler by (OpenAPI path, lower-case method)."""
    found: dict[tuple[str, str], Any] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            for method in handler.http_methods:
                found[(route.path_format, method.lower())] = handler
    return found


def also_returns(*media_types: str) -> dict[str, Any]:
    """Route ``opt``: more media types its success answer may have than the one Litestar
    documents (``@get(..., opt=also_returns("application/octet-stream"))``: a folder is a
    JSON listing, a file its bytes)."""
    return {"also_returns": media_types}


def sse_events(schema: Schema) -> dict[str, Any]:
    """Route ``opt``: the schema of each event of its event stream (see the module's
    docstring)."""
    return {"sse_events": schema}


def _event(name: Schema, data: Schema, **more: Schema) -> Schema:
    return Schema(type=OpenAPIType.OBJECT, required=["event", "data", *more],
                  properties={"event": name, "data": data, **more})


_STRING = Schema(type=OpenAPIType.STRING)
# GET /tasks/{id}/logs?follow=true: a 'log' event per line of the driver log (its text,
# without the newline), then one 'end' whose data is the task's final state.
LOG_EVENTS = Schema(one_of=[
    _event(Schema(const="log"), Schema(type=OpenAPIType.STRING, description="one line of the log")),
    _event(Schema(const="end"), Schema(
        enum=["SUCCEEDED", "INCOMPLETE", "FAILED", "CANCELED"],
        description="the task ended in this state (the stream then ends)")),
])
# GET /events: one event per log record: id = its position, event = its type, data = JSON.
EVENTS = _event(
    Schema(type=OpenAPIType.STRING, pattern=r"^[A-Za-z][A-Za-z0-9]*$", description="the event's type"),
    Schema(type=OpenAPIType.STRING, content_media_type="application/json", content_schema=Schema(
        type=OpenAPIType.OBJECT,
        required=["position", "stream", "type", "recorded_at", "actor", "owner", "data"],
        properties={"position": Schema(type=OpenAPIType.INTEGER, minimum=1),
                    "stream": _STRING, "type": _STRING,
                    "recorded_at": Schema(type=OpenAPIType.NUMBER), "actor": _STRING,
                    "owner": Schema(one_of=[_STRING, Schema(type=OpenAPIType.NULL)]),
                    "data": Schema(type=OpenAPIType.OBJECT, description="the event (docs/events.md)")})),
    id=Schema(type=OpenAPIType.STRING, pattern=r"^[0-9]+$", description="the record's position: "
              "reconnect with Last-Event-ID to resume after it"))


def _forbids_unknown_fields(name: str) -> bool:
    from argus.api import schemas

    cls = getattr(schemas, name, None)
    return (isinstance(cls, type) and issubclass(cls, msgspec.Struct)
            and bool(cls.__struct_config__.forbid_unknown_fields))


def document_api(app: Litestar) -> None:
    """Complete the generated document (see the module's docstring)."""
    schema = app.openapi_schema
    if schema.components.schemas is None:
        schema.components.schemas = {}
    components = schema.components.schemas
    components["Error"] = _error_schema()
    for name, component in components.items():
        if isinstance(component, Schema) and _forbids_unknown_fields(name):
            component.additional_properties = False
    handlers = _handlers(app)
    for path, item in (schema.paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            op = getattr(item, method, None)
            if op is None:
                continue
            op.responses = op.responses or {}
            handler = handlers.get((path, method))
            success = op.responses.get(str(handler.status_code)) if handler else None
            for media in (handler.opt.get("also_returns", ()) if handler else ()):
                if isinstance(success, OpenAPIResponse):
                    success.content = {**(success.content or {}), media: OpenAPIMediaType(
                        schema=Schema(type=OpenAPIType.STRING))}
            events = handler.opt.get("sse_events") if handler else None
            if events is not None and isinstance(success, OpenAPIResponse) \
                    and "text/event-stream" in (success.content or {}):
                success.content["text/event-stream"] = OpenAPIMediaType(schema=events)  # type: ignore[index]
            add: list[int] = []
            if handler is not None and "who" in handler.parsed_fn_signature.parameters:
                add += [401, 403]
            else:
                op.security = []
            if op.request_body is not None:
                add += [400, 413]
            if method != "get":  # every write may find the disk full
                add.append(507)
            for code in add:
                op.responses.setdefault(str(code), OpenAPIResponse(
                    description=DESCRIPTIONS[code],
                    content={"application/json": OpenAPIMediaType(schema=_ERROR_REF)}))
            # Litestar's own 400 (a parameter that fails validation) in the shared shape too.
            if "400" in op.responses and op.responses["400"].content:  # type: ignore[union-attr]
                op.responses["400"] = OpenAPIResponse(
                    description=DESCRIPTIONS[400],
                    content={"application/json": OpenAPIMediaType(schema=_ERROR_REF)})


def fix_options_allow(app: Litestar) -> None:
    """Give each path's automatic OPTIONS handler the path's full method list."""
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or "OPTIONS" not in route.route_handler_map:
            continue
        handler, _ = route.route_handler_map["OPTIONS"]
        if handler.fn.__name__ != "options_handler":  # a route's own OPTIONS: leave it
            continue
        allow = ", ".join(sorted(route.methods))

        def options_handler(scope: Any, allow: str = allow) -> Response[None]:
            return Response(content=None, status_code=HTTP_204_NO_CONTENT,
                            headers={"Allow": allow}, media_type="text/plain")

        handler._fn = options_handler  # type: ignore[assignment]  # what Litestar's handler calls


async def strict_body(connection: Any, handler: Any) -> None:
    """Guard: a JSON body is decoded strictly into the handler's ``data`` type, as the
    document declares it. (Litestar converts leniently, for query strings and forms: a
    body's ``"is_admin": 0`` or ``"label": 5`` would pass as ``false`` or ``"5"``.)"""
    field = handler.parsed_fn_signature.parameters.get("data")
    if field is None or not isinstance(field.annotation, type) \
            or not issubclass(field.annotation, msgspec.Struct):
        return
    media = connection.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return  # not JSON: Litestar's own decoding answers (a 400)
    try:
        msgspec.json.decode(await connection.body(), type=field.annotation)
    except msgspec.ValidationError as exc:
        raise ValidationException(
            detail=f"Validation failed for {connection.method} {connection.url.path}: {exc}",
            extra=[{"message": str(exc), "source": "body"}]) from exc
    except msgspec.DecodeError:
        return  # not JSON at all: Litestar's own decoding answers (a 400)
