"""HTTP plumbing shared by every service: the app shell, health, metrics, the error boundary,
the checks every request passes before a handler sees it (body size, control characters) and
serving with uvicorn (which turns SIGTERM into a graceful shutdown of the lifespan).
"""

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl

import pydantic_core
import structlog
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mldiag_platform.errors import InvalidArgument, InvalidPageSize, MldiagError, PayloadTooLarge
from mldiag_schemas.errors import ErrorBody, ErrorDetail

log = structlog.get_logger(__name__)

HealthCheck = Callable[[], Awaitable[bool]]
"""Answers whether one dependency is usable right now."""

HTTP_REQUESTS = Counter(
    "mldiag_http_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_SECONDS = Histogram("mldiag_http_request_seconds", "HTTP request latency.", ["route"])
HTTP_REQUEST_BYTES = Counter(
    "mldiag_http_request_bytes",
    "Request body bytes read, as sent (before any Content-Encoding is undone).",
    ["route"],
)


class ContractResponse(Response):
    """A JSON response rendered by pydantic, so NaN and ±Inf survive (json.dumps refuses)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        """Serialise a contract model (or pass bytes through)."""
        if isinstance(content, BaseModel):
            return content.model_dump_json().encode()
        if isinstance(content, bytes):
            return content
        raise TypeError(f"ContractResponse needs a pydantic model, got {type(content)!r}")


def error_response(
    status: int, code: str, message: str, details: list[Any] | None = None
) -> Response:
    """The ``{"error": {code, message, details}}`` body every failure uses."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details or []))
    return ContractResponse(body, status_code=status)


ErrorRenderer = Callable[[int, str, str, list[Any]], Response]
"""Renders a failure (HTTP status, stable code, message, details) as a response."""


@dataclass(frozen=True)
class ErrorShape:
    """How a service's failures look on the wire: the body model its OpenAPI document names
    and the function that renders one. Every error a service answers (domain errors, invalid
    requests, oversized bodies, control characters, crashes) goes through it."""

    model: type[BaseModel]
    render: ErrorRenderer


def _mldiag_error(status: int, code: str, message: str, details: list[Any]) -> Response:
    return error_response(status, code, message, details)


MLDIAG_ERRORS = ErrorShape(ErrorBody, _mldiag_error)
"""mldiag's own ``{"error": {code, message, details}}`` (every service unless it chooses)."""

ModelT = TypeVar("ModelT", bound=BaseModel)

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body a service reads unless it is built with another limit."""

_ESCAPED_NUL = b"\\u0000"
"""How a NUL can appear in valid JSON (a raw one is refused by the parser)."""


def parse_body(
    model: type[ModelT], raw: bytes, error: type[InvalidArgument] = InvalidArgument
) -> ModelT:
    """Validate a JSON body (whatever its Content-Type) or raise ``error`` with the fields.

    A string (or key) holding NUL is refused too, naming where: PostgreSQL's text and jsonb
    cannot store it, and a contract check cannot see it.
    """
    refuse_nul(raw, error)
    try:
        parsed = model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        details = [
            {"field": ".".join(str(part) for part in problem["loc"]), "problem": problem["msg"]}
            for problem in exc.errors()[:20]
        ]
        raise error(f"the {model.__name__} body is not valid", details=details) from None
    _refuse_unstorable(parsed, error)
    return parsed


def refuse_nul(raw: bytes, error: type[InvalidArgument] = InvalidArgument) -> None:
    """Raise ``error`` naming the first field of a JSON body whose key or value holds NUL:
    for routes that read a body as a free-form object rather than through a contract."""
    if _ESCAPED_NUL in raw:
        _refuse_nul(raw, error)


def _refuse_nul(raw: bytes, error: type[InvalidArgument]) -> None:
    """Raise ``error`` naming the first field whose key or value holds NUL."""
    try:
        document = pydantic_core.from_json(raw)
    except ValueError:
        return  # not JSON (or too deep): the model's validation says so
    # Iterative, so a deep document cannot exhaust the stack (the parser bounds it anyway).
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and "\x00" in value:
            _nul_found(where, error)
        items: Any = ()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        for key, item in items:
            field = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and "\x00" in key:
                _nul_found(field, error)
            stack.append((field, item))


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of a PostgreSQL ``bigint``, the widest integer column."""


def _refuse_unstorable(model: BaseModel, error: type[InvalidArgument]) -> None:
    """Raise ``error`` for a field no column can hold: an integer beyond a bigint, or a time
    with no UTC equivalent (``0001-01-01T00:00:00+14:00``). Only fields of the models are
    checked (in lists and maps of models too): values inside free-form maps (configs) are
    stored as JSON, which holds any integer."""
    stack: list[tuple[str, BaseModel]] = [("", model)]
    while stack:
        where, current = stack.pop()
        for name, field in type(current).model_fields.items():
            path = f"{where}.{field.alias or name}" if where else field.alias or name
            value = getattr(current, name)
            if problem := _unstorable(value):
                raise error(f"{path} {problem}", details=[{"field": path, "problem": problem}])
            if isinstance(value, BaseModel):
                stack.append((path, value))
            elif isinstance(value, list | tuple):
                stack += [
                    (f"{path}.{index}", item)
                    for index, item in enumerate(value)
                    if isinstance(item, BaseModel)
                ]
            elif isinstance(value, dict):
                stack += [
                    (f"{path}.{key}", item)
                    for key, item in value.items()
                    if isinstance(item, BaseModel)
                ]


def _unstorable(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            return "is out of range (a 64-bit signed integer)"
    elif isinstance(value, datetime) and value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            return "is out of range (no UTC time between years 1 and 9999)"
    return None


def _nul_found(field: str, error: type[InvalidArgument]) -> NoReturn:
    problem = "holds a NUL character (U+0000), which cannot be stored"
    raise error(f"{field or 'the body'} {problem}", details=[{"field": field, "problem": problem}])


async def read_body(request: Request, model: type[ModelT]) -> ModelT:
    """Read and validate a small JSON request body."""
    return parse_body(model, await request.body())


def query_param(request: Request, camel: str, snake: str) -> str | None:
    """A query parameter by its camelCase name (``pageSize``) or else by the snake_case one
    the official SDKs send (``page_size``); ``None`` when neither is given."""
    params = request.query_params
    return params.get(camel, params.get(snake))


def page_size_param(request: Request) -> int | None:
    """``pageSize`` (or ``page_size``) as a number, None when absent; ``invalid_page_size``
    for one that is no whole number (the range is the listing's to judge)."""
    value = query_param(request, "pageSize", "page_size")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        problem = f"must be a whole number, got {value[:40]!r}"
        raise InvalidPageSize(
            f"pageSize {problem}", details=[{"field": "pageSize", "problem": problem}]
        ) from None


def json_body(model: type[BaseModel], *alternatives: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring a route's JSON body as ``model`` (or any of
    ``alternatives``), for handlers that read the body themselves (to pick their own error
    codes): the document then shows it."""
    schemas = [m.model_json_schema(ref_template=_COMPONENT_REF) for m in (model, *alternatives)]
    definitions: dict[str, Any] = {}
    for one in schemas:
        definitions.update(one.pop("$defs", {}))
    schema: dict[str, Any] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if definitions:
        schema["$defs"] = definitions
    content = {"application/json": {"schema": schema}}
    return {"requestBody": {"required": True, "content": content}}


_COMPONENT_REF = "#/components/schemas/{model}"


def _hoist_definitions(document: dict[str, Any]) -> dict[str, Any]:
    """Move the ``$defs`` of the bodies :func:`json_body` declared to the components, where
    their references point.

    A body's definitions describe what is accepted (validation), the components FastAPI made
    from the response models what is sent (serialization); where one name has both shapes
    (a proto int64: a number or a numeric string in, a string out) the body's becomes
    ``<Name>Input``, so neither replaces the other."""
    components = document.setdefault("components", {}).setdefault("schemas", {})
    sent = dict(components)
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                schema = media.get("schema", {})
                definitions = schema.pop("$defs", {})
                renamed = _input_names(definitions, sent)
                if renamed:
                    media["schema"] = schema = _refs_renamed(schema, renamed)
                    definitions = _refs_renamed(definitions, renamed)
                for name, definition in definitions.items():
                    components[renamed.get(name, name)] = definition
    return document


def _input_names(definitions: dict[str, Any], sent: dict[str, Any]) -> dict[str, str]:
    """The body's definitions that need their own name: those shaped unlike the sent one of
    that name, and those referring to one that does (else the sent one would point at it)."""
    renamed = {
        name: f"{name}Input"
        for name, definition in definitions.items()
        if name in sent and sent[name] != definition
    }
    grown = True
    while grown:
        grown = False
        for name, definition in definitions.items():
            if name in sent and name not in renamed and set(_refs(definition)) & renamed.keys():
                renamed[name] = f"{name}Input"
                grown = True
    return renamed


def _refs(node: Any) -> Iterator[str]:
    """The component names ``node`` refers to."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _refs_renamed(node: Any, renamed: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_COMPONENT_REF.removesuffix("{model}")):
            name = ref.rsplit("/", 1)[-1]
            return {**node, "$ref": _COMPONENT_REF.format(model=renamed.get(name, name))}
        return {key: _refs_renamed(value, renamed) for key, value in node.items()}
    if isinstance(node, list):
        return [_refs_renamed(value, renamed) for value in node]
    return node


_PATH_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""No path segment (an id, a metric name) may hold a control character."""

_QUERY_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Query values are ids and filters: tab, CR and LF are whitespace there, nothing else."""


class CheckedRequestTarget:
    """ASGI middleware refusing, with 400 ``invalid_argument``, a path or query parameter
    that holds a control character, before routing: no id or filter can then carry one to
    PostgreSQL (NUL), a NATS subject or a log line."""

    def __init__(self, app: ASGIApp, render: ErrorRenderer = _mldiag_error) -> None:
        self._app = app
        self._render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the target of an HTTP request, then pass it on."""
        if scope["type"] == "http":
            problem = _target_problem(scope)
            if problem is not None:
                field, message = problem
                details = [{"field": field, "problem": message}]
                response = self._render(400, "invalid_argument", f"{field} {message}", details)
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)


def _target_problem(scope: Scope) -> tuple[str, str] | None:
    if match := _PATH_CONTROL.search(scope["path"]):
        return "path", f"holds the control character U+{ord(match.group()):04X}"
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if match := _QUERY_CONTROL.search(name + value):
            return f"query.{name!s:.100}", f"holds the control character U+{ord(match.group()):04X}"
    return None


class BodyLimit:
    """ASGI middleware answering 413 ``payload_too_large`` to a body over ``max_bytes``:
    at once when its Content-Length says so, else as soon as the bytes read pass the limit
    (chunked bodies too), so no more than the limit is ever held in memory."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        render: ErrorRenderer = _mldiag_error,
        prefix_limits: Mapping[str, int] | None = None,
    ) -> None:
        self._app = app
        self._max_bytes = max_bytes
        self._render = render
        # Longest prefix first, so a nested prefix wins over its parent.
        self._prefix_limits = sorted((prefix_limits or {}).items(), key=lambda p: -len(p[0]))

    def _limit_of(self, path: str) -> int:
        for prefix, limit in self._prefix_limits:
            if path.startswith(prefix):
                return limit
        return self._max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a receive that counts its body."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        limit = self._limit_of(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(limit, self._render)(scope, receive, send)
            return
        received = 0
        exceeded = started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # whatever the app made of the cut body; the 413 below answers
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, counting_receive, guarded_send)
        except PayloadTooLarge:
            if not exceeded:
                raise
        finally:
            # The router put the matched route in the shared scope (ingest's bytes/s panel).
            HTTP_REQUEST_BYTES.labels(getattr(scope.get("route"), "path", "unmatched")).inc(
                received
            )
        if exceeded and not started:
            await _too_large(limit, self._render)(scope, receive, send)


def _too_large(limit: int, render: ErrorRenderer) -> Response:
    message = f"the request body is over the {limit}-byte limit"
    return render(413, PayloadTooLarge.code, message, [{"limit": limit}])


EMPTY_OBJECT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Done: an empty object (`google.protobuf.Empty`).",
        "content": {
            "application/json": {"schema": {"type": "object", "properties": {}, "maxProperties": 0}}
        },
    }
}
"""``responses=`` of a route answering ``{}``."""

EVENT_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-sent events, open until the caller leaves or the service stops.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}
"""``responses=`` of a route answering a server-sent event stream."""

_ERROR_STATUSES: dict[int | str, str] = {
    400: "Invalid argument: a body, parameter or id that is not valid (never FastAPI's 422).",
    401: "Unauthenticated: no token, or one that is unknown, revoked or expired.",
    403: "Permission denied: the token's role does not grant this.",
    404: "Not found: the resource does not exist (or the path is no route).",
    413: "Payload too large: the body is over the service's limit.",
    "4XX": "Refused for another reason (409 conflict, 412 etag mismatch, 429...): see the code.",
    500: "Internal: the service failed; see its log.",
    503: "Unavailable: a dependency is down; nothing was taken, retry (`Retry-After`).",
    "5XX": "Failed: see the service log.",
}
"""What every route can answer besides its own success, with the error body."""


def _error_responses(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    return {
        status: {"model": model, "description": description}
        for status, description in _ERROR_STATUSES.items()
    }


def _without_validation_errors(document: dict[str, Any]) -> dict[str, Any]:
    """Drop FastAPI's 422 ``HTTPValidationError`` entries (the error boundary answers an
    invalid request with 400 and the service's error body, which every operation documents
    already), and the untyped JSON it adds beside a stream or text a route declares."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            for response in responses.values():
                content = response.get("content", {})
                # FastAPI adds its default JSON, untyped, beside the stream a route declares.
                if len(content) > 1 and content.get("application/json") == {"schema": {}}:
                    del content["application/json"]
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        if "detail" in (properties := schemas.get(name, {}).get("properties", {})) or (
            "loc" in properties
        ):  # FastAPI's, not a contract of the same name
            schemas.pop(name)
    return document


def create_http_app(
    service: str,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None,
    checks: dict[str, HealthCheck],
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    errors: ErrorShape = MLDIAG_ERRORS,
    body_limits: Mapping[str, int] | None = None,
) -> FastAPI:
    """A FastAPI app with ``/healthz``, ``/metrics``, request events and the error boundary.

    ``checks`` is read on every ``/healthz`` call, so the lifespan can fill it in once the
    connections it names are open. Every request passes :class:`CheckedRequestTarget` and
    :class:`BodyLimit` (at ``max_body_bytes``) before routing. ``errors`` is the shape of
    every failure the app answers (a service speaking another API's dialect, like the
    training service's Vertex errors, chooses its own); with another shape than mldiag's,
    routing's own 404 and 405 take it too. ``body_limits`` gives paths under a prefix their
    own limit instead (uploads: ``{"/upload/": 256 MiB}``), so one large route does not
    raise every route's.
    """
    app = FastAPI(
        title=f"mldiag {service}", lifespan=lifespan, responses=_error_responses(errors.model)
    )
    render = errors.render

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = _without_validation_errors(_hoist_definitions(document))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        results = {}
        for name, check in checks.items():
            try:
                results[name] = await check()
            except Exception:  # noqa: BLE001  # a failing check is an answer, not a crash
                results[name] = False
        healthy = bool(checks) and all(results.values())
        status = "ok" if healthy else "unavailable"
        body = f'{{"status":"{status}","service":"{service}","checks":{_json_bools(results)}}}'
        return Response(body, status_code=200 if healthy else 503, media_type="application/json")

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(MldiagError)
    async def on_domain_error(_request: Request, exc: MldiagError) -> Response:
        response = render(exc.http_status, exc.code, exc.message, exc.details)
        if exc.http_status == 503:
            # Nothing was taken: tell clients and load balancers a retry is worth it.
            response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        details = [
            {"field": ".".join(str(part) for part in error["loc"]), "problem": error["msg"]}
            for error in exc.errors()
        ]
        first = details[0] if details else {"field": "", "problem": ""}
        message = f"the request is not valid: {first['field']}: {first['problem']}"
        return render(400, "invalid_argument", message, details)

    if errors is not MLDIAG_ERRORS:

        @app.exception_handler(HTTPException)
        async def on_routing_error(_request: Request, exc: HTTPException) -> Response:
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
            return render(exc.status_code, code, str(exc.detail), [])

    # Inside the request events (added before them), so their 400s and 413s are counted.
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, render=render, prefix_limits=body_limits
    )
    app.add_middleware(CheckedRequestTarget, render=render)

    @app.middleware("http")
    async def observe(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            log.exception("http.request.crashed", method=request.method, path=request.url.path)
            response = render(500, "internal", "internal error; see the service log", [])
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")
        elapsed = time.perf_counter() - started
        HTTP_REQUESTS.labels(request.method, template, str(response.status_code)).inc()
        HTTP_SECONDS.labels(template).observe(elapsed)
        if template not in ("/healthz", "/metrics"):
            log.info(
                "http.request.handled",
                method=request.method,
                route=template,
                status=response.status_code,
                duration_ms=round(elapsed * 1000, 2),
            )
        return response

    return app


def _json_bools(results: dict[str, bool]) -> str:
    inner = ",".join(f'"{name}":{"true" if ok else "false"}' for name, ok in results.items())
    return "{" + inner + "}"


def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT; uvicorn then drains requests and runs the shutdown."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # our structlog handler is already on the root logger
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    _GracefulServer(config, stopping_event(app)).run()


def stopping_event(app: FastAPI) -> asyncio.Event:
    """Set when the server starts shutting down: long-lived responses (live streams) end on
    it, because uvicorn waits for every open response before it runs the lifespan shutdown."""
    event: asyncio.Event | None = getattr(app.state, "stopping", None)
    if event is None:
        event = app.state.stopping = asyncio.Event()
    return event


class _GracefulServer(uvicorn.Server):
    """uvicorn's server, telling long-lived responses to end before it waits for them."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self._stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Set the stopping event, then shut down as uvicorn does."""
        self._stopping.set()
        await super().shutdown(sockets)


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server run inside another's event loop, which owns the signals."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serving_alongside(app: FastAPI, host: str, port: int) -> AsyncIterator[int]:
    """Serve ``app`` on a second port from inside a running service; yields the bound port.

    The socket is bound here, so a port in use raises ``OSError`` to the caller instead of
    uvicorn exiting the process. ``app``'s own lifespan is not run: its state is the caller's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            if task.done():
                await task
                raise RuntimeError(f"the HTTP server on {host}:{port} stopped while starting")
            await asyncio.sleep(0.01)
        yield int(listener.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        listener.close()
