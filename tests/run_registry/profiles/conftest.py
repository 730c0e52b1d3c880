"""A registry with a known storage root and XProf address, for the profiles tests."""

from collections.abc import AsyncIterator

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_schemas.auth import Role
from run_registry.profiles.helpers import STORAGE_ROOT, XPROF_URL
from support import serving


@pytest.fixture
async def profiles_api(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of a registry storing under ``STORAGE_ROOT``."""
    settings = RunRegistrySettings(
        nats=nats_settings,
        database=database_settings,
        db_schema=db_schema,
        storage=StorageSettings(url=STORAGE_ROOT),
        xprof_url=XPROF_URL + "/",
    )
    async with serving(create_app(settings), api_tokens.headers(Role.EDITOR)) as client:
        yield client
