"""The edge: one HTTP address in front of the services, routing each request by its path.

A plain ASGI application (no framework routing: it forwards everything but its own two
paths) over one pool of keep-alive HTTP/1.1 connections per process (``httpcore``, the
transport under ``httpx``, used directly: the request target and headers go out as they
came, with no URL normalisation or header model in between). Bodies stream both ways, unread and
unbuffered beyond a chunk, so uploads, replica logs followed live and the console's
server-sent events pass as they come; a response without a length is relayed until the
service ends it or the caller goes away, and then the service's connection is closed too.

The edge answers only for itself on ``/_edge/healthz`` and ``/_edge/metrics``, and for the
whole API on ``/openapi.json`` (the services' documents merged, :mod:`.openapi`) and ``/docs``
(a Swagger UI page of it); a service it cannot reach gets the caller a 503 ``unavailable``
with ``Retry-After`` (nothing was taken).
The request line, ``Host`` and every end-to-end header reach the service as sent, with
``X-Forwarded-For``, ``-Proto`` and ``-Host`` added, so links a service builds point at the
edge. Hop-by-hop headers (RFC 9110 §7.6.1) stop here in both directions.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from mldiag_platform.edge.openapi import DOCUMENT_PATH, merge, render
from mldiag_platform.edge.routes import RouteTable
from mldiag_platform.edge.settings import EdgeSettings
from mldiag_schemas.errors import ErrorBody, ErrorDetail

log = structlog.get_logger(__name__)

SERVICE = "edge"
HEALTH_PATH = "/_edge/healthz"
"""The edge's own health (every other path belongs to a service, ``/healthz`` included)."""
METRICS_PATH = "/_edge/metrics"
"""The edge's own Prometheus metrics."""
DOCS_PATH = "/docs"
"""A Swagger UI page of the merged document (``/openapi.json``, :data:`.openapi.DOCUMENT_PATH`)."""

SMALL_BODY_BYTES = 256 * 1024
"""A request body up to this size (with a declared length) is read before forwarding, so the
service gets head and body in one write; larger or unsized bodies stream."""

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)

Scope = dict[str, Any]
Message = dict[str, Any]


_Receive = Callable[[], Awaitable[Message]]
"""The ASGI ``receive`` callable (written out: no starlette needed)."""
_Send = Callable[[Message], Awaitable[None]]
"""The ASGI ``send`` callable."""


class Edge:
    """The ASGI application: health and metrics of its own, every other path proxied."""

    def __init__(
        self,
        settings: EdgeSettings | None = None,
        routes: RouteTable | None = None,
    ) -> None:
        self.settings = settings or EdgeSettings()
        self.routes = routes or RouteTable()
        self.upstreams: Mapping[str, _Upstream] = {
            service: _Upstream.parse(url) for service, url in self.settings.upstreams().items()
        }
        missing = {route.service for route in self.routes.routes} - set(self.upstreams)
        if missing:
            raise ValueError(f"the route table names services without a URL: {sorted(missing)}")
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "mldiag_edge_requests_total",
            "Requests the edge forwarded, by service and status.",
            ["service", "status"],
            registry=self.registry,
        )
        self._unreachable = Counter(
            "mldiag_edge_unreachable_total",
            "Requests answered 503 because their service could not be reached.",
            ["service"],
            registry=self.registry,
        )
        self._pool: httpcore.AsyncConnectionPool | None = None
        self._timeouts = {
            "connect": self.settings.connect_timeout_seconds,
            "read": self.settings.read_timeout_seconds,
            "write": self.settings.read_timeout_seconds,
            "pool": self.settings.connect_timeout_seconds,
        }

    @property
    def pool(self) -> httpcore.AsyncConnectionPool:
        """The pooled connections (opened by the lifespan, or on first use in tests)."""
        if self._pool is None:
            limit = self.settings.max_connections
            self._pool = httpcore.AsyncConnectionPool(
                max_connections=limit * len(self.upstreams),
                max_keepalive_connections=limit * len(self.upstreams),
                keepalive_expiry=60.0,
            )
        return self._pool

    async def aclose(self) -> None:
        """Close the pooled connections."""
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None

    async def __call__(self, scope: Scope, receive: _Receive, send: _Send) -> None:
        """ASGI entry point."""
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            # WebSockets: no service uses them (the console's live pages are SSE).
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive: _Receive, send: _Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _ = self.pool
                log.info("edge.started", upstreams={k: v.text for k, v in self.upstreams.items()})
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: _Receive, send: _Send) -> None:
        path: str = scope["path"]
        if path == HEALTH_PATH:
            await _answer(send, 200, b'{"status":"ok","service":"edge"}', b"application/json")
            return
        if path == METRICS_PATH:
            await _answer(send, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST.encode())
            return
        if path in (DOCUMENT_PATH, DOCS_PATH) and scope["method"] in ("GET", "HEAD"):
            await self._describe(path, send)
            return
        service = self.routes.service_for(path)
        try:
            upstream = await self._send_upstream(scope, receive, service)
        except _CallerGone:
            # Hung up mid-upload: the service saw a cut body, and no one waits for an answer.
            log.info("edge.caller.gone", service=service, path=path)
            return
        except _UNREACHABLE as error:
            # Connect errors, resets before an answer, timeouts: the caller may try again.
            self._unreachable.labels(service).inc()
            log.warning(
                "edge.upstream.unreachable",
                service=service,
                path=path,
                error=f"{type(error).__name__}: {error}",
            )
            await _unavailable(send, service)
            return
        self._requests.labels(service, str(upstream.status)).inc()
        try:
            await self._relay(scope, receive, send, upstream)
        finally:
            await upstream.aclose()

    async def _describe(self, path: str, send: _Send) -> None:
        """Answer the merged OpenAPI document (built from each service's, asked now, so it
        describes the versions running) or the Swagger UI page that reads it."""
        if path == DOCS_PATH:
            # Imported here: only this page needs FastAPI in the edge's process.
            from fastapi.openapi.docs import get_swagger_ui_html  # noqa: PLC0415

            page = get_swagger_ui_html(openapi_url=DOCUMENT_PATH, title="mldiag API").body
            await _answer(send, 200, bytes(page), b"text/html; charset=utf-8")
            return
        documents: dict[str, Any] = {}
        for service in dict.fromkeys(route.service for route in self.routes.routes):
            upstream = self.upstreams[service]
            url = httpcore.URL(
                scheme=upstream.scheme,
                host=upstream.host,
                port=upstream.port,
                target=upstream.prefix + DOCUMENT_PATH.encode(),
            )
            try:
                answer = await self.pool.request("GET", url, extensions={"timeout": self._timeouts})
            except _UNREACHABLE as error:
                log.warning("edge.document.unreachable", service=service, error=str(error))
                await _unavailable(send, service)
                return
            if answer.status != 200:
                log.warning("edge.document.refused", service=service, status=answer.status)
                await _unavailable(send, service)
                return
            documents[service] = json.loads(answer.content)
        body = render(merge(documents, self.routes)).encode()
        await _answer(send, 200, body, b"application/json")

    async def _send_upstream(
        self, scope: Scope, receive: _Receive, service: str
    ) -> httpcore.Response:
        upstream = self.upstreams[service]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        target = upstream.prefix + raw_path + (b"?" + query if query else b"")
        headers, length, chunked = _forwarded_headers(scope)
        content: bytes | AsyncIterator[bytes] = b""
        if length is not None and length <= SMALL_BODY_BYTES:
            content = await _read_body(receive) if length else b""
        elif length is not None or chunked:
            content = _body_chunks(receive)
            if length is None:
                headers.append((b"transfer-encoding", b"chunked"))
        request = httpcore.Request(
            scope["method"],
            httpcore.URL(
                scheme=upstream.scheme, host=upstream.host, port=upstream.port, target=target
            ),
            headers=headers,
            content=content,
            extensions={"timeout": self._timeouts},
        )
        return await self.pool.handle_async_request(request)

    async def _relay(
        self, scope: Scope, receive: _Receive, send: _Send, upstream: httpcore.Response
    ) -> None:
        headers = [
            (name, value) for name, value in upstream.headers if name.lower() not in _HOP_BY_HOP
        ]
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        if any(name.lower() == b"content-length" for name, _ in upstream.headers):
            # Bounded: relay it; a caller gone meanwhile makes the sends no-ops.
            await _relay_body(send, upstream)
            return
        # Unbounded (server-sent events, a followed log): stop when the caller goes away.
        relay = asyncio.ensure_future(_relay_body(send, upstream))
        gone = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (relay, gone):
                task.cancel()
            for task in (relay, gone):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if relay.done() and not relay.cancelled() and relay.exception() is not None:
            raise relay.exception()  # type: ignore[misc]  # checked not None just above


@dataclass(frozen=True)
class _Upstream:
    """A service's base URL, split the way httpcore takes it."""

    text: str
    scheme: bytes
    host: bytes
    port: int
    prefix: bytes
    """A path the service is mounted under (usually none), put before every request's path."""

    @classmethod
    def parse(cls, url: str) -> "_Upstream":
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a service URL must be http(s)://host[:port], not {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(url, parts.scheme.encode(), parts.hostname.encode(), port, parts.path.encode())


_UNREACHABLE = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.ConnectionNotAvailable,
)
"""Connect errors, resets before an answer, timeouts: the caller may try again."""


def _forwarded_headers(scope: Scope) -> tuple[list[tuple[bytes, bytes]], int | None, bool]:
    """The headers the service gets, the declared body length, and whether the body is
    chunked (a body of no declared length)."""
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    forwarded_for = b""
    forwarded_host = b""
    forwarded_proto = b""
    host = b""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    # Headers the caller named in Connection are for this hop only, like the fixed set.
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    for name, value in raw:
        lowered = name.lower()
        if lowered in _HOP_BY_HOP or lowered in named:
            chunked = chunked or (lowered == b"transfer-encoding" and b"chunked" in value.lower())
            continue
        if lowered == b"content-length":
            with contextlib.suppress(ValueError):
                length = int(value)
        elif lowered == b"host":
            host = value
        elif lowered == b"x-forwarded-for":
            forwarded_for = value
            continue
        elif lowered == b"x-forwarded-host":
            forwarded_host = value
        elif lowered == b"x-forwarded-proto":
            forwarded_proto = value
        headers.append((name, value))
    client = scope.get("client")
    if client:
        address = client[0].encode()
        headers.append(
            (b"x-forwarded-for", forwarded_for + b", " + address if forwarded_for else address)
        )
    if not forwarded_host and host:
        headers.append((b"x-forwarded-host", host))
    if not forwarded_proto:
        headers.append((b"x-forwarded-proto", scope.get("scheme", "http").encode()))
    return headers, length, chunked


async def _read_body(receive: _Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _CallerGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _body_chunks(receive: _Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _CallerGone
        body: bytes = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body", False):
            return


class _CallerGone(httpcore.NetworkError):
    """The caller hung up while sending its body: nothing to answer."""

    def __init__(self) -> None:
        super().__init__("the caller went away while sending its body")


async def _relay_body(send: _Send, upstream: httpcore.Response) -> None:
    stream = upstream.stream
    if not isinstance(stream, AsyncIterable):
        raise TypeError("an async pool answers with an async stream")
    async for chunk in stream:
        if chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _until_disconnect(receive: _Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: _Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send: _Send, service: str) -> None:
    body = ErrorBody(
        error=ErrorDetail(
            code="unavailable",
            message=f"{service} cannot be reached right now; try again",
            details=[{"service": service}],
        )
    )
    raw = body.model_dump_json().encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


def create_app(settings: EdgeSettings | None = None) -> Edge:
    """The edge for ``settings`` (default: from the environment)."""
    return Edge(settings)
