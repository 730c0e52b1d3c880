"""The HTTP shell: health, metrics, and the one error boundary."""

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response

from mldiag_platform.errors import NotFound
from mldiag_platform.http import ContractResponse, HealthCheck, create_http_app
from mldiag_schemas.telemetry import SeriesPoint
from support import serving


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
