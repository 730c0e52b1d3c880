"""A registry storing profiles under a temporary folder, and the retention parts built on
its database, for the retention tests (real NATS, PostgreSQL and local object storage)."""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_platform.database import create_pool
from mldiag_platform.outbox import Outbox
from mldiag_platform.settings import DatabaseSettings, StorageSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.events.repository import EventsRepository
from mldiag_run_registry.heartbeats.repository import HeartbeatsRepository
from mldiag_run_registry.logs.repository import LogsRepository
from mldiag_run_registry.logs.retention import LogRetention
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.operations.repository import OperationsRepository
from mldiag_run_registry.profiles.repository import ProfilesRepository
from mldiag_run_registry.retention.repository import RetentionRepository
from mldiag_run_registry.retention.service import (
    MetricRetention,
    RetentionService,
    RetentionSweeper,
    RunPurger,
)
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from support import serving


@dataclass
class Retention:
    """A served registry (an admin's client) and retention parts on its database."""

    api: httpx.AsyncClient
    pool: asyncpg.Pool
    storage: Path
    policies: RetentionService
    repository: RetentionRepository
    runs: RunRepository
    metrics: MetricsRepository
    purger: RunPurger
    sweeper: RetentionSweeper
    outbox: Outbox
    schema: str

    def purger_with(self, metrics: MetricRetention) -> RunPurger:
        """Another purger on the same database, whose metric store is ``metrics``."""
        operations = OperationsRepository(self.pool)
        return RunPurger(
            self.runs,
            metrics,
            EventsRepository(self.pool),
            LogRetention(LogsRepository(self.pool), 30),
            ProfilesRepository(self.pool, self.outbox, operations),
            HeartbeatsRepository(self.pool),
            operations,
        )


@pytest.fixture
async def retention(
    registry_settings_with: RegistrySettings,
    api_tokens: ApiTokens,
    database_settings: DatabaseSettings,
    db_schema: str,
    publisher: Publisher,
    tmp_path: Path,
) -> AsyncIterator[Retention]:
    """The registry (its own sweeper a day away: tests sweep with their own clock)."""
    storage = tmp_path / "artifacts"
    settings = registry_settings_with(
        storage=StorageSettings(url=f"file://{storage}"), retention_sweep_seconds=86_400.0
    )
    app = create_app(settings)
    async with serving(app, api_tokens.headers(Role.ADMIN)) as api:
        pool = await create_pool(database_settings, db_schema)
        try:
            repository = RetentionRepository(pool)
            policies: RetentionService = app.state.retention
            purger: RunPurger = app.state.purger
            outbox = Outbox(pool, publisher)
            runs = RunRepository(pool, outbox)
            metrics = MetricsRepository(pool, db_schema)
            sweeper = RetentionSweeper(policies, repository, runs, metrics, purger)
            yield Retention(
                api,
                pool,
                storage,
                policies,
                repository,
                runs,
                metrics,
                purger,
                sweeper,
                outbox,
                db_schema,
            )
        finally:
            await pool.close()
