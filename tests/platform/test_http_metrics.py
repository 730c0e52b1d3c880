"""What every service's HTTP shell exports on /metrics beyond requests and latency."""

from collections.abc import AsyncIterator

from fastapi import FastAPI, Request, Response
from prometheus_client import REGISTRY

from mldiag_platform.http import create_http_app
from support import serving


def _bytes_read(route: str) -> float:
    value = REGISTRY.get_sample_value("mldiag_http_request_bytes_total", {"route": route})
    return value or 0.0


async def _two_chunks() -> AsyncIterator[bytes]:
    yield b"z" * 1000
    yield b"z" * 1000


def _app() -> FastAPI:
    app = create_http_app("test", None, {}, max_body_bytes=1024)

    @app.post("/things/{thing}:write")
    async def write(request: Request) -> Response:
        return Response(str(len(await request.body())), status_code=202)

    return app


async def test_request_bytes_are_counted_per_route_template_also_when_refused() -> None:
    before = _bytes_read("/things/{thing}:write")
    async with serving(_app()) as client:
        assert (await client.post("/things/a:write", content=b"x" * 300)).status_code == 202
        assert (await client.post("/things/b:write", content=b"y" * 200)).status_code == 202

        over = await client.post("/things/c:write", content=_two_chunks())
        assert over.status_code == 413
    # The refused body counts what was read before the limit stopped it, no more.
    counted = _bytes_read("/things/{thing}:write") - before
    assert 500 + 1000 <= counted <= 500 + 2000
