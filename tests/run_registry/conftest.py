"""The registry app, served in-process with real NATS and PostgreSQL, for its tests."""

from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Role
from support import serving


@pytest.fixture
async def api(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
) -> AsyncIterator[httpx.AsyncClient]:
    """An admin's client of a registry on this test's namespace and schema."""
    settings = RunRegistrySettings(
        nats=nats_settings, database=database_settings, db_schema=db_schema
    )
    async with serving(create_app(settings), api_tokens.headers(Role.ADMIN)) as client:
        yield client
