"""The edge as callers meet it: real uvicorn servers on loopback, one edge in front of two
stand-in services, requests and answers checked byte for byte, streams both ways."""

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from mldiag_platform.edge.app import HEALTH_PATH, METRICS_PATH, Edge
from mldiag_platform.edge.settings import EdgeSettings
from support import free_port, served_on_port


@dataclass
class Seen:
    """What a stand-in service was sent."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _service(name: str, seen: Seen) -> FastAPI:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"])
    async def anything(request: Request, path: str) -> Response:
        body = await request.body()
        seen.requests.append(
            {
                "method": request.method,
                "raw_path": request.scope["raw_path"],
                "query": request.scope["query_string"],
                "headers": request.headers,
                "sha": hashlib.sha256(body).hexdigest(),
                "size": len(body),
            }
        )
        if path.endswith(":watch"):

            async def events() -> AsyncIterator[bytes]:
                try:
                    yield b"data: first\n\n"
                    await seen.release.wait()
                    yield b"data: second\n\n"
                finally:
                    seen.stream_closed.set()

            return StreamingResponse(events(), media_type="text/event-stream")
        if path == "big":
            return Response(b"z" * 3_000_000, media_type="application/octet-stream")
        return Response(
            f'{{"service":"{name}"}}',
            media_type="application/json",
            headers={"x-service": name, "set-cookie": "a=1", "server": "stand-in"},
        )

    return app


def _serving(app: Any, port: int) -> AbstractAsyncContextManager[str]:
    # As the edge's __main__ serves: no Server or Date header of its own.
    return served_on_port(app, port, access_log=False, server_header=False, date_header=False)


@dataclass
class Setup:
    edge: str
    registry: Seen
    ingestion: Seen


def _dead_port() -> int:
    # Bound and closed: nothing listens there for the test's duration (as good as it gets).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    registry, ingestion = Seen(), Seen()
    registry_port, ingestion_port, edge_port = free_port(), free_port(), free_port()
    settings = EdgeSettings(
        port=edge_port,
        run_registry_url=f"http://127.0.0.1:{registry_port}",
        ingestion_url=f"http://127.0.0.1:{ingestion_port}/",
        training_url=f"http://127.0.0.1:{_dead_port()}",
        connect_timeout_seconds=2.0,
    )
    async with (
        _serving(_service("run-registry", registry), registry_port),
        _serving(_service("ingestion", ingestion), ingestion_port),
        _serving(Edge(settings), edge_port),
    ):
        yield Setup(f"http://127.0.0.1:{edge_port}", registry, ingestion)


async def test_each_path_reaches_the_service_that_serves_it(setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        read = await client.get("/v1/projects/p/locations/us-central1/machineLearningRuns/r1")
        write = await client.post("/v1/machineLearningRuns/r1/metrics:write", content=b"{}")
        otlp = await client.post("/v1/metrics", content=b"\x00\x01")
    assert read.json() == {"service": "run-registry"}
    assert write.json() == {"service": "ingestion"}
    assert otlp.json() == {"service": "ingestion"}
    assert [r["raw_path"] for r in setup.ingestion.requests] == [
        b"/v1/machineLearningRuns/r1/metrics:write",
        b"/v1/metrics",
    ]


async def test_the_request_reaches_the_service_as_sent(setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        answer = await client.get(
            "/v1/operations/o1%40v2?%24alt=json%3Benum-encoding%3Dint&a=1&a=2",
            headers={
                "authorization": "Bearer t",
                "connection": "keep-alive, x-private",
                "x-private": "hop",
            },
        )
    assert answer.status_code == 200
    (seen,) = setup.registry.requests
    # The path and query untouched (an encoded '@' stays encoded, as the Vertex SDK sends it).
    assert seen["raw_path"] == b"/v1/operations/o1%40v2"
    assert seen["query"] == b"%24alt=json%3Benum-encoding%3Dint&a=1&a=2"
    headers = seen["headers"]
    assert headers["authorization"] == "Bearer t"
    # The caller's Host, so links a service builds point at the edge.
    assert headers["host"] == setup.edge.removeprefix("http://")
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-host"] == setup.edge.removeprefix("http://")
    # Hop-by-hop headers, and those the caller's Connection names, stop at the edge.
    assert "x-private" not in headers
    # The service's own headers come back, its Server header included.
    assert answer.headers["x-service"] == "run-registry"
    assert answer.headers["set-cookie"] == "a=1"
    assert answer.headers["server"] == "stand-in"


async def test_models_go_to_training_and_an_absent_service_is_a_503(setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        answer = await client.post("/v1/projects/p/locations/l/customJobs", json={})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "unavailable"
    assert "training" in answer.json()["error"]["message"]


async def test_bodies_stream_both_ways_intact(setup: Setup) -> None:
    payload = bytes(range(256)) * 20_000  # 5 MB, above the read-at-once size

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 65_536):
            yield payload[start : start + 65_536]

    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        sized = await client.put("/v1/machineLearningRuns/r1", content=payload)
        chunked = await client.put("/v1/machineLearningRuns/r1", content=chunks())
        big = await client.get("/big")
    assert sized.status_code == chunked.status_code == 200
    digest = hashlib.sha256(payload).hexdigest()
    assert [(r["size"], r["sha"]) for r in setup.registry.requests[:2]] == [
        (len(payload), digest),
        (len(payload), digest),
    ]
    assert big.content == b"z" * 3_000_000
    assert big.headers["content-length"] == "3000000"


async def test_events_pass_as_they_come_and_a_caller_leaving_closes_the_stream(
    setup: Setup,
) -> None:
    async with (
        httpx.AsyncClient(base_url=setup.edge, trust_env=False, timeout=5) as client,
        client.stream("GET", "/v1/machineLearningRuns/r1:watch") as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        chunks = stream.aiter_raw()
        # The first event arrives while the service still holds the stream open.
        assert await asyncio.wait_for(chunks.__anext__(), 5) == b"data: first\n\n"
        assert not setup.registry.stream_closed.is_set()
    # The caller went away: the edge lets go of the service's stream as well.
    await asyncio.wait_for(setup.registry.stream_closed.wait(), 5)


async def test_a_stream_the_service_ends_ends_for_the_caller(setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False, timeout=5) as client:
        setup.registry.release.set()
        answer = await client.get("/v1/machineLearningRuns/r1:watch")
    assert answer.content == b"data: first\n\ndata: second\n\n"


async def test_head_and_the_edges_own_paths(setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        head = await client.head("/big")
        health = await client.get(HEALTH_PATH)
        # /healthz is a path like any other: the registry's, as behind the Ingress.
        registry_health = await client.get("/healthz")
        metrics = await client.get(METRICS_PATH)
    assert head.status_code == 200
    assert head.content == b""
    assert health.json() == {"status": "ok", "service": "edge"}
    assert registry_health.json() == {"service": "run-registry"}
    assert 'mldiag_edge_requests_total{service="run-registry",status="200"}' in metrics.text


def test_every_service_of_the_table_needs_a_url() -> None:
    assert set(EdgeSettings().upstreams()) == {
        "run-registry",
        "ingestion",
        "training",
        "xprof-provisioner",
        "notifier",
    }


async def test_a_caller_hanging_up_mid_upload_leaves_the_edge_serving(setup: Setup) -> None:
    host, port = setup.edge.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"PUT /v1/machineLearningRuns/r1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
        + b"a" * 300_000
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    del reader
    async with httpx.AsyncClient(base_url=setup.edge, trust_env=False) as client:
        answer = await client.get("/v1/machineLearningRuns/r2")
    assert answer.json() == {"service": "run-registry"}
    # The cut body never reached the service as a whole request.
    assert all(request["size"] != 1_000_000 for request in setup.registry.requests)
