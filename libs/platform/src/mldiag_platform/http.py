"""HTTP plumbing shared by every service: the app shell, health, metrics, the error boundary
and serving with uvicorn (which turns SIGTERM into a graceful shutdown of the lifespan).
"""

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, TypeVar

import structlog
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from pydantic import BaseModel, ValidationError

from mldiag_platform.errors import InvalidArgument, MldiagError
from mldiag_schemas.errors import ErrorBody, ErrorDetail

log = structlog.get_logger(__name__)

HealthCheck = Callable[[], Awaitable[bool]]
"""Answers whether one dependency is usable right now."""

HTTP_REQUESTS = Counter(
    "mldiag_http_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_SECONDS = Histogram("mldiag_http_request_seconds", "HTTP request latency.", ["route"])


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


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_body(
    model: type[ModelT], raw: bytes, error: type[InvalidArgument] = InvalidArgument
) -> ModelT:
    """Validate a JSON body (whatever its Content-Type) or raise ``error`` with the fields."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        details = [
            {"field": ".".join(str(part) for part in problem["loc"]), "problem": problem["msg"]}
            for problem in exc.errors()[:20]
        ]
        raise error(f"the {model.__name__} body is not valid", details=details) from None


async def read_body(request: Request, model: type[ModelT]) -> ModelT:
    """Read and validate a small JSON request body."""
    return parse_body(model, await request.body())


def create_http_app(
    service: str,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None,
    checks: dict[str, HealthCheck],
) -> FastAPI:
    """A FastAPI app with ``/healthz``, ``/metrics``, request events and the error boundary.

    ``checks`` is read on every ``/healthz`` call, so the lifespan can fill it in once the
    connections it names are open.
    """
    app = FastAPI(title=f"mldiag {service}", lifespan=lifespan)

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
        return error_response(exc.http_status, exc.code, exc.message, exc.details)

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        details = [
            {"field": ".".join(str(part) for part in error["loc"]), "problem": error["msg"]}
            for error in exc.errors()
        ]
        return error_response(400, "invalid_argument", "the request is not valid", details)

    @app.middleware("http")
    async def observe(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            log.exception("http.request.crashed", method=request.method, path=request.url.path)
            response = error_response(500, "internal", "internal error; see the service log")
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
