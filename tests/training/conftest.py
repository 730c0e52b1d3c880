"""The training service, served in-process with real NATS and PostgreSQL, for its tests."""

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_schemas.auth import Role
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import serving


@pytest.fixture
def training_settings(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    tmp_path: Path,
) -> TrainingSettings:
    """Settings of a training service on this test's namespace, schema and storage."""
    return TrainingSettings(
        nats=nats_settings,
        database=database_settings,
        db_schema=db_schema,
        storage=StorageSettings(url=f"file://{tmp_path / 'storage'}"),
    )


@pytest.fixture
async def training_api(
    training_settings: TrainingSettings, api_tokens: ApiTokens
) -> AsyncIterator[httpx.AsyncClient]:
    """An editor's client of a training service (its lifespan running: scheduler too)."""
    async with serving(create_app(training_settings), api_tokens.headers(Role.EDITOR)) as client:
        yield client


@pytest.fixture
async def training_db(
    database_settings: DatabaseSettings, db_schema: str
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the training service's schema, to look at (or arrange) its rows."""
    pool = await create_pool(database_settings, db_schema)
    yield pool
    await pool.close()
