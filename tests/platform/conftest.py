"""Fixtures of the platform's connected tests."""

from collections.abc import AsyncIterator

import asyncpg
import pytest

from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings


@pytest.fixture
async def pool(database_settings: DatabaseSettings, db_schema: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a schema of this test's own, dropped afterwards."""
    pool = await create_pool(database_settings, db_schema)
    yield pool
    await pool.execute(f"DROP SCHEMA IF EXISTS {db_schema} CASCADE")
    await pool.close()
