"""A real training service (NATS, PostgreSQL, file:// storage) served in a thread for the
CLI's connected tests, and a way to read its tables."""

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import structlog

from mldiag_platform.settings import DatabaseSettings, NatsSettings, StorageSettings
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import served_in_thread


@dataclass(frozen=True)
class Training:
    """A served training API, its storage root and its tables."""

    api_url: str
    storage: Path
    database_url: str
    schema: str

    def sql(self, query: str, *params: Any) -> Any:
        """Run one statement on the service's schema (arranging what the scheduler or a
        controller would)."""

        async def run() -> Any:
            connection = await asyncpg.connect(self.database_url)
            try:
                await connection.execute(f'SET search_path TO "{self.schema}"')
                return await connection.fetch(query, *params)
            finally:
                await connection.close()

        return asyncio.run(run())

    def end_when_created(self, state: str, log: bytes = b"") -> threading.Thread:
        """In the background: once a custom job exists, write its chief's log and end it."""

        def work() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                rows = self.sql("SELECT job_id FROM custom_jobs WHERE state = 'JOB_STATE_QUEUED'")
                if rows:
                    job = rows[0]["job_id"]
                    path = self.storage / f"jobs/{job}/logs/workerpool0-0/attempt-0/stdout.log"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(log)
                    time.sleep(0.3)
                    self.sql(
                        "UPDATE custom_jobs SET state = $2, end_time = now() WHERE job_id = $1",
                        job,
                        state,
                    )
                    return
                time.sleep(0.1)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        return thread


@contextmanager
def serve_training(
    nats: NatsSettings, database: DatabaseSettings, schema: str, storage: Path
) -> Iterator[Training]:
    """The training service, served until the block ends; the scheduler never ticks (a
    test plays its part), so custom jobs stay where the API put them."""
    settings = TrainingSettings(
        nats=nats,
        database=database,
        db_schema=schema,
        storage=StorageSettings(url=f"file://{storage}"),
        logs_poll_seconds=0.05,
        tick_seconds=3600.0,
    )
    # The server's info events would land in the stdout the CLI's output is read from.
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        with served_in_thread(create_app(settings)) as url:
            yield Training(url, storage, database.url, schema)
    finally:
        structlog.configure(**saved)
