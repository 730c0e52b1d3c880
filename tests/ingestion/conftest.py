"""Ingestion served in-process against this test's NATS namespace, for its HTTP tests."""

from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import ApiTokens
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from support import serving


@pytest.fixture
async def api(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of ingestion (OTLP's own ports left to the system to pick)."""
    settings = IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    async with serving(create_app(settings), api_tokens.headers()) as client:
        yield client
