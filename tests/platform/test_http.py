"""The HTTP shell: health, metrics, the one error boundary, and the checks every request
passes before a handler (body size, control characters, NUL and ranges in bodies)."""

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel
from starlette.types import Message, Receive, Scope, Send

from mldiag_platform.errors import InvalidArgument, NotFound, Unavailable
from mldiag_platform.http import (
    ContractResponse,
    HealthCheck,
    create_http_app,
    json_body,
    parse_body,
    read_body,
)
from mldiag_schemas.telemetry import SeriesPoint
from support import served_on_port, serving


def _app(checks: dict[str, HealthCheck]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield

    app = create_http_app("test", lifespan, checks)

    @app.get("/missing")
    async def missing() -> Response:
        raise NotFound("no such thing")

    @app.get("/crash")
    async def crash() -> Response:
        raise RuntimeError("secret internal detail")

    @app.get("/busy")
    async def busy() -> Response:
        raise Unavailable("the bus did not take the message")

    @app.get("/nan")
    async def nan() -> Response:
        return ContractResponse(
            SeriesPoint(step=1, value=math.nan, time="2026-01-01T00:00:00Z", host="")
        )

    return app


async def _ok() -> bool:
    return True


async def _down() -> bool:
    raise ConnectionError("gone")


async def test_health_is_200_only_when_every_check_passes() -> None:
    async with serving(_app({"nats": _ok})) as client:
        response = await client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok", "service": "test", "checks": {"nats": True}}
    async with serving(_app({"nats": _ok, "database": _down})) as client:
        response = await client.get("/healthz")
        assert response.status_code == 503
        assert response.json()["checks"] == {"nats": True, "database": False}
    async with serving(_app({})) as client:  # not started yet: no checks registered
        assert (await client.get("/healthz")).status_code == 503


async def test_domain_errors_map_to_their_status_and_code() -> None:
    async with serving(_app({"x": _ok})) as client:
        response = await client.get("/missing")
        assert response.status_code == 404
        assert response.json() == {
            "error": {"code": "not_found", "message": "no such thing", "details": []}
        }


async def test_crashes_are_a_500_without_internals() -> None:
    async with serving(_app({"x": _ok})) as client:
        response = await client.get("/crash")
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "internal"
        assert "secret" not in response.text


async def test_nan_survives_responses_and_metrics_are_exposed() -> None:
    async with serving(_app({"x": _ok})) as client:
        assert b'"value":NaN' in (await client.get("/nan")).content
        metrics = await client.get("/metrics")
        assert 'mldiag_http_requests_total{method="GET",route="/nan",status="200"}' in metrics.text


class _Inner(BaseModel):
    when: datetime | None = None
    count: int = 0


class _Body(BaseModel):
    name: str = ""
    inner: list[_Inner] = []
    free: dict[str, Any] = {}


_LIMIT = 1024


def _limited_app() -> FastAPI:
    app = create_http_app("test", None, {}, max_body_bytes=_LIMIT)

    @app.post("/echo", openapi_extra=json_body(_Body))
    async def echo(request: Request) -> Response:
        return Response(str(len(await request.body())))

    @app.post("/either", openapi_extra=json_body(_Inner, _Body))
    async def either(request: Request) -> Response:
        return Response(await request.body())

    @app.post("/declared")
    async def declared(body: _Body) -> Response:  # FastAPI reads and parses this one
        return Response(body.name)

    @app.get("/items/{item}")
    async def item(item: str, request: Request) -> Response:
        return Response(item + "|" + request.query_params.get("q", ""))

    return app


async def _chunks(total: int, sent: list[int]) -> AsyncIterator[bytes]:
    for _ in range(total // 256):
        sent[0] += 256
        yield b" " * 256


@pytest.mark.parametrize("path", ["/echo", "/declared"])
async def test_bodies_over_the_limit_get_413_and_are_not_read_whole(path: str) -> None:
    async with serving(_limited_app()) as client:
        declared = await client.post(path, content=b" " * (_LIMIT + 1))
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == "payload_too_large"
        sent = [0]
        chunked = await client.post(path, content=_chunks(1024 * 1024, sent))
        assert chunked.status_code == 413
        assert chunked.json()["error"]["code"] == "payload_too_large"
        assert sent[0] <= _LIMIT + 256  # reading stopped at the chunk that crossed it
        within = await client.post("/echo", content=b"x" * _LIMIT)
        assert (within.status_code, within.text) == (200, str(_LIMIT))


async def test_a_path_prefix_may_have_its_own_body_limit() -> None:
    app = create_http_app("test", None, {}, max_body_bytes=_LIMIT, body_limits={"/upload/": 8192})

    @app.post("/upload/files")
    @app.post("/small")
    async def count(request: Request) -> Response:
        return Response(str(len(await request.body())))

    async with serving(app) as client:
        upload = await client.post("/upload/files", content=b"x" * 4096)
        assert (upload.status_code, upload.text) == (200, "4096")
        small = await client.post("/small", content=b"x" * 4096)
        assert small.status_code == 413  # the other routes keep max_body_bytes
        over = await client.post("/upload/files", content=_chunks(16384, [0]))
        assert over.status_code == 413
        assert over.json()["error"]["details"] == [{"limit": 8192}]


async def test_a_chunked_body_over_the_limit_gets_413_from_a_real_server() -> None:
    app = _limited_app()
    delivered = [0]

    async def counting(scope: Scope, receive: Receive, send: Send) -> None:
        """What uvicorn hands the app: the bytes the app could have held."""

        async def counted() -> Message:
            message = await receive()
            delivered[0] += len(message.get("body", b""))
            return message

        await app(scope, counted, send)

    served = FastAPI()
    served.mount("/", counting)
    total = 64 * 1024 * 1024
    async with served_on_port(served) as base_url, httpx.AsyncClient() as client:
        response = await client.post(f"{base_url}/echo", content=_chunks(total, [0]))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert delivered[0] < 1024 * 1024  # of 64 MiB sent: reading stopped near the limit


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ("/items/a%00b", "path"),
        ("/items/a%0Bb", "path"),
        ("/items/ab%0A", "path"),
        ("/items/ab%7F", "path"),
        ("/items/ab?q=x%00", "query.q"),
        ("/items/ab?q=%1B%5B31m", "query.q"),
        ("/items/ab?x%01=1", "query.x\x01"),
    ],
)
async def test_control_characters_in_the_target_are_a_400(target: str, field: str) -> None:
    async with serving(_limited_app()) as client:
        response = await client.get(target)
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["details"][0]["field"]) == ("invalid_argument", field)


async def test_tab_and_newline_in_a_query_value_pass() -> None:
    async with serving(_limited_app()) as client:
        response = await client.get("/items/ab", params={"q": "a\tb\nc"})
        assert (response.status_code, response.text) == (200, "ab|a\tb\nc")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"name": "a\\u0000b"}', "name"),
        (b'{"free": {"k\\u0000": 1}}', "free.k\x00"),
        (b'{"free": {"k": [1, {"deep": "\\u0000"}]}}', "free.k.1.deep"),
        (b'{"inner": [{}, {"count": 9223372036854775808}]}', "inner.1.count"),
        (b'{"inner": [{"when": "0001-01-01T00:00:00+14:00"}]}', "inner.0.when"),
        (b'{"inner": [{"when": "9999-12-31T23:59:59-01:00"}]}', "inner.0.when"),
    ],
)
def test_parse_body_refuses_what_no_column_stores(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_body(_Body, raw)
    assert refused.value.details[0]["field"] == field


def test_parse_body_keeps_what_columns_store() -> None:
    body = parse_body(
        _Body,
        b'{"name": "C:\\\\u0000", "free": {"seed": 18446744073709551615},'
        b' "inner": [{"count": -9223372036854775808, "when": "0001-01-01T00:00:00Z"}]}',
    )
    assert body.name == "C:\\u0000"  # an escaped backslash, then text
    assert body.free == {"seed": 2**64 - 1}  # free-form JSON is stored as JSON, any size
    assert body.inner[0].count == -(2**63)


async def test_a_deep_body_is_a_400_not_a_crash() -> None:
    app = create_http_app("test", None, {})

    @app.post("/parse")
    async def parse(request: Request) -> Response:
        return Response((await read_body(request, _Body)).name)

    async with serving(app) as client:
        response = await client.post("/parse", content=b'{"free":' + b"[" * 100_000)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_argument"


def test_the_openapi_document_declares_bodies_and_the_error_body() -> None:
    document = _limited_app().openapi()
    echo = document["paths"]["/echo"]["post"]
    schema = echo["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["inner"]["items"] == {"$ref": "#/components/schemas/_Inner"}
    assert "$defs" not in schema
    assert "_Inner" in document["components"]["schemas"]
    error = echo["responses"]["4XX"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorBody"}
    assert "422" not in document["paths"]["/items/{item}"]["get"]["responses"]
    either = document["paths"]["/either"]["post"]["requestBody"]["content"]["application/json"]
    assert [one["title"] for one in either["schema"]["anyOf"]] == ["_Inner", "_Body"]


async def test_an_unavailable_dependency_is_a_503_worth_retrying() -> None:
    async with serving(_app({"ok": _ok})) as client:
        response = await client.get("/busy")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert response.headers["Retry-After"] == "1"
