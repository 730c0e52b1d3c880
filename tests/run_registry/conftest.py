"""The registry app, served in-process with real NATS and PostgreSQL, for its tests."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from support import serving


@pytest.fixture
def registry_settings_with(
    nats_settings: NatsSettings, database_settings: DatabaseSettings, db_schema: str
) -> RegistrySettings:
    """Build :data:`RegistrySettings` (``registry_settings_with(public_url=...)``)."""

    def build(**overrides: Any) -> RunRegistrySettings:
        return RunRegistrySettings(
            nats=nats_settings, database=database_settings, db_schema=db_schema, **overrides
        )

    return build


@pytest.fixture
async def api(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An admin's client of a registry on this test's namespace and schema."""
    settings = registry_settings_with()
    async with serving(create_app(settings), api_tokens.headers(Role.ADMIN)) as client:
        yield client
